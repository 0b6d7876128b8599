"""RunStore contract: runs, compare-and-set, checkpoints, audit events, on every adapter."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.values.budget import Spent
from agent_core.values.errors import IllegalTransition
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.records import AuditEvent, Checkpoint, RunRecord, ThreadKey
from agent_core.values.states import LIVE_STATES, TERMINAL_STATES, RunState
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def a_run(run_id: str = "run-1", **fields: Any) -> RunRecord:
    run = RunRecord(id=run_id, thread=THREAD, requester="U1", task="summarise the thread")
    return dataclasses.replace(run, **fields)


async def test_a_run_keeps_the_trace_context_it_started_with(store: Store) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await store.create_run(a_run())
    assert await store.set_state(
        "run-1", RunState.RUNNING, expected=[RunState.QUEUED], trace_context=traceparent
    )

    got = await store.get_run("run-1")

    assert got is not None and got.trace_context == traceparent


async def test_create_and_get_round_trips_every_field(store: Store) -> None:
    run = RunRecord(
        id="run-full",
        thread=ThreadKey("T9", "D42", "1700000001.000200"),
        requester="U7",
        task='ünïcode task with\nnewlines and "quotes" and a NUL-free emoji 🛑',
        state=RunState.STOPPING,
        parent_id="run-parent",
        owner="worker-a",
        # Another offset on purpose: every store keeps the instant (SQL ones answer in UTC).
        lease_expires_at=datetime(2026, 3, 1, 14, 0, 30, 5, tzinfo=timezone(timedelta(hours=2))),
        status_ts="1700000001.000300",
        outcome=Outcome.USERINTERLUDE,
        stop_reason=StopReason.ABORT,
        exit_code=ExitCode.USER_ABORT,
        stopped_by="U8",
        result={"outcome": "userinterlude", "turns": 3, "nested": {"list": [1, 2.5, None]}},
        created_at=T0,
        updated_at=T0 + timedelta(seconds=1),
        final_posted_at=datetime(2026, 3, 1, 7, 0, 2, 7, tzinfo=timezone(timedelta(hours=-5))),
        enterprise_id="E0ORG",
    )
    await store.create_run(run)

    got = await store.get_run("run-full")

    assert got == run
    assert got is not None
    assert got.lease_expires_at is not None
    assert got.lease_expires_at.tzinfo is not None
    assert await store.get_run("no-such-run") is None


async def test_create_rejects_a_duplicate_id(store: Store) -> None:
    await store.create_run(a_run())
    with pytest.raises(ValueError, match="already exists"):
        await store.create_run(a_run())


async def test_set_state_moves_only_from_expected_states(store: Store) -> None:
    await store.create_run(a_run(created_at=T0, updated_at=T0))

    assert not await store.set_state("run-1", RunState.STOPPING, expected={RunState.RUNNING})
    assert await store.set_state("run-1", RunState.RUNNING, expected={RunState.QUEUED})
    assert await store.set_state(
        "run-1",
        RunState.USERINTERLUDE,
        expected=LIVE_STATES,
        outcome=Outcome.USERINTERLUDE,
        stop_reason=StopReason.STOP,
        exit_code=ExitCode.USER_STOP,
        stopped_by="U2",
        result={"summary": "stopped"},
    )
    assert not await store.set_state("run-1", RunState.FAILED, expected=LIVE_STATES)
    assert not await store.set_state("missing", RunState.RUNNING, expected={RunState.QUEUED})

    got = await store.get_run("run-1")
    assert got is not None
    assert got.state is RunState.USERINTERLUDE
    assert (got.outcome, got.stop_reason, got.exit_code, got.stopped_by) == (
        Outcome.USERINTERLUDE,
        StopReason.STOP,
        ExitCode.USER_STOP,
        "U2",
    )
    assert got.result == {"summary": "stopped"}
    assert got.updated_at > T0
    assert got.created_at == T0


async def test_set_state_can_change_the_thread_and_refuses_unknown_fields(store: Store) -> None:
    await store.create_run(a_run())
    moved = ThreadKey("T1", "C2", "1.2")
    assert await store.set_state(
        "run-1", RunState.RUNNING, expected={RunState.QUEUED}, thread=moved, status_ts="1.3"
    )
    got = await store.get_run("run-1")
    assert got is not None
    assert (got.thread, got.status_ts) == (moved, "1.3")

    with pytest.raises(TypeError):
        await store.set_state("run-1", RunState.RUNNING, expected=LIVE_STATES, colour="red")
    with pytest.raises(TypeError):  # the row's name, not a field to change
        await store.set_state("run-1", RunState.RUNNING, expected=LIVE_STATES, id="run-2")
    assert await store.get_run("run-2") is None


async def test_blocked_run_can_be_queued_again(store: Store) -> None:
    await store.create_run(a_run(state=RunState.BLOCKED))
    assert await store.set_state("run-1", RunState.QUEUED, expected={RunState.BLOCKED})
    got = await store.get_run("run-1")
    assert got is not None
    assert got.state is RunState.QUEUED


async def test_terminal_state_is_set_exactly_once_under_a_race(backend: Backend) -> None:
    first = await backend.open()
    await first.create_run(a_run(state=RunState.RUNNING))
    # Twenty writers, each its own store instance (its own connection; for SQLite its
    # own file handle, as another process would have), all released at once.
    stores = [await backend.open() for _ in range(20)]
    terminal = sorted(TERMINAL_STATES)
    go = asyncio.Event()

    async def finish(i: int, store: Store) -> bool:
        await go.wait()
        return await store.set_state(
            "run-1", terminal[i % len(terminal)], expected=LIVE_STATES, stopped_by=f"writer-{i}"
        )

    tasks = [asyncio.create_task(finish(i, s)) for i, s in enumerate(stores)]
    go.set()
    won = await asyncio.gather(*tasks)

    assert won.count(True) == 1
    winner = won.index(True)
    got = await first.get_run("run-1")
    assert got is not None
    assert got.state is terminal[winner % len(terminal)]
    assert got.stopped_by == f"writer-{winner}"


async def test_latest_checkpoint_wins(backend: Backend) -> None:
    store = await backend.open()
    assert await store.latest_checkpoint("run-1") is None
    for turn in range(1, 4):
        messages = tuple({"role": "user", "content": f"turn {i}"} for i in range(turn))
        await store.save_checkpoint(
            Checkpoint("run-1", turn, messages, created_at=T0 + timedelta(seconds=turn))
        )
    await store.save_checkpoint(Checkpoint("run-2", 1, ({"role": "system", "content": "x"},)))

    other = await backend.open()
    got = await other.latest_checkpoint("run-1")

    assert got == Checkpoint(
        "run-1",
        3,
        tuple({"role": "user", "content": f"turn {i}"} for i in range(3)),
        created_at=T0 + timedelta(seconds=3),
    )


async def test_a_checkpoint_within_a_step_round_trips_its_started_calls_and_spend(
    backend: Backend,
) -> None:
    store = await backend.open()
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            for i in range(3)
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_0", "content": "done"}
    spent = Spent(prompt_tokens=1200, completion_tokens=34, tool_calls=3, elapsed_s=2.5)
    written = Checkpoint(
        "run-1", 2, (reply, result), created_at=T0, started=("call_0", "call_1"), spent=spent
    )
    await store.save_checkpoint(Checkpoint("run-1", 1, (), created_at=T0))
    await store.save_checkpoint(written)  # rewritten as the step goes on

    got = await (await backend.open()).latest_checkpoint("run-1")

    assert got == written
    await store.save_checkpoint(Checkpoint("run-1", 2, (reply,), created_at=T0))
    cleared = await store.latest_checkpoint("run-1")
    assert cleared is not None and (cleared.started, cleared.spent) == ((), None)


async def test_checkpoint_keeps_tool_calls_exactly(store: Store) -> None:
    messages = (
        {"role": "system", "content": "You are threadpilot."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "a\\u0000b"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "control \x00\x07 chars"},
    )
    await store.save_checkpoint(Checkpoint("run-1", 2, messages, created_at=T0))
    got = await store.latest_checkpoint("run-1")
    assert got is not None
    assert got.messages == messages


async def test_audit_events_round_trip_in_order(backend: Backend) -> None:
    store = await backend.open()
    events = [
        AuditEvent("run-1", "stop.requested", "U1", at=T0, detail={"source": "button"}),
        AuditEvent("run-1", "abort.requested", "U2", at=T0 + timedelta(seconds=1)),
        AuditEvent("run-2", "run.takeover", "worker-b", at=T0, detail={"from": "worker-a"}),
        AuditEvent("run-1", "stop.escalated", "U2", at=T0, detail={"n": [1, {"k": True}]}),
    ]
    for event in events:
        await store.record_event(event)

    other = await backend.open()
    assert await other.events_for("run-1") == [events[0], events[1], events[3]]
    assert await other.events_for("run-2") == [events[2]]
    assert await other.events_for("run-3") == []


# -- the table of legal moves (agent_core.values.states) ---------------------------------------


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (RunState.STOPPING, RunState.RUNNING),
        (RunState.QUEUED, RunState.STOPPING),
        (RunState.FINISHED, RunState.QUEUED),
        (RunState.FAILED, RunState.RUNNING),
    ],
)
async def test_a_move_the_table_forbids_is_refused_before_the_store_is_touched(
    store: Store, current: RunState, new: RunState
) -> None:
    await store.create_run(a_run(state=current))

    with pytest.raises(IllegalTransition, match=f"from {current.value} to {new.value}"):
        await store.set_state("run-1", new, expected=[current])
    # One forbidden move among the expected states is enough to refuse the write.
    with pytest.raises(IllegalTransition):
        await store.set_state("run-1", new, expected=[RunState.QUEUED, current])

    got = await store.get_run("run-1")
    assert got is not None
    assert got.state is current


async def test_the_moves_the_writers_make_are_legal(store: Store) -> None:
    # A queued run is handed back to the queue (staying queued), a claimed one starts
    # (staying running): staying is no move, its compare-and-set guards other fields.
    await store.create_run(a_run(owner="w-a"))
    assert await store.set_state("run-1", RunState.QUEUED, expected=[RunState.QUEUED], owner=None)
    assert await store.set_state("run-1", RunState.RUNNING, expected=[RunState.QUEUED])
    assert await store.set_state(
        "run-1", RunState.RUNNING, expected=[RunState.QUEUED, RunState.RUNNING]
    )
    assert await store.set_state("run-1", RunState.FAILED, expected=LIVE_STATES)
    got = await store.get_run("run-1")
    assert got is not None
    assert (got.state, got.owner) == (RunState.FAILED, None)
