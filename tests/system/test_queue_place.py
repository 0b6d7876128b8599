"""A queued run's place in line moves as the runs ahead of it end, and the worker's
heartbeat goes on meanwhile (docs/operations.md, Queue and MAX_LIVE_RUNS).

One real worker process with ``MAX_LIVE_RUNS=1``: a stalled run fills it and three more
mentions wait in the queue, each in its status message ("Queued: n ahead"). When the
running one is aborted, the first queued run takes the slot, and the other two messages
say they moved up. Those updates are the worker's own task's, through the Slack budget,
never the heartbeat's: the heartbeat never fails (its reconcile and purge would be
skipped on every beat).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.bot.harness import ACTION_ABORT, SHORT_TEXT, block_text, run_id_of, stalled_answer
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow


def says(text: str) -> object:
    return lambda message: text in block_text(message)


async def test_queued_places_move_as_runs_ahead_end_and_the_heartbeat_never_fails(
    cluster: Cluster, store: Store, llm: LLMock
) -> None:
    (worker,) = await cluster.start("a", MAX_LIVE_RUNS="1")
    for _ in range(2):  # the run that fills the worker, then the first queued one
        llm.add(*stalled_answer(60.0, with_tool=False, text=SHORT_TEXT))
    _, busy = await cluster.mention(worker, "keep the worker busy")
    await cluster.until_message(busy, lambda m: "Working" in block_text(m))

    waiting: list[Message] = []
    for n in range(3):
        _, status = await cluster.mention(worker, f"queued task {n}")
        assert f"Queued: {n} ahead" in block_text(status)
        waiting.append(status)
        run_id = run_id_of(status)

        async def let_go(run_id: str = run_id) -> bool:
            record = await store.get_run(run_id)
            return record is not None and record.owner is None

        await until_async(let_go, what=f"queued task {n} to wait in the queue")
    first, second, third = waiting

    assert await worker.click(cluster.current(busy), ACTION_ABORT) == 200
    await cluster.until_message(first, lambda m: "Working" in block_text(m))
    # The two behind it moved up, in their own messages.
    await cluster.until_message(second, lambda m: "Queued: 0 ahead" in block_text(m))
    await cluster.until_message(third, lambda m: "Queued: 1 ahead" in block_text(m))

    # Every beat went through: lease renewal, then reconcile and purge when due.
    assert worker.logged("worker.housekeeping_failed") == []
    assert worker.logged("queue.refresh_failed") == []

    for message in (first, second, third):
        await worker.click(cluster.current(message), ACTION_ABORT)
    for message in (first, second, third):
        await cluster.final(message)
