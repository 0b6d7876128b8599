"""Clicks meeting faults and forgeries: a busy database, a button that is not the run's.

Issue 7, classes 6 and 8 (docs/stopping.md, docs/operations.md):

- With another process holding the SQLite write lock, a Stop click must still be
  acknowledged well inside Slack's 3 seconds (the app's budget is ``ACK_BUDGET_S``), say
  that the stop was not recorded, and change nothing; it must never be taken for an
  unknown button. Once the lock is gone, the next press works.
- A click counts only for the run whose status message it came from. A payload carrying
  a run's id in its button ``value``, pressed in another thread, channel or team, or on
  another message, is refused with an ephemeral and changes nothing, whether it lands in
  the worker that owns the run or in another one (which can only ask the database).
- When the shared delivery log cannot answer, a mention is answered all the same (a
  click, whose delivery is recorded with its stop request, is
  ``tests/bot/inbound/test_click_deliveries.py``'s).

The "other worker" is a second app in this process on the same SQLite file (as in
``tests/system/test_races.py``): it has its own connection, stop watcher and supervisor,
so a click it receives takes the database path, as in a separate process.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from agent_core import StopReason, StorageError
from bot import messages
from bot.handlers.actions import ACK_BUDGET_S
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
from tests.fakes.slack_workspace import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    DEFAULT_WORKSPACE,
    Workspace,
)
from tests.system.workers import until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.values.records import StopRequestRecord
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

SLACK_ACK_S = 3.0
ACK_WELL_WITHIN_S = ACK_BUDGET_S + 0.5
"""Slack gives up at 3 s; the app's own budget plus a margin for HTTP on a busy machine."""

OTHER_CHANNEL = "C0TPOTHER01"
OTHER_TEAM = Workspace(team_id="T0TPOTHER01", team_domain="elsewhere")

_HOLD_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@contextlib.asynccontextmanager
async def write_lock_held(database: Path) -> AsyncIterator[None]:
    """Another process holds the database file's write lock until the block ends."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLD_WRITE_LOCK,
        str(database),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        async with asyncio.timeout(WAIT_S):
            assert await holder.stdout.readline() == b"locked\n"
        yield
    finally:
        holder.stdin.close()
        async with asyncio.timeout(WAIT_S):
            await holder.wait()


async def two_workers(make_bot: BotFactory) -> tuple[Bot, Bot]:
    """The owner (it gets the mentions) and another worker on the same database."""
    return await make_bot(WORKER_ID="owner"), await make_bot(WORKER_ID="other")


async def status_stored(bot: Bot, run_id: str) -> None:
    """Wait until the database knows the run's status message, as other workers read it."""
    ctx = bot.app.ctx
    assert ctx is not None

    async def stored() -> bool:
        record = await ctx.store.get_run(run_id)
        return record is not None and record.status_ts is not None

    await until_async(stored, what=f"the status_ts of run {run_id} to be stored")


async def stop_requests(bot: Bot, run_id: str) -> list[tuple[StopReason, str]]:
    assert bot.app.ctx is not None
    return [(r.kind, r.requested_by) for r in await bot.app.ctx.store.stop_requests_for(run_id)]


async def press(bot: Bot, payload: Json) -> tuple[int, float]:
    """Deliver a click; the HTTP status and how long the app took to answer it."""
    started = time.monotonic()
    response = await bot.post(slack_requests.interaction_request(payload, SECRET))
    return response.status, time.monotonic() - started


# -- a competing SQLite writer (class 6) -------------------------------------------------


