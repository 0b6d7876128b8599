"""App Home, ``/threadpilot`` and the feedback buttons, driven as Slack drives them.

docs/slack-setup.md (Home tab, /threadpilot): App Home lists the viewer's live runs with
Stop and Abort and their recent runs with outcome and why they ended; admins see every
run and ``Stop all`` (with a confirmation); every control goes through the stop
service; the view refreshes when a listed run changes, within ``views.publish``'s
budget. ``/threadpilot list`` and ``stop all`` answer ephemerally with the same controls.
The terminal message carries feedback buttons; a press is an audit event, shown in App
Home's history.

The fake Slack here enforces Slack's rate tiers (``SLACK_TIERS``): a call over a
method's limit in any minute is answered 429, and no test may see one.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

import pytest

from agent_core import AuditEvent, ExitCode, Outcome, RunRecord, RunState, ThreadKey
from agent_core.values.clock import utcnow
from bot import messages
from bot.slack_api.channels import ChannelPrivacy
from bot.views.home import ACTION_HOME_ABORT, ACTION_HOME_STOP, ACTION_STOP_ALL
from tests.bot.harness import (
    SECRET,
    SHORT_TEXT,
    WAIT_S,
    block_text,
    run_id_of,
    stalled_answer,
)
from tests.fakes import slack_requests
from tests.fakes.slack_api import SLACK_TIERS, FakeSlack
from tests.fakes.slack_workspace import (
    DEFAULT_CHANNEL,
    DEFAULT_DM_CHANNEL,
    DEFAULT_GROUP_DM_CHANNEL,
    DEFAULT_USER,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from bot.slack_api.surface import Workspaces
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_workspace import Json

ADMIN = "U0TPADMIN01"
OTHER = "U0TPOTHER01"
STOPPED_EARLY = "Stopped early: the time was not checked."


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(rate_limits=SLACK_TIERS) as fake:
        yield fake
        assert fake.rate_limited() == [], "the app went over one of Slack's rate tiers"


# -- helpers ---------------------------------------------------------------------------


async def open_home(bot: Bot, user: str = DEFAULT_USER) -> None:
    assert await bot.event(slack_requests.app_home_opened(user=user)) == 200


async def home(bot: Bot, user: str, predicate: Callable[[Json], bool]) -> Json:
    """``user``'s Home tab as last published, once ``predicate`` holds for it."""

    def check(slack: FakeSlack) -> Json | None:
        view = slack.state.home_view(user)
        return view if view is not None and predicate(view) else None

    view = await bot.slack.wait_until(check, timeout=WAIT_S)
    assert view is not None
    return view


def says(*parts: str) -> Callable[[Json], bool]:
    return lambda view: all(part in view_text(view) for part in parts)


def view_text(view: Json) -> str:
    return json.dumps(view["blocks"], ensure_ascii=False)


def home_buttons(view: Json) -> list[tuple[str, str]]:
    return [
        (element["action_id"], element["value"])
        for block in view["blocks"]
        for element in block.get("elements", [])
        if isinstance(element, dict) and element.get("type") == "button"
    ]


def stop_buttons(view: Json) -> int:
    return sum(action == ACTION_HOME_STOP for action, _ in home_buttons(view))


def hidden_runs(view: Json) -> int:
    """The live runs a view counts in its "... and N more" line, not shown."""
    found = re.search(r"… and ([0-9,]+) more live runs", view_text(view))
    return int(found.group(1).replace(",", "")) if found else 0


async def press(bot: Bot, payload: Json) -> int:
    response = await bot.post(slack_requests.interaction_request(payload, SECRET))
    return response.status


async def command(bot: Bot, text: str, *, user: str = DEFAULT_USER) -> tuple[Json, str]:
    """Type ``/threadpilot text``; Slack's ephemeral answer (the ack's body) and the
    command's ``response_url``."""
    response_url = bot.slack.new_response_url()
    fields = slack_requests.slash_command(text, user=user, response_url=response_url)
    request = slack_requests.command_request(fields, SECRET)
    async with bot.http.post(
        f"{bot.url}/slack/events", data=request.body, headers=request.headers
    ) as response:
        assert response.status == 200
        return json.loads(await response.text() or "{}"), response_url


