"""``kill -9`` of the worker that owns a run: another worker (or the same one, restarted)
ends it within the lease TTL + 10 s, says so in the thread, and resumes it from its
checkpoint when ``AUTO_RESUME_ON_RESTART`` allows (docs/operations.md, Restarts and crashes).

The run is killed mid-way on purpose: its first turn (a tool call) is complete and
checkpointed; its second turn's model stream is stalled when the owner dies.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core import RunState, StopReason
from agent_core.values.prompts import RESUMED_NOTE
from bot import messages
from tests.bot.harness import block_text, is_final, run_id_of, stalled_answer
from tests.system.blocks import final_revisions
from tests.system.workers import LEASE_TTL_S, until, until_async

if TYPE_CHECKING:
    from llmock.journal import Journal, RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import RunRecord
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = pytest.mark.slow

RECONCILE_BOUND_S = LEASE_TTL_S + 10.0
"""The target: orphaned runs are reconciled within the lease TTL + 10 s."""
STALL_S = 30.0
"""The owner is killed during this stall; it never ends on its own within a test."""
RESUMED_ANSWER = "It is 12:00 UTC (answered after the restart)."


def script_a_run_to_kill(llm: LLMock, *, resumed_answer: bool) -> None:
    # Each request takes the first queued behaviour of each kind (reply, stream fault),
    # so turn 1 takes a zero-second stall and leaves the real one to turn 2.
    no_stall = StreamFault("stall", after_chunks=0, stall_seconds=0)
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)), no_stall)  # turn 1
    llm.add(*stalled_answer(STALL_S, with_tool=False))  # turn 2: the owner dies here
    if resumed_answer:
        llm.reply(RESUMED_ANSWER)


async def start_run_and_kill_owner(
    cluster: Cluster, owner: WorkerProcess, store: Store, journal: Journal
) -> tuple[str, Message, float]:
    """Start a run on ``owner``, kill -9 it in turn 2; the run, its status message, and
    when (``time.monotonic()``) the owner was killed."""
    _, status = await cluster.mention(owner, "what time is it?")
    run_id = run_id_of(status)
    await until(
        lambda: len(journal.records()) == 1 and journal.in_flight == 1,
        what="turn 1 done and turn 2 streaming",
    )
    checkpoint = await until_async(
        lambda: store.latest_checkpoint(run_id), what="turn 1's checkpoint"
    )
    assert checkpoint.turn == 1
    killed_at = time.monotonic()
    assert await owner.kill() == -9
    return run_id, status, killed_at


async def reconciled_within_bound(cluster: Cluster, status: Message, killed_at: float) -> float:
    """Seconds from the kill until the thread said the worker stopped; checks the bound."""
    said_at = await cluster.revision_saying(
        status, messages.WORKER_LOST, timeout=RECONCILE_BOUND_S + 5
    )
    took = said_at - killed_at
    assert took <= RECONCILE_BOUND_S, f"reconciled {took:.1f}s after the kill"
    return took


def finished(message: Message) -> bool:
    return is_final(message) and "Finished" in block_text(message)


def resumed_request(records: list[RequestRecord]) -> RequestRecord:
    """The request made after the resume: its conversation is turn 1's checkpoint."""
    first, killed, resumed = records
    assert first.completed and not killed.completed
    return resumed


def check_resumed_from_checkpoint(resumed: RequestRecord) -> None:
    conversation = resumed.body["messages"]
    tool_results = [m for m in conversation if m["role"] == "tool"]
    assert len(tool_results) == 1  # turn 1's current_time result, from the checkpoint
    assert "not run" not in tool_results[0]["content"]
    assert conversation[-1] == {"role": "system", "content": RESUMED_NOTE}
    # The killed turn 2 was never checkpointed: its streamed text is not in there.
    assert not any("word0" in str(m.get("content")) for m in conversation)


async def check_reconciled_and_resumed(
    cluster: Cluster,
    store: Store,
    journal: Journal,
    run_id: str,
    status: Message,
    killed_at: float,
) -> RunRecord:
    """The killed owner's run was taken over in time, resumed from its checkpoint and
    finished; returns its stored record."""
    took = await reconciled_within_bound(cluster, status, killed_at)
    final = await cluster.until_message(status, finished)

    print(f"reconciled {took:.2f}s after kill -9 (bound {RECONCILE_BOUND_S}s)")
    assert RESUMED_ANSWER in block_text(final)
    records = await until(
        lambda: r if len(r := journal.records()) == 3 else None, what="3 model requests"
    )
    check_resumed_from_checkpoint(resumed_request(records))
    record = await store.get_run(run_id)
    assert record is not None
    return record


async def test_another_worker_reconciles_and_resumes_a_killed_owners_run(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b", AUTO_RESUME_ON_RESTART="true")
    script_a_run_to_kill(llm, resumed_answer=True)
    run_id, status, killed_at = await start_run_and_kill_owner(cluster, a, store, journal)

    record = await check_reconciled_and_resumed(cluster, store, journal, run_id, status, killed_at)
    assert (record.state, record.owner) == (RunState.FINISHED, "b")
    kinds = [(e.kind, e.actor) for e in await store.events_for(run_id)]
    assert ("run.takeover", "b") in kinds and ("run.resumed", "b") in kinds
    assert b.logged("run.resumed", run_id=run_id)


async def test_without_auto_resume_a_killed_owners_run_stays_blocked(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b", AUTO_RESUME_ON_RESTART="false")
    script_a_run_to_kill(llm, resumed_answer=False)
    run_id, status, killed_at = await start_run_and_kill_owner(cluster, a, store, journal)

    took = await reconciled_within_bound(cluster, status, killed_at)
    # b's reconcile pass that ended the run is complete, and it resumed nothing...
    done = await b.wait_log("reconcile.done", orphans_ended=1)
    assert done["resumed"] == 0
    # ...nor does a, restarted: its start-up reconcile has run once it is ready.
    await a.restart()

    print(f"reconciled {took:.2f}s after kill -9 (bound {RECONCILE_BOUND_S}s)")
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.state, record.stop_reason, record.owner) == (
        RunState.BLOCKED,
        StopReason.SHUTDOWN,
        None,
    )
    assert "run.resumed" not in [e.kind for e in await store.events_for(run_id)]
    # No model request after the killed one (whose stream llmock saw closed).
    await until(lambda: journal.in_flight == 0, what="the killed stream to be closed")
    assert len(journal.records()) == 2
    current = cluster.current(status)
    assert messages.WORKER_LOST in block_text(current)
    assert len(final_revisions(current)) == 1


async def test_a_worker_restarted_under_the_same_id_ends_its_previous_runs(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    # A stable WORKER_ID (a pod name, say) restarted within the lease TTL: the new process
    # must not keep the dead one's leases alive with its heartbeat.
    (a,) = await cluster.start("a", AUTO_RESUME_ON_RESTART="true")
    script_a_run_to_kill(llm, resumed_answer=True)
    run_id, status, killed_at = await start_run_and_kill_owner(cluster, a, store, journal)
    await a.restart()

    record = await check_reconciled_and_resumed(cluster, store, journal, run_id, status, killed_at)
    assert (record.state, record.owner) == (RunState.FINISHED, "a")
