"""One stop service for every way of asking a run to end, and the stop ladder.

docs/stopping.md: the Stop and Abort buttons and Slack's native stop go through one
service; it decides by policy, commits before the ack, applies the request in the
worker that owns the run (once: the owner's stop watcher does not apply it again),
writes the audit event and answers the person. Level 1 is Stop; a second deliberate
Stop while stopping, an Abort, or ``FINAL_TURN_TIMEOUT`` running out is level 2, and
the status message says where the run is.

The "other worker" is a second app in this process on the same SQLite file (as in
``test_click_faults``): a native stop it receives is decided from the database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from structlog.testing import capture_logs

from agent_core import StopReason
from bot import messages
from tests.agent_core.helpers import offered_tools
from tests.bot.handlers.test_click_faults import status_stored, stop_requests, two_workers
from tests.bot.harness import (
    ACTION_ABORT,
    ACTION_STOP,
    SHORT_TEXT,
    WAIT_S,
    block_text,
    buttons,
    run_id_of,
    stalled_answer,
)
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.values.records import AuditEvent
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

OTHER = "U0TPOTHER01"
"""Someone in the channel who did not start the run and is no admin."""


async def native_stop(bot: Bot, thread_ts: str, *, user: str = DEFAULT_USER) -> int:
    """Press Slack's own stop button on the thread's agent session, through ``bot``."""
    envelope = slack_requests.agent_session_stopped(
        channel=DEFAULT_CHANNEL, thread_ts=thread_ts, user=user
    )
    return await bot.event(envelope)


async def audit(bot: Bot, run_id: str) -> list[AuditEvent]:
    assert bot.app.ctx is not None
    return await bot.app.ctx.store.events_for(run_id)


def stop_events(events: list[AuditEvent]) -> list[tuple[str, str, Any, Any]]:
    """The service's audit events: (kind, actor, source, level)."""
    return [
        (e.kind, e.actor, e.detail.get("source"), e.detail.get("level"))
        for e in events
        if e.kind in ("stop.requested", "abort.requested", "stop.escalated")
    ]


# -- Slack's native stop, through the service --------------------------------------------


@pytest.mark.parametrize("where", ["owner", "other"])
async def test_a_native_stop_is_committed_before_its_ack_and_ends_the_run_gracefully(
    make_bot: BotFactory, llm: LLMock, where: str
) -> None:
    owner, other = await two_workers(make_bot)
    received = owner if where == "owner" else other
    llm.add(*stalled_answer(1.0, text=SHORT_TEXT))
    llm.reply("Stopped from Slack's own button.")
    thread_ts, running = await owner.mention("check the time")
    run_id = run_id_of(running)
    await status_stored(owner, run_id)
    await owner.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await native_stop(received, thread_ts) == 200
    # Acknowledged only once the request was durable, wherever it landed.
    assert await stop_requests(owner, run_id) == [(StopReason.STOP, DEFAULT_USER)]

    final = await owner.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert "Stopped from Slack's own button." in block_text(final)
    assert llm.requests[0].completed  # the step in flight was let finish
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert stop_events(await audit(owner, run_id)) == [
        ("stop.requested", DEFAULT_USER, "native", 1)
    ]
    assert received.ephemerals_for(DEFAULT_USER, DEFAULT_CHANNEL) == []


@pytest.mark.parametrize("where", ["owner", "other"])
async def test_a_native_stop_by_someone_the_policy_does_not_allow_is_refused_and_told(
    make_bot: BotFactory, llm: LLMock, where: str
) -> None:
    owner, other = await two_workers(make_bot)
    received = owner if where == "owner" else other
    llm.add(*stalled_answer(1.0, with_tool=False, text=SHORT_TEXT))
    thread_ts, running = await owner.mention("write a little")
    run_id = run_id_of(running)
    await status_stored(owner, run_id)

    assert await native_stop(received, thread_ts, user=OTHER) == 200

    assert await received.ephemerals(OTHER) == [messages.not_allowed("requester", DEFAULT_USER)]
    final = await owner.final(running)
    assert "Finished" in block_text(final)
    assert await stop_requests(owner, run_id) == []
    assert [r.completed for r in llm.requests] == [True]


# -- the stop ladder ---------------------------------------------------------------------