STALL_S = 4.0
"""Long enough for a test to press its buttons while the model's answer is stalled
(after it, the run would go on and finish by itself), short enough to wait out."""


async def stalled_run(bot: Bot, llm: LLMock, *, user: str = DEFAULT_USER) -> tuple[str, Any]:
    """A run that is streaming its first answer (stalled for STALL_S), and will write a
    short report if stopped; its id and status message."""
    ((run_id, status),) = await stalled_runs(bot, llm, [user])
    return run_id, status


async def stalled_runs(bot: Bot, llm: LLMock, users: list[str]) -> list[tuple[str, Any]]:
    """One stalled run per user (see :func:`stalled_run`), each in its own thread.

    The model's script is first every run's stalled answer, then every short report:
    llmock answers requests in the order they come."""
    for _ in users:
        llm.add(*stalled_answer(STALL_S, text=SHORT_TEXT))
    llm.reply(STOPPED_EARLY, times=len(users))

    def streaming_in(thread_ts: str | None) -> Callable[[Any], bool]:
        return lambda call: call.args.get("thread_ts") == thread_ts

    started: list[tuple[str, Any]] = []
    for user in users:
        _, status = await bot.mention("check the time", user=user)
        await bot.slack.wait_for_call(
            "chat.startStream", streaming_in(status.thread_ts), timeout=WAIT_S
        )
        started.append((run_id_of(status), status))
    return started


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


# -- App Home --------------------------------------------------------------------------


async def test_home_lists_the_viewers_live_run_with_its_controls(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer())
    _, status = await bot.mention("write a lot")
    run_id = run_id_of(status)

    await open_home(bot)
    # Listed at once (maybe still waiting to start), then kept current as it starts.
    view = await home(bot, DEFAULT_USER, says("Working: turn 1"))

    assert home_buttons(view) == [(ACTION_HOME_STOP, run_id), (ACTION_HOME_ABORT, run_id)]
    assert says("write a lot", f"<#{DEFAULT_CHANNEL}>")(view)
    assert f"/archives/{DEFAULT_CHANNEL}/p{status.ts.replace('.', '')}" in view_text(view)
    # Someone else's Home tab does not list it, and has no Stop all.
    await open_home(bot, OTHER)
    other = await home(bot, OTHER, says(messages.NO_LIVE_RUNS))
    assert home_buttons(other) == []


async def test_the_messages_tab_publishes_nothing(bot: Bot) -> None:
    envelope = slack_requests.app_home_opened(tab="messages")
    assert await bot.event(envelope) == 200
    await open_home(bot, OTHER)  # a later event, to know the first was handled
    await home(bot, OTHER, says(messages.NO_LIVE_RUNS))
    assert bot.slack.state.home_view(DEFAULT_USER) is None


async def test_stop_in_app_home_ends_the_run_with_its_summary(bot: Bot, llm: LLMock) -> None:
    run_id, status = await stalled_run(bot, llm)
    await open_home(bot)
    view = await home(bot, DEFAULT_USER, lambda v: bool(home_buttons(v)))

    payload = slack_requests.home_click(view, ACTION_HOME_STOP, value=run_id)
    assert await press(bot, payload) == 200

    stopping = await home(bot, DEFAULT_USER, says(messages.STOP_ACCEPTED))
    assert (ACTION_HOME_STOP, run_id) not in home_buttons(stopping)  # Abort is left
    final = await bot.final(status)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert STOPPED_EARLY in block_text(final)
    events = await store_of(bot).events_for(run_id)
    (requested,) = [e for e in events if e.kind == "stop.requested"]
    assert (requested.actor, requested.detail["source"]) == (DEFAULT_USER, "home")
    # The Home tab follows the run to its end without being opened again.
    ended = await home(bot, DEFAULT_USER, says("User interlude: stopped by", "why: "))
    assert home_buttons(ended) == []


