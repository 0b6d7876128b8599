"""Two real worker processes on PostgreSQL share one run queue (docs/operations.md, Queue
and MAX_LIVE_RUNS).

Each worker may drive one run (``MAX_LIVE_RUNS=1``). Both are kept busy by a stalled run,
so the next mentions, all delivered to worker ``a``, wait in the queue. Once the stalled
runs are aborted, both workers take queued runs (woken by their own run ending, by
``NOTIFY`` and by their tick): every queued run starts exactly once, in its queued status
message, and finishes; no run is taken by both, none reaches the model twice.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from agent_core import RunState
from tests.bot.harness import ACTION_ABORT, SHORT_TEXT, block_text, run_id_of, stalled_answer
from tests.system.workers import until, until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.system.workers import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

QUEUED = 5


async def test_two_workers_drain_one_queue_without_taking_a_run_twice(
    pg_cluster: Cluster, pg_store: Store, llm: LLMock
) -> None:
    cluster, store = pg_cluster, pg_store
    a, b = await cluster.start("a", "b", MAX_LIVE_RUNS="1")
    llm.add(*stalled_answer(60.0, with_tool=False, text=SHORT_TEXT))
    llm.add(*stalled_answer(60.0, with_tool=False, text=SHORT_TEXT))
    _, busy_a = await cluster.mention(a, "keep a busy")
    _, busy_b = await cluster.mention(b, "keep b busy")
    for status in (busy_a, busy_b):
        await cluster.until_message(status, lambda m: "Working" in block_text(m))

    waiting = []
    for n in range(QUEUED):
        _, status = await cluster.mention(a, f"queued task {n}")
        assert f"Queued: {n} ahead" in block_text(status)
        waiting.append(status)
        # The worker posts "Queued" while the row is still leased to it, then hands the
        # row to the queue: wait for the hand-over, not merely for the row.
        await until_async(
            lambda: _queued_at_least(store, n + 1),  # noqa: B023
            what=f"{n + 1} runs waiting in the queue",
        )
    assert await store.count_queued() == QUEUED

    for n in range(QUEUED):
        llm.reply(f"Answer number {n}.")
    assert await a.click(cluster.current(busy_a), ACTION_ABORT) == 200
    assert await b.click(cluster.current(busy_b), ACTION_ABORT) == 200

    for status in waiting:
        done = await cluster.final(status)
        assert "Finished" in block_text(done)
    ids = {run_id_of(s) for s in waiting}
    for run_id in ids:
        record = await store.get_run(run_id)
        assert record is not None and record.state is RunState.FINISHED

    # Taken once each, across both workers; each task reached the model once.
    taken = await until(
        lambda: (
            found
            if len(found := [r["run_id"] for w in (a, b) for r in w.logged("run.dequeued")])
            >= QUEUED
            else None
        ),
        what="every queued run's dequeue in the logs",
    )
    assert sorted(taken) == sorted(ids)
    asked = Counter(
        n
        for r in llm.requests
        for n in range(QUEUED)
        if f"queued task {n}" in json.dumps((r.body or {}).get("messages", [])[-1:])
    )
    assert asked == dict.fromkeys(range(QUEUED), 1)
    assert await store.count_queued() == 0


async def _queued_at_least(store: Store, count: int) -> bool | None:
    """True once ``count`` runs wait in the queue (None before, as ``until_async`` wants)."""
    return True if await store.count_queued() >= count else None
