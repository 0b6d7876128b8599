"""A worker that lost a run to another worker (its lease lapsed during a stall) lets go:
it stops the run, closes its model stream, and writes nothing over the new owner's work."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent_core import ResumeSettings, RunState
from bot import messages
from bot.workers.reconciler import Reconciler
from tests.bot.harness import block_text, run_id_of, stalled_answer

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core import Checkpoint, RunRecord
    from tests.bot.harness import Bot


async def _no_resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
    raise AssertionError("auto-resume is off for this test")


async def test_a_run_taken_over_elsewhere_is_dropped_without_overwriting(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer())
    _, status = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=15)
    ctx = bot.app.ctx
    assert ctx is not None
    run_id = run_id_of(status)
    live = ctx.supervisor.get(run_id)
    assert live is not None and live.task is not None

    # Worker B decides this worker is gone (as after a stall longer than the lease).
    record = await ctx.store.get_run(run_id)
    assert record is not None
    worker_b = Reconciler(
        ctx.store,
        ctx.workspaces,
        worker_id="worker-b",
        lease_ttl_s=3,
        resume=_no_resume,
        is_local=lambda _: False,
        policy=ResumeSettings(auto_resume=frozenset()),
    )
    assert await worker_b.end_orphan(record)
    taken_over = await bot.final(status)
    assert messages.WORKER_LOST in block_text(taken_over)
    writes_before = len(bot.slack.message(status.channel, status.ts).history)

    # This worker's next heartbeat sees the run is no longer its own.
    owned = {r.id for r in await ctx.store.live_runs(owner=ctx.worker.id)}
    ctx.supervisor.lost_ownership(owned)
    async with asyncio.timeout(15):
        await live.task

    assert not llm.requests[-1].completed  # its model stream was closed
    stored = await ctx.store.get_run(run_id)
    assert stored is not None and stored.state is RunState.BLOCKED  # B's ending stands
    after = bot.slack.message(status.channel, status.ts)
    assert len(after.history) == writes_before  # nothing written over B's message
    assert messages.WORKER_LOST in block_text(after)
