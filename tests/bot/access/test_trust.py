"""People from another organisation and guests, at every entry (docs/slack-setup.md, Who
may use threadpilot).

The rule: someone from another organisation (Slack Connect: their team
is not the workspace's) or a guest (``is_restricted`` / ``is_ultra_restricted``) starts
nothing, steers nothing and presses nothing unless ``ALLOW_EXTERNAL_USERS`` /
``ALLOW_GUESTS`` is true; they get an ephemeral saying why. Signed events and clicks over
the fake Slack, whose ``users.info`` knows who is who.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.values.records import ResumeState
from bot import messages
from bot.access.trust import CACHE_TTL_S, Person, TrustGate, person_of
from bot.views.home import ACTION_HOME_STOP, ACTION_STOP_ALL
from bot.views.status import ACTION_DONT_RESUME, ACTION_RESUME_NOW
from tests.bot.conftest import bot_settings
from tests.bot.harness import (
    ACTION_ABORT,
    ACTION_STOP,
    SECRET,
    SHORT_TEXT,
    WAIT_S,
    block_text,
    run_id_of,
    stalled_answer,
)
from tests.bot.workers.test_resume import FAST, paused, rate_limited, run_id_of_done, stored
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import (
    DEFAULT_CHANNEL,
    DEFAULT_DM_CHANNEL,
    DEFAULT_USER,
    DEFAULT_WORKSPACE,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from bot.slack_api.surface import Workspaces
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

OTHER_ORG = "T0OTHERORG1"
EXTERNAL = "U0TPEXTERN1"
"""From another organisation, in a Slack Connect channel."""
GUEST = "U0TPGUEST01"
"""A multi-channel guest (``is_restricted``)."""
SINGLE_GUEST = "U0TPGUEST02"
"""A single-channel guest (``is_ultra_restricted``)."""
MEMBER = "U0TPMEMBER1"
"""A full member who did not start the run."""

REFUSALS = {
    EXTERNAL: messages.EXTERNAL_NOT_ALLOWED,
    GUEST: messages.GUEST_NOT_ALLOWED,
    SINGLE_GUEST: messages.GUEST_NOT_ALLOWED,
}
ALLOWING = {
    EXTERNAL: {"ALLOW_EXTERNAL_USERS": "true"},
    GUEST: {"ALLOW_GUESTS": "true"},
    SINGLE_GUEST: {"ALLOW_GUESTS": "true"},
}
PEOPLE = pytest.mark.parametrize("person", list(REFUSALS), ids=["external", "guest", "single"])


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.state.add_person(EXTERNAL, team_id=OTHER_ORG)
        fake.state.add_person(GUEST, restricted=True)
        fake.state.add_person(SINGLE_GUEST, ultra_restricted=True)
        yield fake


# -- helpers ---------------------------------------------------------------------------


def by(envelope: Json, person: str) -> Json:
    """An event as Slack sends it when ``person`` wrote it: an external person's message
    carries their own team (``user_team``, ``source_team``)."""
    if person == EXTERNAL:
        envelope["event"] |= {"user_team": OTHER_ORG, "source_team": OTHER_ORG}
    return envelope


def pressed_by(payload: Json, person: str) -> Json:
    """A click as Slack sends it when ``person`` pressed: ``user.team_id`` is theirs."""
    if person == EXTERNAL:
        payload["user"]["team_id"] = OTHER_ORG
    return payload


async def press(bot: Bot, payload: Json) -> int:
    response = await bot.post(slack_requests.interaction_request(payload, SECRET))
    return response.status


async def click(bot: Bot, message: Message, action_id: str, person: str) -> int:
    current = bot.slack.message(message.channel, message.ts)
    return await press(
        bot, pressed_by(slack_requests.click_button(current, action_id, user=person), person)
    )


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


async def running(bot: Bot, llm: LLMock) -> tuple[str, Message]:
    """A member's run, its first answer stalled mid-stream; it finishes by itself."""
    llm.add(*stalled_answer(2.0, with_tool=False, text=SHORT_TEXT))
    thread_ts, status = await bot.mention("what time is it?")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    return thread_ts, status


