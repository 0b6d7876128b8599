"""Clicks that must change nothing, and the rules that decide what a click does.

docs/stopping.md: every click is acknowledged; clicks on finished runs, duplicate
clicks and clicks by people the stop policy does not allow get an ephemeral reply and
change nothing. Section 4: a second deliberate Stop on a stopping run escalates to Abort
(level 2); the same person's double press (``DOUBLE_PRESS_S``) and a re-delivery of the
same click do not. The decision itself (:func:`bot.access.stop_policy.verdict_for`) is tested case by
case at the end.

End-to-end tests press buttons on status messages the app really rendered (the fake
refuses to click a button that was not there); a "stale" click presses a button on an
older version of the message, as a client that has not re-rendered yet would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from agent_core import StopReason, StopSource, ThreadKey
from agent_core.stores.memory import MemoryStore
from bot import messages
from bot.access.stop_policy import (
    DOUBLE_PRESS_S,
    Origin,
    RunHome,
    RunView,
    StopAsk,
    Verdict,
    needs_own_stops,
    read_participants,
    verdict_for,
)
from bot.config.settings import Settings, StopPolicy
from tests.agent_core.helpers import offered_tools
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
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

OTHER = "U0TPOTHER01"
"""Someone in the channel who did not start the run and is no admin."""
ADMIN = "U0TPADMIN01"
REQUESTER_ONLY = messages.not_allowed(StopPolicy.REQUESTER.value, DEFAULT_USER)


# -- end to end --------------------------------------------------------------------------


async def test_clicks_on_a_finished_run_only_get_an_ephemeral(bot: Bot, llm: LLMock) -> None:
    llm.reply("All done: nothing left to do.")
    _, running = await bot.mention("a quick one")  # this version still shows Stop and Abort
    final = await bot.settled(running)
    updates_before = len(bot.slack.calls("chat.update"))
    model_requests = len(llm.requests)

    assert await bot.click_version(running, ACTION_STOP) == 200
    assert await bot.click_version(running, ACTION_ABORT) == 200

    replies = await bot.ephemerals(DEFAULT_USER, count=2)
    assert len(replies) == 2
    for reply in replies:
        assert "already ended" in reply
        assert "Finished" in reply  # says how it ended
    assert bot.slack.message(final.channel, final.ts).history == final.history
    assert len(bot.slack.calls("chat.update")) == updates_before
    assert len(llm.requests) == model_requests


async def test_a_second_stop_from_an_older_render_is_a_double_click(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer(0.3, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    _, running = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await bot.click(running, ACTION_STOP) == 200
    # The same person again, from the render that still had Stop (their client had not
    # caught up with "Stopping..."): a double click, not a request to abort.
    assert await bot.click_version(running, ACTION_STOP) == 200

    assert await bot.ephemerals(DEFAULT_USER) == [messages.ALREADY_STOPPING]
    final = await bot.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert "Stopped early: the time was not checked." in block_text(final)
    assert llm.requests[0].completed  # not aborted: the step in flight finished
    assert offered_tools(llm.requests[-1]) == ["final_report"]


async def test_stop_again_after_the_double_click_window_escalates_to_abort(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer())
    _, running = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    assert await bot.click(running, ACTION_STOP) == 200
    live = bot.live_run(running)
    assert live is not None and live.run.control.reason is StopReason.STOP
    # As if the first press were DOUBLE_PRESS_S ago, without waiting that long.
    assert bot.app.ctx is not None
    bot.app.ctx.stops.double_press_s = 0.0

    assert await bot.click_version(running, ACTION_STOP) == 200

    assert await bot.ephemerals(DEFAULT_USER) == [messages.ESCALATED_TO_ABORT]
    final = await bot.final(running)
    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    (record,) = llm.requests
    assert not record.completed  # the stalled stream was closed, not waited for


async def test_a_stop_click_delivered_again_seconds_later_changes_nothing(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer(3.0, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    _, running = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    press = slack_requests.click_button(bot.slack.message(running.channel, running.ts), ACTION_STOP)
    assert (await bot.post(slack_requests.interaction_request(press, SECRET))).status == 200
    live = bot.live_run(running)
    assert live is not None and live.run.control.reason is StopReason.STOP
    # As if the first delivery were DOUBLE_PRESS_S ago: past the double-press window, a
    # second press would escalate. This is no second press: the same click, again.
    assert bot.app.ctx is not None
    bot.app.ctx.stops.double_press_s = 0.0

    again = await bot.post(slack_requests.interaction_request(press, SECRET))

    assert again.status == 200
    assert live.run.control.reason is StopReason.STOP  # not escalated to abort
    final = await bot.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert llm.requests[0].completed  # the step in flight was let finish
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert bot.ephemerals_for(DEFAULT_USER, running.channel) == []  # answered nothing new
    assert bot.app.ctx is not None
    requests = await bot.app.ctx.store.stop_requests_for(run_id_of(running))
    assert [(r.kind, r.requested_by) for r in requests] == [(StopReason.STOP, DEFAULT_USER)]


async def test_a_refused_click_delivered_twice_is_answered_once(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer(1.0, with_tool=False, text=SHORT_TEXT))
    _, running = await bot.mention("write a little")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    press = slack_requests.click_button(running, ACTION_STOP, user=OTHER)

    for _ in range(2):
        assert (await bot.post(slack_requests.interaction_request(press, SECRET))).status == 200
    assert await bot.click(running, ACTION_ABORT, user=OTHER) == 200  # a press of its own

    assert await bot.ephemerals(OTHER, count=2) == [REQUESTER_ONLY, REQUESTER_ONLY]
    final = await bot.final(running)  # long after any third answer would have been sent
    assert "Finished" in block_text(final)
    assert bot.ephemerals_for(OTHER, running.channel) == [REQUESTER_ONLY, REQUESTER_ONLY]


async def test_clicks_by_someone_the_policy_does_not_allow_change_nothing(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer(0.3, with_tool=False, text=SHORT_TEXT))
    thread_ts, running = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await bot.click(running, ACTION_STOP, user=OTHER) == 200
    assert await bot.click(running, ACTION_ABORT, user=OTHER) == 200

    assert await bot.ephemerals(OTHER, count=2) == [REQUESTER_ONLY, REQUESTER_ONLY]
    assert f"<@{DEFAULT_USER}>" in REQUESTER_ONLY  # names who can
    final = await bot.final(running)
    text = block_text(final)
    assert "Finished" in text
    assert "stop requested" not in text
    streamed = [m for m in bot.slack.thread(running.channel, thread_ts) if m.stream]
    assert SHORT_TEXT in streamed[-1].text  # the whole answer
    assert [r.completed for r in llm.requests] == [True]
    assert bot.ephemerals_for(DEFAULT_USER, running.channel) == []


@pytest.mark.parametrize(
    ("settings", "clicker"),
    [({"ADMIN_USER_IDS": f"U0TPSOMEONE, {ADMIN}"}, ADMIN), ({"STOP_POLICY": "anyone"}, OTHER)],
    ids=["admin", "policy-anyone"],
)
async def test_admins_and_anyone_under_the_anyone_policy_may_stop(
    make_bot: BotFactory, llm: LLMock, settings: dict[str, Any], clicker: str
) -> None:
    bot = await make_bot(**settings)
    llm.add(*stalled_answer(0.3, text=SHORT_TEXT))
    llm.reply("Stopped as asked.")
    _, running = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await bot.click(running, ACTION_STOP, user=clicker) == 200

    final = await bot.final(running)
    assert f"User interlude: stopped by <@{clicker}>" in block_text(final)
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert bot.ephemerals_for(clicker, running.channel) == []


async def test_an_unknown_button_gets_an_ephemeral_and_a_200(bot: Bot) -> None:
    message_ts = bot.slack.seed_message(DEFAULT_CHANNEL, "an old message with a button")
    payload = slack_requests.button_click(
        action_id="threadpilot_retry_v0",  # e.g. from a version that had such a button
        value="0123456789abcdef",
        message_ts=message_ts,
    )

    response = await bot.post(slack_requests.interaction_request(payload, SECRET))

    assert response.status == 200
    assert await bot.ephemerals(DEFAULT_USER) == [messages.UNKNOWN_ACTION]
    assert bot.slack.calls("chat.update") == []


# -- verdict_for(): every verdict -------------------------------------------------------------

REQUESTER = "U0TPREQ0001"
PARTICIPANT = "U0TPPART001"
RUN = "run-unit"


def settings(policy: StopPolicy = StopPolicy.REQUESTER) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        SLACK_BOT_TOKEN="xoxb-unit",
        SLACK_SIGNING_SECRET="unit-secret",
        OPENAI_API_KEY="unit-key",
        OPENAI_MODEL="unit-model",
        STOP_POLICY=policy,
        ADMIN_USER_IDS=frozenset({ADMIN}),
    )


STATUS_TS = "1.5"
"""The ts of the unit run's status message, in its thread ("T1", "C1", "1.0")."""
ON_STATUS = Origin("T1", "C1", STATUS_TS, "1.0")