@pytest.mark.parametrize("second", ["native", "button"])
async def test_a_native_stop_then_a_second_press_aborts(bot: Bot, llm: LLMock, second: str) -> None:
    llm.add(*stalled_answer(30.0, text=SHORT_TEXT))
    thread_ts, running = await bot.mention("write a lot")
    run_id = run_id_of(running)
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    assert await native_stop(bot, thread_ts) == 200
    stopping = await bot.until(running, lambda m: messages.STATUS_STOPPING in block_text(m))
    assert buttons(stopping) == [ACTION_ABORT]  # level 1: Abort is still on offer
    # A while later (past the double-press window, without waiting for it), the same
    # person asks again: deliberately, so level 2.
    assert bot.app.ctx is not None
    bot.app.ctx.stops.double_press_s = 0.0

    if second == "native":
        assert await native_stop(bot, thread_ts) == 200
    else:  # the Stop button of a render their client still showed
        assert await bot.click_version(running, ACTION_STOP) == 200

    assert await bot.ephemerals(DEFAULT_USER) == [messages.ESCALATED_TO_ABORT]
    final = await bot.final(running)
    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    (record,) = llm.requests
    assert not record.completed  # the stalled stream was closed, not waited for
    # The report says how it got to level 2.
    assert messages.cut_off_after_stop(DEFAULT_USER) in block_text(final)
    assert stop_events(await audit(bot, run_id)) == [
        ("stop.requested", DEFAULT_USER, "native", 1),
        ("stop.escalated", DEFAULT_USER, second, 2),
    ]


async def test_a_double_press_of_slacks_stop_is_one_stop(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer(1.0, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    thread_ts, running = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await native_stop(bot, thread_ts) == 200
    assert await native_stop(bot, thread_ts) == 200  # the same hand, at once

    assert await bot.ephemerals(DEFAULT_USER) == [messages.ALREADY_STOPPING]
    final = await bot.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert llm.requests[0].completed
    assert offered_tools(llm.requests[-1]) == ["final_report"]


async def test_a_re_delivered_native_stop_is_no_second_stop(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer(1.0, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    thread_ts, running = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    assert bot.app.ctx is not None
    bot.app.ctx.stops.double_press_s = 0.0  # a second press would now escalate
    envelope = slack_requests.agent_session_stopped(channel=DEFAULT_CHANNEL, thread_ts=thread_ts)

    assert await bot.event(envelope) == 200
    assert await bot.event(envelope, retry_num=1) == 200  # Slack sends it again

    final = await bot.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert llm.requests[0].completed  # never aborted
    assert await stop_requests(bot, run_id_of(running)) == [(StopReason.STOP, DEFAULT_USER)]
    assert bot.ephemerals_for(DEFAULT_USER, DEFAULT_CHANNEL) == []


async def test_final_turn_timeout_escalates_to_abort_and_the_status_says_so(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(FINAL_TURN_TIMEOUT="0.5")
    llm.add(*stalled_answer(0.5, text=SHORT_TEXT))  # the step in flight when Stop comes
    llm.add(*stalled_answer(30.0, with_tool=False, text=SHORT_TEXT))  # a summary that hangs
    _, running = await bot.mention("check the time")
    run_id = run_id_of(running)
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await bot.click(running, ACTION_STOP) == 200

    final = await bot.final(running)
    text = block_text(final)
    assert "User interlude: aborted by threadpilot" in text
    assert (
        f"<@{DEFAULT_USER}> asked it to stop; its summary took longer than 0.5s "
        "(FINAL_TURN_TIMEOUT), so it was cut off."
    ) in text
    first, summary = llm.requests
    assert first.completed and offered_tools(summary) == ["final_report"]
    assert not summary.completed  # the hanging summary was cut off
    events = await audit(bot, run_id)
    assert stop_events(events) == [("stop.requested", DEFAULT_USER, "button", 1)]
    received = [(e.kind, e.actor, e.detail.get("source")) for e in events]
    assert ("abort.received", "system:final-turn-timeout", "timer") in received


# -- the owner applies a request once ----------------------------------------------------


async def test_the_owner_does_not_apply_its_own_request_again(bot: Bot, llm: LLMock) -> None:
    # The click's request is applied here before the ack; the stop watcher polls the
    # table every 250 ms while the stream stalls, finds the request, and must leave it.
    llm.add(*stalled_answer(1.5, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    with capture_logs() as logs:
        _, running = await bot.mention("check the time")
        await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
        assert await bot.click(running, ACTION_STOP) == 200
        final = await bot.final(running)
    run_id = run_id_of(running)

    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert await stop_requests(bot, run_id) == [(StopReason.STOP, DEFAULT_USER)]
    applied = [
        (log["event"], log.get("source"))
        for log in logs
        if log["event"] in ("stop.requested", "stop.ignored", "stop.delivered")
        and log.get("run_id") == run_id
    ]
    assert applied == [("stop.requested", "button")]