async def finishes_untouched(bot: Bot, status: Message, llm: LLMock) -> None:
    """The run ends as it would have: finished, one model request, nothing asked of it."""
    final = await bot.final(status)
    assert "Finished" in block_text(final)
    assert len(llm.requests) == 1
    assert await store_of(bot).stop_requests_for(run_id_of(status)) == []


def bot_posts(bot: Bot, channel: str) -> list[Message]:
    return [m for m in bot.slack.messages(channel) if m.is_bot]


# -- starting a run --------------------------------------------------------------------


@PEOPLE
async def test_a_mention_or_a_dm_starts_nothing(bot: Bot, llm: LLMock, person: str) -> None:
    mention = by(
        slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> go", user=person), person
    )
    dm = by(slack_requests.dm_message("go", user=person), person)

    assert await bot.event(mention) == 200
    assert await bot.event(dm) == 200

    assert await bot.ephemerals(person) == [REFUSALS[person]]
    assert await bot.ephemerals(person, channel=DEFAULT_DM_CHANNEL) == [REFUSALS[person]]
    assert bot_posts(bot, DEFAULT_CHANNEL) == bot_posts(bot, DEFAULT_DM_CHANNEL) == []
    assert llm.requests == []


@PEOPLE
async def test_with_the_setting_true_they_may(
    make_bot: BotFactory, llm: LLMock, person: str
) -> None:
    bot = await make_bot(**ALLOWING[person])
    llm.reply("It is noon.")
    envelope = by(
        slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> time?", user=person),
        person,
    )

    assert await bot.event(envelope) == 200

    status = await bot.status_message(DEFAULT_CHANNEL, envelope["event"]["ts"])
    assert "Finished" in block_text(await bot.final(status))
    assert bot.ephemerals_for(person, DEFAULT_CHANNEL) == []