def view(
    pending: StopReason | None = None,
    *,
    finished: bool = False,
    status_ts: str | None = STATUS_TS,
    since_users_stop_s: float | None = None,
) -> RunView:
    return RunView(
        requester=REQUESTER,
        home=RunHome("T1", "C1", "1.0", status_ts),
        finished=finished,
        pending=pending,
        since_users_stop_s=since_users_stop_s,
        participants=frozenset({PARTICIPANT}),
    )


def ask(
    kind: StopReason = StopReason.STOP,
    user: str = REQUESTER,
    *,
    source: StopSource = StopSource.BUTTON,
    origin: Origin | None = ON_STATUS,
) -> StopAsk:
    return StopAsk(user=user, kind=kind, source=source, run_id=RUN, message=origin)


@pytest.mark.parametrize("kind", [StopReason.STOP, StopReason.ABORT])
def test_decide_the_first_press_does_what_it_says(kind: StopReason) -> None:
    expected = Verdict.STOP if kind is StopReason.STOP else Verdict.ABORT
    assert verdict_for(ask(kind), view(), settings()) is expected
    assert expected.changes_state
    assert expected.level == (1 if kind is StopReason.STOP else 2)


@pytest.mark.parametrize(
    "source", [StopSource.BUTTON, StopSource.NATIVE, StopSource.HOME, StopSource.COMMAND]
)
def test_decide_the_same_persons_second_press_inside_the_window_is_a_duplicate(
    source: StopSource,
) -> None:
    stopping = view(StopReason.STOP, since_users_stop_s=DOUBLE_PRESS_S - 0.01)

    verdict = verdict_for(ask(source=source), stopping, settings())

    assert verdict is Verdict.DUPLICATE
    assert not verdict.changes_state