async def test_abort_in_app_home_and_a_forged_stop_for_someone_elses_run(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer())
    _, status = await bot.mention("write a lot")
    run_id = run_id_of(status)
    await open_home(bot)
    view = await home(bot, DEFAULT_USER, lambda v: bool(home_buttons(v)))

    # OTHER's Home does not show the run, but a made-up payload can name it.
    forged = slack_requests.home_click(view, ACTION_HOME_STOP, value=run_id, user=OTHER)
    assert await press(bot, forged) == 200
    refusal = messages.not_allowed("requester", DEFAULT_USER)
    await home(bot, OTHER, says(refusal))
    assert bot.live_run(status) is not None

    payload = slack_requests.home_click(view, ACTION_HOME_ABORT, value=run_id)
    assert await press(bot, payload) == 200
    final = await bot.final(status)
    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    assert not llm.requests[0].completed  # the stream was cut, not waited for


async def test_stop_all_by_an_admin_and_its_refusal_for_others(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(ADMIN_USER_IDS=ADMIN)
    (first, first_status), (second, second_status) = await stalled_runs(
        bot, llm, [DEFAULT_USER, OTHER]
    )
    await open_home(bot, ADMIN)
    admin_view = await home(bot, ADMIN, lambda v: len(home_buttons(v)) == 5)
    assert home_buttons(admin_view)[0] == (ACTION_STOP_ALL, "all")
    await open_home(bot, OTHER)
    other_view = await home(bot, OTHER, lambda v: bool(home_buttons(v)))
    assert ACTION_STOP_ALL not in [a for a, _ in home_buttons(other_view)]

    # Not an admin: a Stop all payload made up from the admin's view changes nothing.
    forged = slack_requests.home_click(admin_view, ACTION_STOP_ALL, user=OTHER)
    assert await press(bot, forged) == 200
    await home(bot, OTHER, says(messages.STOP_ALL_NOT_ALLOWED))
    assert bot.live_run(first_status) is not None and bot.live_run(second_status) is not None
    for run_id in (first, second):
        assert await store_of(bot).pending_stop_requests([run_id]) == []

    payload = slack_requests.home_click(admin_view, ACTION_STOP_ALL, user=ADMIN)
    assert await press(bot, payload) == 200

    await home(bot, ADMIN, says(messages.stop_all_done(2, 0, 0)))
    for status in (first_status, second_status):
        final = await bot.final(status)
        assert f"User interlude: stopped by <@{ADMIN}>" in block_text(final)
    for run_id in (first, second):
        events = await store_of(bot).events_for(run_id)
        (event,) = [e for e in events if e.kind == "stop.requested"]
        assert (event.actor, event.detail["source"]) == (ADMIN, "home")


async def test_a_private_request_is_shown_only_to_its_requester(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """An admin sees every run, but the text of a request asked in a DM, a group DM or a
    private channel only its requester sees (on App Home and in /threadpilot list)."""
    bot = await make_bot(ADMIN_USER_IDS=ADMIN)
    private_channel = "C0TPPRIVAT1"
    bot.slack.state.make_private(private_channel)
    asked = {
        DEFAULT_DM_CHANNEL: "my salary review notes",
        DEFAULT_GROUP_DM_CHANNEL: "the reorg we discussed",
        private_channel: "the security incident",
        DEFAULT_CHANNEL: "the public roadmap",
    }
    llm.reply("Done.", times=len(asked))
    for channel, text in asked.items():
        bot_id = bot.slack.workspace.bot_user_id
        if channel == DEFAULT_DM_CHANNEL:
            envelope = slack_requests.dm_message(text, channel=channel)
        else:  # a mention in a group DM, a private channel, a public one
            envelope = slack_requests.app_mention(f"<@{bot_id}> {text}", channel=channel)
        assert await bot.event(envelope) == 200
        await bot.final(await bot.status_message(channel, envelope["event"]["ts"]))

    await open_home(bot, ADMIN)
    admin_view = await home(bot, ADMIN, says("the public roadmap"))
    await open_home(bot, DEFAULT_USER)
    own_view = await home(bot, DEFAULT_USER, says(*asked.values()))
    admin_list, _ = await command(bot, "list", user=ADMIN)

    for shown in (view_text(admin_view), json.dumps(admin_list, ensure_ascii=False)):
        assert "the public roadmap" in shown
        for secret in ("my salary review notes", "the reorg we discussed", "the security incident"):
            assert secret not in shown
        assert shown.count(messages.PRIVATE_REQUEST) == 3
    assert messages.PRIVATE_REQUEST not in view_text(own_view)


async def test_a_channel_is_public_only_when_slack_says_so(
    slack: FakeSlack, workspaces: Workspaces
) -> None:
    team = slack.workspace.team_id
    slack.state.make_private("C0TPPRIVAT1")
    privacy = ChannelPrivacy(workspaces)
    channels = [DEFAULT_CHANNEL, "C0TPPRIVAT1", DEFAULT_DM_CHANNEL, DEFAULT_GROUP_DM_CHANNEL]

    assert await privacy.public(team, channels) == {DEFAULT_CHANNEL}
    asked = [c.args["channel"] for c in slack.calls("conversations.info")]
    assert asked == [DEFAULT_CHANNEL, "C0TPPRIVAT1"]  # DMs and group DMs by their id
    assert await privacy.public(team, channels) == {DEFAULT_CHANNEL}  # remembered
    assert len(slack.calls("conversations.info")) == 2

    # Refused (no channels:read) or no answer in time: private.
    slack.fail_next("conversations.info", error="missing_scope")
    assert await privacy.public(team, ["C0TPOTHER01"]) == frozenset()
    slack.time_out_next("conversations.info", hold_s=10.0)
    assert await privacy.public(team, ["C0TPOTHER02"]) == frozenset()


async def test_fifty_runs_changing_at_once_are_published_within_budget(
    make_bot: BotFactory,
) -> None:
    """Fifty runs of five people (as other workers would run them) change together: each
    viewer's Home tab is published again once or twice, not once per run, and the fake,
    which enforces Tier 4 for views.publish, never answers 429."""
    bot = await make_bot(ADMIN_USER_IDS=ADMIN)
    store = store_of(bot)
    people = [f"U0TPPEOPLE{i}" for i in range(5)]
    runs = [
        RunRecord(
            id=f"run-{i:02}",
            thread=ThreadKey(bot.slack.workspace.team_id, DEFAULT_CHANNEL, f"1772366{i:03}.0001"),
            requester=people[i % 5],
            task=f"task {i}",
            state=RunState.RUNNING,
            status_ts=f"1772366{i:03}.0002",
        )
        for i in range(50)
    ]
    for run in runs:
        await store.create_run(run)
    viewers = [*people, ADMIN]
    for viewer in viewers:
        await open_home(bot, viewer)
    for viewer in people:
        await home(bot, viewer, lambda v: stop_buttons(v) == 10)
    # The admin's Home lists all fifty: as many with buttons as fit, the rest counted.
    await home(bot, ADMIN, lambda v: stop_buttons(v) + hidden_runs(v) == 50)
    before = len(bot.slack.calls("views.publish"))

    async def finish(run: RunRecord) -> bool:
        return await store.set_state(
            run.id,
            RunState.FINISHED,
            expected=[RunState.RUNNING],
            outcome=Outcome.FINISHED,
            exit_code=ExitCode.FINAL_ANSWER,
            final_posted_at=utcnow(),
        )

    assert all(await asyncio.gather(*(finish(run) for run in runs)))

    for viewer in viewers:
        view = await home(bot, viewer, says(messages.NO_LIVE_RUNS))
        assert view_text(view).count("Finished · why: final answer") == 10
    published = bot.slack.calls("views.publish")[before:]
    assert all(call.ok for call in published)
    # One publish per viewer for the wave (two if a poll fell in the middle of it).
    assert len(published) <= 2 * len(viewers), [c.args["user_id"] for c in published]
    assert bot.slack.rate_limited() == []


async def test_a_home_tab_that_is_off_is_not_published_again(bot: Bot, llm: LLMock) -> None:
    bot.slack.state.home_tab_enabled = False
    llm.add(*stalled_answer())
    await bot.mention("write a lot")
    await open_home(bot)
    await bot.slack.wait_for_call("views.publish", lambda c: c.error == "not_enabled")
    assert bot.app.ctx is not None
    # The run goes on; the viewer is dropped, so its changes publish nothing more.
    calls = len(bot.slack.calls("views.publish"))
    await open_home(bot, OTHER)
    await bot.slack.wait_until(lambda s: len(s.calls("views.publish")) > calls, timeout=WAIT_S)
    assert [c.args["user_id"] for c in bot.slack.calls("views.publish")][calls:] == [OTHER]


# -- feedback --------------------------------------------------------------------------


async def test_feedback_is_recorded_once_and_shown_in_app_home(bot: Bot, llm: LLMock) -> None:
    llm.reply("The cache TTL was 0.")
    _, status = await bot.mention("why is the cache cold")
    final = await bot.settled(status)
    run_id = run_id_of(status)

    payload = slack_requests.feedback_click(final, positive=True)
    assert await press(bot, payload) == 200
    assert await bot.ephemerals(DEFAULT_USER) == [messages.FEEDBACK_RECORDED]
    assert await press(bot, payload) == 200  # Slack delivers the same press again
    other = slack_requests.feedback_click(final, positive=False, user=OTHER)
    assert await press(bot, other) == 200
    await bot.ephemerals(OTHER)

    votes = [e for e in await store_of(bot).events_for(run_id) if e.kind == "feedback"]
    assert [(e.actor, e.detail["value"]) for e in votes] == [
        (DEFAULT_USER, "positive"),
        (OTHER, "negative"),
    ]
    await open_home(bot)
    await home(bot, DEFAULT_USER, says("Feedback: 👍 1 · 👎 1"))


async def test_feedback_counts_one_vote_per_person_the_latest(bot: Bot, llm: LLMock) -> None:
    """However often people press, each counts once, with their latest press; and App
    Home still publishes (200 presses once made a section Slack refused)."""
    llm.reply("The cache TTL was 0.")
    _, status = await bot.mention("why is the cache cold")
    final = await bot.settled(status)
    run_id = run_id_of(status)
    for n in range(199):  # earlier presses, each a new click (its own action_ts)
        actor = OTHER if n % 2 else DEFAULT_USER
        value = "negative" if n < 150 else "positive"
        event = AuditEvent(run_id, "feedback", actor, detail={"value": value})
        await store_of(bot).record_event(event)
    # OTHER's latest press was thumbs up (most of theirs were down); the requester's
    # latest is this thumbs down (after some ups).
    assert await press(bot, slack_requests.feedback_click(final, positive=False)) == 200
    assert await bot.ephemerals(DEFAULT_USER) == [messages.FEEDBACK_RECORDED]

    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says("Feedback: 👍 1 · 👎 1"))
    assert not [c for c in bot.slack.calls("views.publish") if not c.ok]
    assert view_text(view).count("Feedback:") == 1


async def test_feedback_pressed_elsewhere_is_not_recorded(bot: Bot, llm: LLMock) -> None:
    llm.reply("Done.")
    _, status = await bot.mention("a quick one")
    final = await bot.settled(status)
    run_id = run_id_of(status)

    # The run's buttons copied onto another message (another channel): refused.
    forged = slack_requests.feedback_click(final, positive=False)
    forged["container"]["channel_id"] = forged["channel"]["id"] = DEFAULT_DM_CHANNEL
    assert await press(bot, forged) == 200

    assert await bot.ephemerals(DEFAULT_USER, channel=DEFAULT_DM_CHANNEL) == [
        messages.FEEDBACK_NOT_FROM_RUN
    ]
    assert [e for e in await store_of(bot).events_for(run_id) if e.kind == "feedback"] == []


# -- /threadpilot ----------------------------------------------------------------------


async def test_command_list_answers_ephemerally_with_the_controls(bot: Bot, llm: LLMock) -> None:
    run_id, status = await stalled_run(bot, llm)

    answer, response_url = await command(bot, "list")

    assert answer["response_type"] == "ephemeral"
    blocks = answer["blocks"]
    assert home_buttons({"blocks": blocks}) == [
        (ACTION_HOME_STOP, run_id),
        (ACTION_HOME_ABORT, run_id),
    ]
    # Its Stop works like App Home's, and the list is replaced with the answer on top.
    payload = slack_requests.ephemeral_click(
        blocks, ACTION_HOME_STOP, value=run_id, response_url=response_url
    )
    assert await press(bot, payload) == 200
    final = await bot.final(status)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    (post,) = await bot.slack.wait_until(lambda s: s.response_url_posts(response_url))
    assert post.body["replace_original"] is True
    assert post.body["response_type"] == "ephemeral"
    assert messages.STOP_ACCEPTED in json.dumps(post.body["blocks"], ensure_ascii=False)
    (requested,) = [e for e in await store_of(bot).events_for(run_id) if e.kind == "stop.requested"]
    assert requested.detail["source"] == "command"


async def test_command_stop_all_for_admins_only(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(ADMIN_USER_IDS=ADMIN)
    run_id, status = await stalled_run(bot, llm)

    refused, _ = await command(bot, "stop all", user=OTHER)
    assert refused == {"response_type": "ephemeral", "text": messages.STOP_ALL_NOT_ALLOWED}
    assert await store_of(bot).pending_stop_requests([run_id]) == []

    answer, response_url = await command(bot, "STOP  all", user=ADMIN)
    assert answer == {"response_type": "ephemeral", "text": messages.stop_all_done(1, 0, 0)}
    final = await bot.final(status)
    assert f"User interlude: stopped by <@{ADMIN}>" in block_text(final)
    (post,) = await bot.slack.wait_until(lambda s: s.response_url_posts(response_url))
    assert messages.stop_all_done(1, 0, 0) in json.dumps(post.body, ensure_ascii=False)

    again, _ = await command(bot, "stop all", user=ADMIN)
    assert again["text"] in (messages.STOP_ALL_NOTHING, messages.stop_all_done(0, 1, 0))


async def test_command_help_for_anything_else(bot: Bot) -> None:
    for text in ("", "help", "stop", "list everything"):
        answer, _ = await command(bot, text)
        assert answer == {"response_type": "ephemeral", "text": messages.COMMAND_HELP}


async def test_slash_commands_are_signed_and_checked(bot: Bot) -> None:
    fields = slack_requests.slash_command("list")
    forged = slack_requests.command_request(fields, SECRET, forged=True)
    assert (await bot.post(forged)).status == 401
    for broken in (
        {k: v for k, v in fields.items() if k != "user_id"},
        {**fields, "command": "threadpilot"},
        {**fields, "team_id": ""},
    ):
        assert (await bot.post(slack_requests.command_request(broken, SECRET))).status == 400
    # A field given twice (which one would Bolt read?), signed all the same.
    body = slack_requests.command_request(fields, SECRET).body + b"&user_id=U0TPOTHER01"
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        **slack_requests.signed_request(body, SECRET),
    }
    assert (await bot.post(slack_requests.SignedRequest(body, headers))).status == 400


async def test_the_command_over_socket_mode_is_answered_in_the_ack(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(SLACK_APP_TOKEN="xapp-1-test", SLACK_SIGNING_SECRET="")
    await bot.slack.socket.wait_connected()
    llm.add(*stalled_answer())
    envelope = slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> write a lot")
    await bot.slack.socket.wait_for_ack(await bot.socket_event(envelope))
    run_id = run_id_of(await bot.status_message(DEFAULT_CHANNEL, envelope["event"]["ts"]))

    envelope_id = await bot.slack.socket.send_envelope(
        "slash_commands", slack_requests.slash_command("list"), accepts_response_payload=True
    )

    ack = await bot.slack.socket.wait_for_ack(envelope_id)
    assert ack.payload is not None and ack.payload["response_type"] == "ephemeral"
    assert home_buttons(ack.payload)[:1] == [(ACTION_HOME_STOP, run_id)]
