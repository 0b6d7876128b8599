"""DashboardQueries contract: what App Home and ``/threadpilot`` read, on every adapter.

A worker lists a team's runs (one person's, or everyone's for an admin), finds the runs
that changed since it last looked, and reads checkpoint turns and feedback events; it
reads what other workers wrote, so each case writes through one store instance and
reads through another.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.values.records import AuditEvent, Checkpoint, RunRecord, ThreadKey
from agent_core.values.states import RunState

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from agent_core.ports import Store
    from tests.stores.conftest import Backend

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PLUS_TWO = timezone(timedelta(hours=2))
HOME = ThreadKey("T1", "C1", "1700000000.000100")
AWAY = ThreadKey("T2", "C1", "1700000000.000100")  # the same channel id, another team


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def a_run(run_id: str, **fields: Any) -> RunRecord:
    run = RunRecord(
        id=run_id,
        thread=dataclasses.replace(HOME, thread_ts=f"1700000000.{len(run_id):06}"),
        requester="U1",
        task="t",
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(run, **fields)


async def ids(runs: Awaitable[list[RunRecord]]) -> list[str]:
    return [r.id for r in await runs]


# Live: l1 (U1, oldest), l2 (U2), l3 (U1, newest), lc (a child: never listed), lx
# (another team). Ended: e1 (U1, ended last), e2 (U2), e3 (U1, ended first), ex (another
# team). Created out of order, so insertion order cannot pass for age.
RUNS = [
    a_run("l3", created_at=at(30), updated_at=at(31), state=RunState.RUNNING),
    a_run("e3", created_at=at(1), updated_at=at(5), state=RunState.FAILED),
    a_run("l1", created_at=at(10), updated_at=at(40), state=RunState.QUEUED),
    a_run("lc", created_at=at(35), updated_at=at(36), state=RunState.RUNNING, parent_id="l3"),
    a_run(
        "e1",
        created_at=at(2).astimezone(PLUS_TWO),  # another offset: order is by instant
        updated_at=at(50).astimezone(PLUS_TWO),
        state=RunState.FINISHED,
    ),
    a_run("l2", created_at=at(20), updated_at=at(21), state=RunState.STOPPING, requester="U2"),
    a_run("e2", created_at=at(3), updated_at=at(45), state=RunState.BLOCKED, requester="U2"),
    a_run("lx", created_at=at(60), updated_at=at(60), state=RunState.RUNNING, thread=AWAY),
    a_run("ex", created_at=at(61), updated_at=at(61), state=RunState.FINISHED, thread=AWAY),
]


@pytest.fixture
async def seeded(backend: Backend) -> Store:
    writer = await backend.open()
    for run in RUNS:
        await writer.create_run(run)
    return await backend.open()


async def test_a_teams_live_runs_newest_first_and_top_level_only(seeded: Store) -> None:
    assert await ids(seeded.team_live_runs("T1")) == ["l3", "l2", "l1"]
    assert await ids(seeded.team_live_runs("T1", requester="U1")) == ["l3", "l1"]
    assert await ids(seeded.team_live_runs("T1", requester="U2")) == ["l2"]
    assert await ids(seeded.team_live_runs("T1", requester="U9")) == []
    assert await ids(seeded.team_live_runs("T2")) == ["lx"]
    assert await ids(seeded.team_live_runs("T1", limit=2)) == ["l3", "l2"]
    assert await seeded.team_live_runs("T1", limit=0) == []


async def test_live_children_of_the_listed_runs_oldest_first(seeded: Store) -> None:
    writer = seeded
    await writer.create_run(
        a_run("lc0", created_at=at(32), state=RunState.STOPPING, parent_id="l3")
    )
    await writer.create_run(
        a_run("lcd", created_at=at(33), state=RunState.FINISHED, parent_id="l3")
    )
    await writer.create_run(a_run("lg", created_at=at(37), state=RunState.RUNNING, parent_id="lc"))
    assert await ids(seeded.live_children(["l3"])) == ["lc0", "lc"]  # not the ended one
    assert await ids(seeded.live_children(["l3", "lc", "l1"])) == ["lc0", "lc", "lg"]
    assert await seeded.live_children(["l1"]) == []
    assert await seeded.live_children([]) == []


async def test_a_teams_ended_runs_latest_ending_first(seeded: Store) -> None:
    assert await ids(seeded.team_ended_runs("T1")) == ["e1", "e2", "e3"]
    assert await ids(seeded.team_ended_runs("T1", requester="U1")) == ["e1", "e3"]
    assert await ids(seeded.team_ended_runs("T1", requester="U1", limit=1)) == ["e1"]
    assert await ids(seeded.team_ended_runs("T2")) == ["ex"]


async def test_listings_are_whole_records(seeded: Store) -> None:
    (l2,) = await seeded.team_live_runs("T1", requester="U2")
    expected = next(r for r in RUNS if r.id == "l2")
    assert (l2.state, l2.thread, l2.requester, l2.created_at) == (
        expected.state,
        expected.thread,
        "U2",
        expected.created_at,
    )


async def test_ties_break_by_id(store: Store) -> None:
    for run_id in ("b", "a", "c"):
        await store.create_run(a_run(run_id, state=RunState.RUNNING))
        await store.create_run(a_run(f"{run_id}-done", state=RunState.FINISHED))
    assert await ids(store.team_live_runs("T1")) == ["c", "b", "a"]
    assert await ids(store.team_ended_runs("T1")) == ["c-done", "b-done", "a-done"]
    assert await ids(store.runs_changed_since(T0)) == [
        "a",
        "a-done",
        "b",
        "b-done",
        "c",
        "c-done",
    ]


async def test_negative_limits_are_refused(store: Store) -> None:
    for call in (
        store.team_live_runs("T1", limit=-1),
        store.team_ended_runs("T1", limit=-1),
        store.runs_changed_since(T0, limit=-1),
    ):
        with pytest.raises(ValueError, match="limit"):
            await call


async def test_runs_changed_since_includes_the_boundary_children_and_every_team(
    seeded: Store,
) -> None:
    assert await ids(seeded.runs_changed_since(at(40))) == ["l1", "e2", "e1", "lx", "ex"]
    assert await ids(seeded.runs_changed_since(at(36))) == ["lc", "l1", "e2", "e1", "lx", "ex"]
    assert await ids(seeded.runs_changed_since(at(45).astimezone(PLUS_TWO), limit=2)) == [
        "e2",
        "e1",
    ]
    assert await seeded.runs_changed_since(at(62)) == []


async def test_a_change_made_by_another_worker_is_found(backend: Backend) -> None:
    writer, reader = await backend.open(), await backend.open()
    await writer.create_run(a_run("r", state=RunState.RUNNING))
    before = datetime.now(UTC)
    assert await reader.runs_changed_since(before) == []

    assert await writer.set_state("r", RunState.STOPPING, expected=[RunState.RUNNING])
    (changed,) = await reader.runs_changed_since(before)
    assert (changed.id, changed.state) == ("r", RunState.STOPPING)
    assert changed.updated_at >= before

    later = datetime.now(UTC)
    assert await writer.update_run("r", status_ts="1700000001.000001")
    assert await ids(reader.runs_changed_since(later)) == ["r"]


async def test_leases_do_not_count_as_changes(backend: Backend) -> None:
    """Heartbeats renew every live lease every few seconds: were they changes, every
    App Home would be republished as often."""
    writer, reader = await backend.open(), await backend.open()
    await writer.create_run(a_run("r", state=RunState.RUNNING))
    before = datetime.now(UTC)

    assert await writer.claim_run("r", "w1", 30.0)
    assert await writer.heartbeat("w1", ["r"], 30.0) == {"r"}

    assert await reader.runs_changed_since(before) == []


async def test_checkpoint_turns(backend: Backend) -> None:
    writer, reader = await backend.open(), await backend.open()
    messages = ({"role": "user", "content": "x" * 1000},)
    await writer.save_checkpoint(Checkpoint("r1", 2, messages))
    await writer.save_checkpoint(Checkpoint("r1", 3, messages))
    await writer.save_checkpoint(Checkpoint("r2", 1, messages))

    assert await reader.checkpoint_turns(["r1", "r2", "r3"]) == {"r1": 3, "r2": 1}
    assert await reader.checkpoint_turns(["r2", "r2"]) == {"r2": 1}
    assert await reader.checkpoint_turns([]) == {}


async def test_events_of_kind(backend: Backend) -> None:
    writer, reader = await backend.open(), await backend.open()
    events = [
        AuditEvent("r1", "feedback", "U1", at(1), {"value": "positive"}),
        AuditEvent("r1", "stop.requested", "U1", at(2), {"source": "home"}),
        AuditEvent("r2", "feedback", "U2", at(3), {"value": "negative"}),
        AuditEvent("r1", "feedback", "U3", at(4), {"value": "negative"}),
        AuditEvent("r3", "feedback", "U1", at(5), {"value": "positive"}),
    ]
    for event in events:
        await writer.record_event(event)

    found = await reader.events_of_kind(["r1", "r2"], ["feedback"])
    assert [(e.run_id, e.actor, dict(e.detail)) for e in found] == [
        ("r1", "U1", {"value": "positive"}),
        ("r2", "U2", {"value": "negative"}),
        ("r1", "U3", {"value": "negative"}),
    ]
    assert found[0].at == at(1)
    both = await reader.events_of_kind(["r1"], ["feedback", "stop.requested"])
    assert [e.kind for e in both] == ["feedback", "stop.requested", "feedback"]
    assert await reader.events_of_kind([], ["feedback"]) == []
    assert await reader.events_of_kind(["r1"], []) == []
    assert await reader.events_of_kind(["r9"], ["feedback"]) == []