async def test_one_setting_does_not_open_the_other(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(ALLOW_GUESTS="true")
    mention = slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> go", user=EXTERNAL)

    assert await bot.event(by(mention, EXTERNAL)) == 200

    assert await bot.ephemerals(EXTERNAL) == [messages.EXTERNAL_NOT_ALLOWED]
    assert llm.requests == []


@PEOPLE
async def test_a_reply_in_a_finished_runs_thread_continues_nothing(
    bot: Bot, llm: LLMock, person: str
) -> None:
    llm.reply("It is noon.")
    thread_ts, status = await bot.mention("what time is it?")
    await bot.final(status)

    envelope = by(
        slack_requests.thread_reply("and in Tokyo?", thread_ts=thread_ts, user=person), person
    )
    assert await bot.event(envelope) == 200

    assert await bot.ephemerals(person) == [REFUSALS[person]]
    assert len(llm.requests) == 1


# -- steering a run and stopping it ----------------------------------------------------


@PEOPLE
async def test_guidance_and_stop_words_change_nothing(
    make_bot: BotFactory, llm: LLMock, person: str
) -> None:
    # Under "anyone" the stop policy would let them: the trust boundary is what refuses.
    bot = await make_bot(STOP_POLICY="anyone")
    thread_ts, status = await running(bot, llm)
    guidance = slack_requests.thread_reply(
        "ignore that, tell a joke", thread_ts=thread_ts, user=person
    )
    stop_word = slack_requests.thread_reply("stop", thread_ts=thread_ts, user=person)

    assert await bot.event(by(guidance, person)) == 200
    assert await bot.event(by(stop_word, person)) == 200

    assert await bot.ephemerals(person, count=2) == [REFUSALS[person]] * 2
    await finishes_untouched(bot, status, llm)
    assert await store_of(bot).guidance_for(run_id_of(status)) == []


@PEOPLE
async def test_stop_abort_and_slacks_own_stop_change_nothing(
    make_bot: BotFactory, llm: LLMock, person: str
) -> None:
    bot = await make_bot(STOP_POLICY="anyone")
    thread_ts, status = await running(bot, llm)
    native = slack_requests.agent_session_stopped(
        channel=DEFAULT_CHANNEL, thread_ts=thread_ts, user=person
    )

    assert await click(bot, status, ACTION_STOP, person) == 200
    assert await click(bot, status, ACTION_ABORT, person) == 200
    assert await bot.event(native) == 200

    assert await bot.ephemerals(person, count=3) == [REFUSALS[person]] * 3
    await finishes_untouched(bot, status, llm)


@PEOPLE
async def test_with_the_setting_true_they_may_stop(
    make_bot: BotFactory, llm: LLMock, person: str
) -> None:
    bot = await make_bot(STOP_POLICY="anyone", **ALLOWING[person])
    llm.add(*stalled_answer(2.0, text=SHORT_TEXT))  # then a tool call: a step to stop after
    llm.reply("Stopped as asked.")
    _, status = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await click(bot, status, ACTION_STOP, person) == 200

    final = await bot.final(status)
    assert f"User interlude: stopped by <@{person}>" in block_text(final)


@PEOPLE
async def test_resume_now_and_dont_resume_change_nothing(
    make_bot: BotFactory, llm: LLMock, person: str
) -> None:
    bot = await make_bot(STOP_POLICY="anyone", **FAST)
    llm.add(rate_limited(60.0))
    _, status = await bot.mention("summarise the report")
    status = await bot.until(status, paused)
    run_id = run_id_of_done(status, bot)

    assert await click(bot, status, ACTION_DONT_RESUME, person) == 200
    assert await click(bot, status, ACTION_RESUME_NOW, person) == 200

    assert await bot.ephemerals(person, count=2) == [REFUSALS[person]] * 2
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by) == (ResumeState.SCHEDULED, None)
    assert len(llm.requests) == 1


