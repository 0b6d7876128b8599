"""A rate-limited run resumes on time whatever happens to its worker during the wait:
the resume is a row in the database, and any worker starts it when it is due
(docs/stopping.md, "Why a run ended, and resuming on its own"). Real ``python -m bot`` workers,
on SQLite and PostgreSQL.

The run's first turn (a tool call) completes and is checkpointed; its second request is
refused with a 429 whose Retry-After is past the retry budget (``MAX_RETRY_AFTER``), so
the run ends ``blocked`` at once and its status message says when it resumes. Its worker
is then killed with SIGKILL during the wait.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Fail, Reply, StreamFault, ToolCall

from agent_core import EndedBecause, RunState
from agent_core.values.prompts import resumed_note
from tests.bot.harness import block_text, is_final, run_id_of
from tests.system.workers import LEASE_TTL_S, until, until_async

if TYPE_CHECKING:
    from datetime import datetime

    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import AuditEvent
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = pytest.mark.slow

RETRY_AFTER_S = 5.0
"""The provider's Retry-After: the wait during which the worker is killed (and, in one
test, restarted: start-up takes 1-2 s here)."""
ON_TIME_S = LEASE_TTL_S / 3 + 2.0
"""A worker that did not schedule the resume reads the schedule every LEASE_TTL / 3 (and
then sleeps until it is due); this also allows for a loaded 2-core machine."""
ANSWER = "The report is summarised: three findings, all fixed."
SETTINGS = {"MAX_RETRY_AFTER": "0.5"}


async def start_a_rate_limited_run(
    cluster: Cluster, worker: WorkerProcess, llm: LLMock, journal: Journal
) -> Message:
    """Turn 1 (a tool call) completes; the next request is refused with a 429 (queued
    while turn 1 streams, so that turn 1 is not); the one after is answered."""
    pause = StreamFault("stall", after_chunks=1, stall_seconds=1.0)
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)), pause)
    _, status = await cluster.mention(worker, "summarise the report")
    await until(lambda: journal.in_flight == 1, what="turn 1 streaming")
    llm.add(Fail(429, retry_after=RETRY_AFTER_S, code="rate_limit_exceeded"))
    llm.reply(ANSWER)
    return status


def paused(message: Message) -> bool:
    return "Resumes on its own at" in block_text(message)


def finished(message: Message) -> bool:
    return is_final(message) and "Finished" in block_text(message)


async def run_until_paused(
    cluster: Cluster, worker: WorkerProcess, store: Store, llm: LLMock, journal: Journal
) -> tuple[str, Message, datetime]:
    """Start the run on ``worker`` and wait until it is paused; the run, its status
    message, and when its resume is due (as stored)."""
    status = await start_a_rate_limited_run(cluster, worker, llm, journal)
    run_id = run_id_of(status)
    status = await cluster.until_message(status, paused)
    record = await store.get_run(run_id)
    assert record is not None and record.resume_at is not None
    assert (record.state, record.ended_because) == (RunState.BLOCKED, EndedBecause.RATE_LIMIT)
    return run_id, status, record.resume_at


async def resumed_event(store: Store, run_id: str) -> AuditEvent:
    async def found() -> AuditEvent | None:
        return next((e for e in await store.events_for(run_id) if e.kind == "run.resumed"), None)

    return await until_async(found, what="run.resumed", timeout=RETRY_AFTER_S + 20)


async def check_resumed_on_time(
    cluster: Cluster,
    store: Store,
    journal: Journal,
    run_id: str,
    status: Message,
    due: datetime,
    by: str,
) -> None:
    resumed = await resumed_event(store, run_id)
    late = (resumed.at - due).total_seconds()
    print(f"resumed by {resumed.actor} {late:+.2f}s from its due time")
    assert resumed.actor == by
    assert 0 <= late <= ON_TIME_S
    final = await cluster.until_message(status, finished)
    assert ANSWER in block_text(final)
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.state, record.owner, record.auto_resumes) == (RunState.FINISHED, by, 1)
    # From the checkpoint: turn 1's tool result is there, told why it paused.
    last = journal.records()[-1].body["messages"]
    assert sum(m["role"] == "tool" for m in last) == 1
    assert {"role": "system", "content": resumed_note(EndedBecause.RATE_LIMIT)} in last
    assert [r.status for r in journal.records()] == [200, 429, 200]


async def test_another_worker_resumes_on_time_after_the_first_is_killed_during_the_wait(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, _ = await cluster.start("a", "b", **SETTINGS)
    run_id, status, due = await run_until_paused(cluster, a, store, llm, journal)

    killed_at = time.monotonic()
    assert await a.kill() == -9
    assert time.monotonic() - killed_at < RETRY_AFTER_S  # killed during the wait

    await check_resumed_on_time(cluster, store, journal, run_id, status, due, by="b")


async def test_the_same_worker_restarted_during_the_wait_resumes_on_time(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    (a,) = await cluster.start("a", **SETTINGS)
    run_id, status, due = await run_until_paused(cluster, a, store, llm, journal)

    assert await a.kill() == -9
    await a.restart()

    await check_resumed_on_time(cluster, store, journal, run_id, status, due, by="a")