@pytest.mark.parametrize("where", ["owner", "other"])
async def test_a_stop_while_another_process_holds_the_write_lock_is_answered_in_time(
    make_bot: BotFactory, llm: LLMock, tmp_path: Path, where: str
) -> None:
    owner, other = await two_workers(make_bot)
    clicked = owner if where == "owner" else other
    llm.add(*stalled_answer(8.0, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    _, running = await owner.mention("check the time")
    run_id = run_id_of(running)
    await status_stored(owner, run_id)
    await owner.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    async with write_lock_held(tmp_path / "threadpilot.db"):
        status, took = await press(
            clicked,
            slack_requests.click_button(
                owner.slack.message(running.channel, running.ts), ACTION_STOP
            ),
        )
        assert status == 200
        assert took < ACK_WELL_WITHIN_S
        assert await clicked.ephemerals(DEFAULT_USER) == [messages.STOP_NOT_RECORDED_BUSY]
    live = owner.live_run(running)
    assert live is not None and live.run.control.reason is None  # nothing changed
    assert await stop_requests(owner, run_id) == []

    assert await clicked.click(running, ACTION_STOP) == 200  # pressed again, lock gone

    final = await owner.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert await stop_requests(owner, run_id) == [(StopReason.STOP, DEFAULT_USER)]
    assert owner.ephemerals_for(DEFAULT_USER, running.channel) == [messages.STOP_NOT_RECORDED_BUSY]


async def test_a_stop_slower_than_slacks_3_seconds_is_never_taken_for_an_unknown_button(
    bot: Bot, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store that does not give up when cancelled (as SQLite's did, waiting behind a busy
    # BEGIN IMMEDIATE): the Stop cannot ack in time, and Bolt offers the click to the
    # next listener that matches. None may: the person must not read "unknown button".
    llm.add(*stalled_answer(2.0, with_tool=False, text=SHORT_TEXT))
    _, running = await bot.mention("write a little")
    assert bot.app.ctx is not None
    store = bot.app.ctx.store

    async def stubborn(*args: object, **kwargs: object) -> StopRequestRecord:
        try:
            await asyncio.sleep(SLACK_ACK_S + 0.5)  # the fault: a call that will not end
        except asyncio.CancelledError:
            await asyncio.sleep(SLACK_ACK_S - ACK_BUDGET_S + 0.5)
            raise
        raise AssertionError("the click's budget ends first")

    monkeypatch.setattr(store, "add_stop_request_once", stubborn)

    await bot.click(running, ACTION_STOP)  # Slack gave up on it after 3 s

    assert await bot.ephemerals(DEFAULT_USER) == [messages.STOP_NOT_RECORDED_BUSY]
    final = await bot.final(running)
    assert "Finished" in block_text(final)
    assert bot.ephemerals_for(DEFAULT_USER, running.channel) == [messages.STOP_NOT_RECORDED_BUSY]


# -- the delivery log cannot answer ------------------------------------------------------


async def test_a_mention_is_answered_when_the_delivery_log_cannot_say(
    bot: Bot, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Better a rare duplicate run than a mention nobody answers.
    assert bot.app.ctx is not None
    monkeypatch.setattr(bot.app.ctx.store, "first_delivery", refuse)
    llm.reply("Answered anyway.")

    _, status = await bot.mention("answer me")

    assert "Answered anyway." in block_text(await bot.final(status))


async def refuse(key: str) -> bool:
    raise StorageError(f"the delivery log is down (asked about {key})")


# -- clicks bound to their run (class 8) -------------------------------------------------


def forgeries(running: Message, thread_ts: str, other_thread: str) -> dict[str, Json]:
    """Presses carrying the run's id, from everywhere but its status message."""
    run_id = run_id_of(running)

    def forged(
        action_id: str,
        message_ts: str,
        *,
        thread_ts: str | None = None,
        channel: str = DEFAULT_CHANNEL,
        workspace: Workspace = DEFAULT_WORKSPACE,
    ) -> Json:
        return slack_requests.button_click(
            action_id=action_id,
            value=run_id,
            message_ts=message_ts,
            thread_ts=thread_ts,
            channel=channel,
            workspace=workspace,
        )

    status = running.ts
    return {
        "another thread": forged(ACTION_ABORT, other_thread),
        "another message of its thread": forged(ACTION_ABORT, thread_ts, thread_ts=thread_ts),
        "another channel": forged(ACTION_ABORT, status, thread_ts=thread_ts, channel=OTHER_CHANNEL),
        "another team": forged(ACTION_ABORT, status, thread_ts=thread_ts, workspace=OTHER_TEAM),
        "another thread, stop": forged(ACTION_STOP, other_thread),
    }


@pytest.mark.parametrize("where", ["owner", "other"])
async def test_a_click_from_anywhere_but_the_runs_status_message_changes_nothing(
    make_bot: BotFactory, llm: LLMock, where: str
) -> None:
    owner, other = await two_workers(make_bot)
    clicked = owner if where == "owner" else other
    llm.add(*stalled_answer(2.0, with_tool=False, text=SHORT_TEXT))
    thread_ts, running = await owner.mention("write a little")
    run_id = run_id_of(running)
    await status_stored(owner, run_id)
    other_thread = owner.slack.seed_message(DEFAULT_CHANNEL, "another thread, another run")

    for name, payload in forgeries(running, thread_ts, other_thread).items():
        status, _ = await press(clicked, payload)
        assert status == 200, name

    live = owner.live_run(running)
    assert live is not None and live.run.control.reason is None  # still running
    assert await stop_requests(owner, run_id) == []
    # Pressed by someone of another team: the trust boundary refuses it first.
    refused = [messages.CLICK_NOT_FROM_RUN] * 3 + [messages.EXTERNAL_NOT_ALLOWED]
    assert sorted(await clicked.ephemerals(DEFAULT_USER, count=4)) == sorted(refused)
    assert await clicked.ephemerals(DEFAULT_USER, channel=OTHER_CHANNEL) == [
        messages.CLICK_NOT_FROM_RUN
    ]
    final = await owner.final(running)
    text = block_text(final)
    assert "Finished" in text
    assert "stop requested" not in text
    assert [r.completed for r in llm.requests] == [True]