async def test_a_click_is_answered_even_when_slack_cannot_say_who_pressed(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """``users.info`` hanging is no reason to hold a click: the lookup is bounded, and
    the gate fails closed (nothing changes; the person is asked to try again)."""
    bot = await make_bot(STOP_POLICY="anyone")
    _, status = await running(bot, llm)
    bot.slack.time_out_next("users.info", hold_s=40.0)

    async with asyncio.timeout(WAIT_S):
        assert await click(bot, status, ACTION_STOP, MEMBER) == 200

    assert await bot.ephemerals(MEMBER) == [messages.PERSON_NOT_CHECKED]
    await finishes_untouched(bot, status, llm)


async def test_who_someone_is_is_asked_once(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(STOP_POLICY="anyone")
    llm.add(*stalled_answer(2.0, text=SHORT_TEXT))
    llm.reply("Stopped as asked.")
    _, status = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await click(bot, status, ACTION_STOP, MEMBER) == 200
    assert await click(bot, status, ACTION_ABORT, MEMBER) == 200  # escalates

    await bot.final(status)
    asked = [c.args["user"] for c in bot.slack.calls("users.info")]
    assert asked.count(MEMBER) == 1 and asked.count(DEFAULT_USER) == 1


# -- App Home, /threadpilot and feedback -----------------------------------------------


async def home_of(bot: Bot, user: str, text: str) -> Json:
    def check(slack: FakeSlack) -> Json | None:
        view = slack.state.home_view(user)
        return view if view is not None and text in json.dumps(view, ensure_ascii=False) else None

    view = await bot.slack.wait_until(check, timeout=WAIT_S)
    assert view is not None
    return view


@PEOPLE
async def test_app_home_says_why_and_its_buttons_change_nothing(
    make_bot: BotFactory, llm: LLMock, person: str
) -> None:
    # An admin who is from elsewhere, or a guest, is refused like anyone else.
    bot = await make_bot(STOP_POLICY="anyone", ADMIN_USER_IDS=f"{person},U0TPADMIN01")
    _, status = await running(bot, llm)
    assert await bot.event(slack_requests.app_home_opened(user="U0TPADMIN01")) == 200
    admins = await home_of(bot, "U0TPADMIN01", "Stop all")

    assert await bot.event(slack_requests.app_home_opened(user=person)) == 200
    view = await home_of(bot, person, REFUSALS[person])
    assert "button" not in json.dumps(view)
    run_id = run_id_of(status)
    home_stop = slack_requests.home_click(admins, ACTION_HOME_STOP, value=run_id, user=person)
    stop_all = slack_requests.home_click(admins, ACTION_STOP_ALL, user=person)
    assert await press(bot, pressed_by(home_stop, person)) == 200
    assert await press(bot, pressed_by(stop_all, person)) == 200

    await finishes_untouched(bot, status, llm)
    assert [c.args["user_id"] for c in bot.slack.calls("views.publish")].count(person) >= 1
    assert "button" not in json.dumps(bot.slack.state.home_view(person))


@PEOPLE
async def test_the_command_says_why(make_bot: BotFactory, person: str) -> None:
    bot = await make_bot(ADMIN_USER_IDS=person)
    for text in ("list", "stop all"):
        fields = slack_requests.slash_command(text, user=person)
        request = slack_requests.command_request(fields, SECRET)
        async with bot.http.post(
            f"{bot.url}/slack/events", data=request.body, headers=request.headers
        ) as response:
            assert response.status == 200
            answer: dict[str, Any] = json.loads(await response.text())
        assert answer["text"] == REFUSALS[person]
        assert "button" not in json.dumps(answer)


@PEOPLE
async def test_feedback_is_not_recorded(bot: Bot, llm: LLMock, person: str) -> None:
    llm.reply("It is noon.")
    _, status = await bot.mention("what time is it?")
    final = await bot.settled(status)

    payload = pressed_by(slack_requests.feedback_click(final, positive=False, user=person), person)
    assert await press(bot, payload) == 200

    assert await bot.ephemerals(person) == [REFUSALS[person]]
    events = await store_of(bot).events_for(run_id_of(status))
    assert [e for e in events if e.kind == "feedback"] == []


# -- the gate itself -------------------------------------------------------------------


def test_every_payload_names_its_person() -> None:
    here = DEFAULT_WORKSPACE.team_id
    mention = by(slack_requests.app_mention("hi", user=EXTERNAL), EXTERNAL)
    assert person_of(mention) == Person(EXTERNAL, OTHER_ORG, here)
    click = slack_requests.button_click(action_id="a", value="v", message_ts="1.0", user=GUEST)
    assert person_of(click) == Person(GUEST, here, here)
    # Neither a slash command nor Slack's native stop says the person's team.
    command = slack_requests.slash_command("list", user=GUEST)
    assert person_of(command) == Person(GUEST, workspace=here)
    native = slack_requests.agent_session_stopped(channel="C1", thread_ts="1.0", user=GUEST)
    assert person_of(native) == Person(GUEST, workspace=here)


async def test_who_someone_is_is_asked_again_after_a_while(
    slack: FakeSlack, workspaces: Workspaces, llm: LLMock, tmp_path: Path
) -> None:
    now = [0.0]
    settings = bot_settings(slack, llm, tmp_path)
    gate = TrustGate(settings, workspaces, slack.workspace.team_id, clock=lambda: now[0])

    assert await gate.refusal(Person(GUEST)) == messages.GUEST_NOT_ALLOWED
    slack.state.add_person(GUEST)  # made a full member
    assert await gate.refusal(Person(GUEST)) == messages.GUEST_NOT_ALLOWED  # remembered
    now[0] = CACHE_TTL_S + 1
    assert await gate.refusal(Person(GUEST)) is None
    assert len(slack.calls("users.info")) == 2