def test_decide_a_second_stop_after_the_window_escalates() -> None:
    stopping = view(StopReason.STOP, since_users_stop_s=DOUBLE_PRESS_S)

    verdict = verdict_for(ask(), stopping, settings())

    assert verdict is Verdict.ESCALATE
    assert verdict.changes_state and verdict.requests is StopReason.ABORT
    assert verdict.level == 2


def test_decide_stop_on_a_stopping_run_by_someone_else_escalates() -> None:
    # The window is per person: an admin's Stop on a run its requester stopped a moment
    # ago is no double press of theirs (they have no Stop of their own on it).
    assert verdict_for(ask(user=ADMIN), view(StopReason.STOP), settings()) is Verdict.ESCALATE


def test_decide_a_typed_stop_while_stopping_escalates_at_once() -> None:
    # Typing "stop" again is deliberate, however soon after the first. (The /threadpilot
    # list answers with buttons, so its presses are pressed, not typed.)
    stopping = view(StopReason.STOP, since_users_stop_s=0.1)

    assert verdict_for(ask(source=StopSource.STOP_WORD, origin=None), stopping, settings()) is (
        Verdict.ESCALATE
    )


def test_decide_abort_on_a_stopping_run_aborts() -> None:
    stopping = view(StopReason.STOP, since_users_stop_s=0.1)

    assert verdict_for(ask(StopReason.ABORT), stopping, settings()) is Verdict.ABORT


@pytest.mark.parametrize("pending", [StopReason.ABORT, StopReason.SHUTDOWN])
@pytest.mark.parametrize("kind", [StopReason.STOP, StopReason.ABORT])
def test_decide_anything_on_an_aborting_run_is_already_aborting(
    pending: StopReason, kind: StopReason
) -> None:
    verdict = verdict_for(ask(kind), view(pending), settings())

    assert verdict is Verdict.ALREADY_ABORTING
    assert not verdict.changes_state


@pytest.mark.parametrize(
    ("policy", "user", "expected"),
    [
        (StopPolicy.REQUESTER, OTHER, Verdict.NOT_ALLOWED),
        (StopPolicy.REQUESTER, PARTICIPANT, Verdict.NOT_ALLOWED),
        (StopPolicy.REQUESTER, ADMIN, Verdict.STOP),
        (StopPolicy.PARTICIPANTS, PARTICIPANT, Verdict.STOP),
        (StopPolicy.PARTICIPANTS, OTHER, Verdict.NOT_ALLOWED),
        (StopPolicy.ANYONE, OTHER, Verdict.STOP),
    ],
)
def test_decide_follows_the_stop_policy(policy: StopPolicy, user: str, expected: Verdict) -> None:
    verdict = verdict_for(ask(user=user), view(), settings(policy))

    assert verdict is expected


def test_decide_not_allowed_comes_before_the_run_state() -> None:
    # Someone who may not stop learns that, not whether the run is already stopping.
    verdict = verdict_for(ask(user=OTHER), view(StopReason.ABORT), settings())

    assert verdict is Verdict.NOT_ALLOWED
    assert not verdict.changes_state


