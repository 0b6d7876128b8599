"""A continuation is never lost between two writes (issue 28; docs/stopping.md, Budgets).

Starting a continuation is two writes: the ended run's resume becomes ``started`` ("Continued
by @you") and the continuation's own row is stored. A worker that fails between them (here:
the second statement fails, as a crash or a database error at that point would leave it)
must leave nothing half-done: the resume is still due, and a later pass starts exactly one
continuation. The real app against the fake Slack and llmock, on a real SQLite file whose
insert of a continuation row fails until the test lets it through.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

from structlog.testing import capture_logs

from agent_core.values.records import ResumeState
from bot.views.status import ACTION_CONTINUE
from tests.bot.harness import WAIT_S
from tests.bot.stopping.test_continue import DONE, ONE_TOOL_CALL, spend_the_budget
from tests.bot.workers.test_resume import (
    new_status_message,
    run_id_of_done,
    store_of,
    stored,
    transcript,
)
from tests.system.workers import until_async

if TYPE_CHECKING:
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory

FAILED_START = frozenset({"resume.schedule_failed", "store.write_failed"})
"""What the worker logs when the continuation's start fails (today, or before the fix)."""


def fail_continuation_rows(database: Path, *, on: bool) -> None:
    """Make every insert of a continuation's row fail (``on``), or succeed again."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        if on:
            db.execute(
                "CREATE TRIGGER fail_continuation BEFORE INSERT ON runs "
                "WHEN NEW.continued_from IS NOT NULL "
                "BEGIN SELECT RAISE(ABORT, 'injected: the continuation row'); END"
            )
        else:
            db.execute("DROP TRIGGER fail_continuation")
        db.commit()


async def test_a_continuation_whose_row_fails_is_still_due_and_starts_once(
    make_bot: BotFactory, llm: LLMock, tmp_path: Path
) -> None:
    bot = await make_bot(**ONE_TOOL_CALL)
    thread_ts, final = await spend_the_budget(bot, llm)
    first_id = run_id_of_done(final, bot)
    fail_continuation_rows(tmp_path / "threadpilot.db", on=True)
    llm.reply(DONE)

    with capture_logs() as logs:
        assert await bot.click(final, ACTION_CONTINUE) == 200

        async def start_failed() -> bool:
            return any(e["event"] in FAILED_START for e in logs)

        await until_async(start_failed, what="the continuation's start to fail", timeout=WAIT_S)

    # Nothing half-done: not "started" with no run; still due for the next pass.
    record = await stored(bot, first_id)
    assert record.resume is ResumeState.SCHEDULED
    runs = await store_of(bot).find_runs(thread=record.thread)
    assert [r.id for r in runs] == [first_id]
    assert [r.id for r in await store_of(bot).pending_resumes()] == [first_id]

    fail_continuation_rows(tmp_path / "threadpilot.db", on=False)
    second = await new_status_message(bot, thread_ts, after=final.ts)
    await bot.final(second)

    assert DONE in transcript(bot.slack, thread_ts)
    assert (await stored(bot, first_id)).resume is ResumeState.STARTED
    runs = await store_of(bot).find_runs(thread=record.thread)
    assert sorted(r.continued_from or "" for r in runs) == ["", first_id]  # exactly one
