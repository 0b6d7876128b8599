"""Resumes take room like new runs (docs/operations.md, Queue and MAX_LIVE_RUNS): after a
restart the due resumes spread over the workers that have room, and one that finds no
room anywhere waits until a run ends. Real ``python -m bot`` workers on PostgreSQL.

Worker ``a`` drives five runs, each stalled mid-answer, and is killed. It comes back
with ``MAX_LIVE_RUNS=2``, beside a new worker ``b`` with the same: the five runs end
``worker_lost`` and are due to resume at once, but the two workers have room for four.
Each resumes two; the fifth waits in the schedule (both say so in their logs) until a
run on ``a`` is aborted, and then ``a`` resumes it. (Every resumed run's answer stalls,
so each holds its room until it is aborted.)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from agent_core import RunState
from agent_core.values.records import ResumeState
from tests.bot.harness import (
    ACTION_ABORT,
    SHORT_TEXT,
    block_text,
    buttons,
    run_id_of,
    stalled_answer,
)
from tests.system.workers import until, until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

RUNS = 5
ROOM = "2"


def stall(llm: LLMock) -> None:
    llm.add(*stalled_answer(60.0, with_tool=False, text=SHORT_TEXT))


async def resumed_by(store: Store, run_ids: list[str]) -> dict[str, str]:
    """Which worker resumed each run that was resumed (its ``run.resumed`` event)."""
    found = {}
    for run_id in run_ids:
        for event in await store.events_for(run_id):
            if event.kind == "run.resumed":
                found[run_id] = event.actor
    return found


def waited(worker: WorkerProcess, run_id: str) -> bool:
    return bool(worker.logged("resume.waits_for_room", run_id=run_id))


async def abort(cluster: Cluster, worker: WorkerProcess, store: Store, run_id: str) -> None:
    record = await store.get_run(run_id)
    assert record is not None and record.status_ts is not None
    message = cluster.slack.message(record.thread.channel, record.status_ts)
    assert await worker.click(message, ACTION_ABORT) == 200
    await cluster.final(message)


async def test_due_resumes_spread_over_the_workers_with_room_and_wait_for_it(
    pg_cluster: Cluster, pg_store: Store, llm: LLMock
) -> None:
    cluster, store = pg_cluster, pg_store
    (a,) = await cluster.start("a", MAX_LIVE_RUNS=str(RUNS))
    statuses: list[Message] = []
    for n in range(RUNS):
        stall(llm)
        _, status = await cluster.mention(a, f"long task {n}")
        statuses.append(await cluster.until_message(status, lambda m: "Working" in block_text(m)))
    run_ids = [run_id_of(s) for s in statuses]
    assert await a.kill() == -9

    for _ in range(RUNS):
        stall(llm)  # each resumed run's answer stalls again: it holds its room
    b_started = cluster.start("b", MAX_LIVE_RUNS=ROOM)
    await asyncio.gather(b_started, a.restart(MAX_LIVE_RUNS=ROOM))
    b = cluster.workers["b"]

    async def four_resumed() -> dict[str, str] | None:
        found = await resumed_by(store, run_ids)
        return found if len(found) >= RUNS - 1 else None

    taken = await until_async(four_resumed, what="four resumes", timeout=30.0)
    (fifth,) = set(run_ids) - set(taken)
    # Both workers found it due and had no room for it: it waits.
    await until(lambda: waited(a, fifth) and waited(b, fifth), what="the fifth to wait")
    spread = Counter(taken.values())
    print(f"resumes taken per worker: {dict(spread)}; waiting: 1")
    assert spread == {"a": 2, "b": 2}
    assert len(await resumed_by(store, run_ids)) == RUNS - 1
    record = await store.get_run(fifth)
    assert record is not None
    assert (record.state, record.resume) == (RunState.BLOCKED, ResumeState.SCHEDULED)

    # Room frees on a: a resumes the fifth.
    on_a = [run_id for run_id, worker in taken.items() if worker == "a"]
    await abort(cluster, a, store, on_a[0])

    async def fifth_resumed() -> str | None:
        return (await resumed_by(store, run_ids)).get(fifth)

    assert await until_async(fifth_resumed, what="the fifth's resume") == "a"
    status = await cluster.until_message(
        statuses[run_ids.index(fifth)], lambda m: "Working" in block_text(m)
    )
    assert ACTION_ABORT in buttons(status)
    taken[fifth] = "a"

    for run_id, worker in taken.items():
        if run_id != on_a[0]:
            await abort(cluster, a if worker == "a" else b, store, run_id)
