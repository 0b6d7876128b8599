"""A click's delivery and its stop request are committed together, or not at all.

docs/architecture.md, "The path of a click": the delivery's key and the stop request go
into the database in one transaction before the ack. So:

- Slack's repeat of a click changes nothing, whichever worker it lands on, whether the
  first delivery went to the run's owner or to another worker;
- a click whose commit failed has not taken its delivery either: Slack's repeat of it
  is committed once the database works again (a taken key with no request would drop it);
- a click whose delivery cannot be recorded commits no request, and says so.

Faults are real ones in the real SQLite file: a trigger, installed by a connection of the
test's own, refuses inserts into one table.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

import pytest
from structlog.testing import capture_logs

from agent_core import StopReason
from bot import messages
from tests.bot.handlers.test_click_faults import status_stored, stop_requests, two_workers
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
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json


@contextlib.contextmanager
def inserts_refused(database: Path, table: str) -> Iterator[None]:
    """Every insert into ``table`` fails (and rolls its transaction back) until the block
    ends."""
    trigger = f"refuse_{table}"
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as conn:
        conn.execute(
            f"CREATE TRIGGER {trigger} BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
        )
        try:
            yield
        finally:
            conn.execute(f"DROP TRIGGER {trigger}")


def in_force(bot: Bot, running: Message) -> StopReason | None:
    """The stop the run has been asked for, as its worker's memory has it."""
    live = bot.live_run(running)
    assert live is not None
    return live.run.control.reason


async def deliver(bot: Bot, payload: Json) -> None:
    response = await bot.post(slack_requests.interaction_request(payload, SECRET))
    assert response.status == 200


@pytest.mark.parametrize("first", ["owner", "other"])
async def test_a_click_delivered_again_to_another_worker_changes_nothing(
    make_bot: BotFactory, llm: LLMock, first: str
) -> None:
    owner, other = await two_workers(make_bot)
    taker, repeat = (owner, other) if first == "owner" else (other, owner)
    llm.add(*stalled_answer(3.0, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")
    _, running = await owner.mention("check the time")
    run_id = run_id_of(running)
    await status_stored(owner, run_id)
    await owner.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    press = slack_requests.click_button(
        owner.slack.message(running.channel, running.ts), ACTION_STOP
    )
    live = owner.live_run(running)
    assert live is not None

    await deliver(taker, press)  # committed before this ack
    # Past the double-press window a second press would escalate to Abort, on either
    # worker: this is no second press but the same delivery, on the worker that did
    # not take it (its memory has not seen it; the database has). On the owner it is
    # decided as a Stop or, once the first has reached the run, as an escalation:
    # either way its commit finds the delivery taken.
    for bot in (owner, other):
        assert bot.app.ctx is not None
        bot.app.ctx.stops.double_press_s = 0.0
    await deliver(repeat, press)

    assert live.run.control.reason is not StopReason.ABORT  # not escalated
    final = await owner.final(running)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert await stop_requests(owner, run_id) == [(StopReason.STOP, DEFAULT_USER)]
    assert owner.ephemerals_for(DEFAULT_USER, running.channel) == []


async def test_a_click_whose_commit_failed_is_taken_when_slack_delivers_it_again(
    bot: Bot, llm: LLMock, tmp_path: Path
) -> None:
    llm.add(*stalled_answer(3.0, with_tool=False, text=SHORT_TEXT))
    _, running = await bot.mention("write a little")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    press = slack_requests.click_button(
        bot.slack.message(running.channel, running.ts), ACTION_ABORT
    )
    with inserts_refused(tmp_path / "threadpilot.db", "stop_requests"):
        await deliver(bot, press)
        assert await bot.ephemerals(DEFAULT_USER) == [messages.STOP_NOT_RECORDED]
    assert in_force(bot, running) is None  # nothing changed
    assert await stop_requests(bot, run_id_of(running)) == []

    await deliver(bot, press)  # Slack's repeat of the very same click (same action_ts)

    assert in_force(bot, running) is StopReason.ABORT
    final = await bot.final(running)
    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    assert await stop_requests(bot, run_id_of(running)) == [(StopReason.ABORT, DEFAULT_USER)]
    assert bot.ephemerals_for(DEFAULT_USER, running.channel) == [messages.STOP_NOT_RECORDED]


async def test_a_click_whose_delivery_cannot_be_recorded_changes_nothing(
    bot: Bot, llm: LLMock, tmp_path: Path
) -> None:
    llm.add(*stalled_answer(1.0, with_tool=False, text=SHORT_TEXT))
    _, running = await bot.mention("write a little")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    with inserts_refused(tmp_path / "threadpilot.db", "deliveries"):
        assert await bot.click(running, ACTION_ABORT) == 200
        assert await bot.ephemerals(DEFAULT_USER) == [messages.STOP_NOT_RECORDED]

    live = bot.live_run(running)
    assert live is not None and live.run.control.reason is None
    assert await stop_requests(bot, run_id_of(running)) == []
    assert "Finished" in block_text(await bot.final(running))


@pytest.mark.parametrize("action_id", [ACTION_STOP, ACTION_ABORT])
async def test_a_press_without_its_action_ts_is_acknowledged_and_changes_nothing(
    bot: Bot, llm: LLMock, action_id: str
) -> None:
    # Slack always sends action_ts; without it the press has no delivery key, so it can
    # be neither deduplicated nor committed. It is answered (no retry) and dropped.
    llm.add(*stalled_answer(1.0, with_tool=False, text=SHORT_TEXT))
    _, running = await bot.mention("write a little")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    press = slack_requests.click_button(running, action_id)
    del press["actions"][0]["action_ts"]

    with capture_logs() as logs:
        await deliver(bot, press)

    assert [line["event"] for line in logs if line["log_level"] == "warning"] == ["click.malformed"]
    live = bot.live_run(running)
    assert live is not None and live.run.control.reason is None
    assert await stop_requests(bot, run_id_of(running)) == []
    assert "Finished" in block_text(await bot.final(running))