def test_decide_a_run_that_has_ended_is_finished() -> None:
    verdict = verdict_for(ask(), view(finished=True), settings())

    assert verdict is Verdict.FINISHED
    assert not verdict.changes_state


def test_decide_an_unknown_run_is_not_found() -> None:
    verdict = verdict_for(ask(StopReason.ABORT), None, settings())

    assert verdict is Verdict.NOT_FOUND
    assert not verdict.changes_state


def test_an_ask_is_a_stop_or_an_abort_of_a_run_or_a_thread() -> None:
    with pytest.raises(ValueError, match="stop or abort"):
        StopAsk(user=REQUESTER, kind=StopReason.SHUTDOWN, source=StopSource.BUTTON, run_id=RUN)
    with pytest.raises(ValueError, match="run id or the run's thread"):
        StopAsk(user=REQUESTER, kind=StopReason.STOP, source=StopSource.NATIVE)


# -- verdict_for(): a button counts only on its run's own status message ----------------------


@pytest.mark.parametrize(
    "origin",
    [
        Origin("T1", "C1", "9.0", "9.0"),  # another thread
        Origin("T1", "C1", "1.0", "1.0"),  # the run's thread, but not its status message
        Origin("T1", "C2", STATUS_TS, "1.0"),  # another channel
        Origin("T2", "C1", STATUS_TS, "1.0"),  # another team
        None,  # no message at all
    ],
    ids=["thread", "message", "channel", "team", "none"],
)
@pytest.mark.parametrize("kind", [StopReason.STOP, StopReason.ABORT])
def test_decide_a_click_from_anywhere_but_the_status_message_is_refused(
    origin: Origin | None, kind: StopReason
) -> None:
    verdict = verdict_for(ask(kind, user=ADMIN, origin=origin), view(), settings())

    assert verdict is Verdict.NOT_THIS_RUN
    assert not verdict.changes_state


def test_decide_a_foreign_click_learns_nothing_about_the_run() -> None:
    elsewhere = Origin("T1", "C1", "9.0")

    verdict = verdict_for(ask(origin=elsewhere), view(finished=True), settings())

    assert verdict is Verdict.NOT_THIS_RUN  # not "finished"


@pytest.mark.parametrize("source", [StopSource.NATIVE, StopSource.STOP_WORD])
def test_decide_what_is_not_a_button_is_bound_by_its_thread_alone(source: StopSource) -> None:
    # Slack's native stop and a stop word name the run's thread, not a message: the
    # service found the run by that thread already.
    assert verdict_for(ask(source=source, origin=None), view(), settings()) is Verdict.STOP


def test_decide_before_the_status_message_is_known_the_thread_is_the_bound() -> None:
    # The status post is in flight (or its answer was lost): a click from the run's
    # thread counts, one from anywhere else does not.
    posting = view(status_ts=None)
    in_thread = Origin("T1", "C1", "1.7", "1.0")

    assert verdict_for(ask(origin=in_thread), posting, settings()) is Verdict.STOP
    assert verdict_for(ask(origin=Origin("T1", "C1", "1.0")), posting, settings()) is Verdict.STOP
    for elsewhere in (Origin("T1", "C1", "9.1", "9.0"), Origin("T1", "C2", "1.7", "1.0")):
        assert verdict_for(ask(origin=elsewhere), posting, settings()) is Verdict.NOT_THIS_RUN


# -- what the policy needs, read before it decides -----------------------------------


def test_only_a_stop_pressed_on_a_stopping_run_needs_the_askers_own_stops() -> None:
    stopping = view(StopReason.STOP)
    assert needs_own_stops(ask(), stopping)
    assert not needs_own_stops(ask(source=StopSource.STOP_WORD, origin=None), stopping)
    assert not needs_own_stops(ask(StopReason.ABORT), stopping)
    assert not needs_own_stops(ask(), view())
    assert not needs_own_stops(ask(), view(StopReason.STOP, finished=True))


async def test_who_wrote_in_the_thread_is_read_only_where_the_policy_needs_it() -> None:
    store = MemoryStore()
    thread = ThreadKey("T1", "C1", "1.0")
    await store.add_participant(thread, OTHER)
    policy = settings(StopPolicy.PARTICIPANTS)
    assert await read_participants(store, OTHER, REQUESTER, thread, policy) == {OTHER}
    # The requester and admins may anyway; other policies do not look at the thread.
    assert await read_participants(store, REQUESTER, REQUESTER, thread, policy) == frozenset()
    assert await read_participants(store, ADMIN, REQUESTER, thread, policy) == frozenset()
    assert await read_participants(store, OTHER, REQUESTER, thread, settings()) == frozenset()
