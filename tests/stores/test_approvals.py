"""ApprovalStore contract: an approval is added once, decided once (the first decision
wins, whichever worker makes it), seen by every worker, and a decision wakes the run's
owner on PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.stores.postgres import PostgresStore
from agent_core.values.clock import utcnow
from agent_core.values.records import ApprovalRecord, ApprovalStatus, ThreadKey, Wakeup
from agent_core.values.states import RunState
from tests.stores.test_dashboard_queries import a_run

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")


def held(aid: str, run_id: str = "run-1", **changes: Any) -> ApprovalRecord:
    record = ApprovalRecord(
        id=aid,
        run_id=run_id,
        thread=THREAD,
        requester="U1",
        tool="git__git_commit",
        arguments='{"message": "<!channel> hi"}',
        call_id=f"call-{aid}",
    )
    return dataclasses.replace(record, **changes)


async def test_an_approval_is_seen_by_another_worker_and_decided_once(backend: Backend) -> None:
    owner = await backend.open()
    clicker = await backend.open()
    added = held("a1")
    assert await owner.add_approval(added)
    assert not await clicker.add_approval(held("a1", tool="other"))  # the same id again
    assert await owner.set_approval_message("a1", "1700000002.000001")

    [pending] = await clicker.pending_approvals(["run-1"])
    assert pending == dataclasses.replace(added, message_ts="1700000002.000001")
    assert pending.requested_at.tzinfo is not None

    assert await clicker.decide_approval("a1", ApprovalStatus.DENIED, decided_by="U2")
    assert not await owner.decide_approval("a1", ApprovalStatus.APPROVED, decided_by="U1")
    assert not await owner.decide_approval("a1", ApprovalStatus.EXPIRED)

    decided = await owner.get_approval("a1")
    assert decided is not None
    assert (decided.status, decided.decided_by) == (ApprovalStatus.DENIED, "U2")
    assert decided.decided_at is not None
    assert await owner.pending_approvals() == []
    assert await owner.approvals_for("run-1") == [decided]

    assert decided.taken_at is None
    assert await owner.take_approval("a1")
    assert not await owner.take_approval("a1")  # once
    taken = await clicker.get_approval("a1")
    assert taken is not None and taken.taken_at is not None


async def test_a_requested_approval_cannot_be_taken(store: Store) -> None:
    assert await store.add_approval(held("a1"))
    assert not await store.take_approval("a1")
    assert not await store.take_approval("nope")


async def test_workers_racing_to_decide_get_exactly_one_true(backend: Backend) -> None:
    workers = [await backend.open() for _ in range(4)]
    for i in range(5):
        assert await workers[0].add_approval(held(f"a{i}"))
        answers = await asyncio.gather(
            *(
                w.decide_approval(f"a{i}", ApprovalStatus.APPROVED, decided_by=f"U{n}")
                for n, w in enumerate(workers)
            )
        )
        assert answers.count(True) == 1, answers


async def test_unknown_approvals_are_not_found(store: Store) -> None:
    assert await store.get_approval("nope") is None
    assert not await store.decide_approval("nope", ApprovalStatus.APPROVED, decided_by="U1")
    assert not await store.set_approval_message("nope", "1.2")


async def test_requested_approvals_come_oldest_first_and_filter_by_run(store: Store) -> None:
    now = utcnow()
    for record in (
        held("a2", requested_at=now),
        held("a1", requested_at=now - timedelta(seconds=1)),
        held("a3", "run-2", requested_at=now + timedelta(seconds=1)),
    ):
        assert await store.add_approval(record)
    assert [a.id for a in await store.pending_approvals()] == ["a1", "a2", "a3"]
    assert [a.id for a in await store.pending_approvals(["run-1"])] == ["a1", "a2"]
    assert await store.pending_approvals([]) == []


async def test_only_requested_approvals_are_added_and_only_decisions_written(
    store: Store,
) -> None:
    with pytest.raises(ValueError, match="added requested"):
        await store.add_approval(held("a1", status=ApprovalStatus.APPROVED))
    assert await store.add_approval(held("a1"))
    with pytest.raises(ValueError, match="decided approved"):
        await store.decide_approval("a1", ApprovalStatus.REQUESTED)


@pytest.mark.postgres
async def test_a_decision_wakes_the_owner_on_postgres(pg_url: str) -> None:
    owner = await PostgresStore.open(pg_url, migrate=False)
    clicker = await PostgresStore.open(pg_url, migrate=False)
    woken: asyncio.Queue[Wakeup] = asyncio.Queue()
    try:
        assert await owner.add_approval(held("a-wake", "run-9"))
        async with owner.listen_stops(woken.put):
            assert await clicker.decide_approval("a-wake", ApprovalStatus.APPROVED, decided_by="U1")
            async with asyncio.timeout(10):
                assert await woken.get() == Wakeup("run-9")
    finally:
        await clicker.close()
        await owner.close()


async def test_adding_and_deciding_an_approval_moves_its_runs_updated_at(store: Store) -> None:
    """App Home lists a run's pending approvals and refreshes on ``updated_at``."""
    await store.create_run(a_run("run-1", thread=THREAD, updated_at=utcnow() - timedelta(hours=1)))
    since = utcnow() - timedelta(seconds=1)
    assert await store.runs_changed_since(since) == []

    assert await store.add_approval(held("a1"))
    [changed] = await store.runs_changed_since(since)
    assert changed.id == "run-1"

    later = utcnow()
    assert await store.decide_approval("a1", ApprovalStatus.APPROVED, decided_by="U1")
    assert [r.id for r in await store.runs_changed_since(later)] == ["run-1"]


async def test_forgetting_a_person_deletes_the_approvals_they_decided(store: Store) -> None:
    """Who approved or denied a call in someone else's run is theirs to have forgotten;
    an approval still waiting is the run's and stays."""
    assert await store.add_approval(held("a1"))
    assert await store.add_approval(held("a2"))
    assert await store.add_approval(held("a3"))
    assert await store.decide_approval("a1", ApprovalStatus.APPROVED, decided_by="U9")
    assert await store.decide_approval("a2", ApprovalStatus.DENIED, decided_by="U2")

    await store.forget_requester("U9")

    assert [a.id for a in await store.approvals_for("run-1")] == ["a2", "a3"]


async def test_ended_runs_with_open_approvals_come_from_one_query_each_once(store: Store) -> None:
    for run in (
        a_run("live"),
        a_run("ended", state=RunState.FINISHED),
        a_run("ended-decided", state=RunState.BLOCKED),
        a_run("stopped", state=RunState.USERINTERLUDE),
    ):
        await store.create_run(run)
    for record in (
        held("a1", "live"),
        held("a2", "ended"),
        held("a3", "ended"),
        held("a4", "ended-decided"),
        held("a5", "stopped"),
        held("a6", "no-such-run"),
    ):
        assert await store.add_approval(record)
    assert await store.decide_approval("a4", ApprovalStatus.APPROVED, decided_by="U1")

    ended = await store.ended_runs_with_open_approvals()
    assert sorted(r.id for r in ended) == ["ended", "stopped"]
    assert len(await store.ended_runs_with_open_approvals(limit=1)) == 1
    with pytest.raises(ValueError, match="negative"):
        await store.ended_runs_with_open_approvals(limit=-1)


async def test_a_runs_held_calls_include_its_sub_agents_at_any_depth(store: Store) -> None:
    for run in (
        a_run("top"),
        a_run("child", parent_id="top"),
        a_run("grandchild", parent_id="child"),
        a_run("other"),
    ):
        await store.create_run(run)
    now = utcnow()
    for i, run_id in enumerate(("grandchild", "top", "child", "other")):
        assert await store.add_approval(
            held(f"a{i}", run_id, requested_at=now + timedelta(seconds=i))
        )
    assert await store.decide_approval("a2", ApprovalStatus.DENIED, decided_by="U1")

    under = await store.pending_approvals_under(["top"])
    assert [a.id for a in under] == ["a0", "a1"]  # the child's is decided
    assert [a.id for a in await store.pending_approvals_under(["child"])] == ["a0"]
    assert await store.pending_approvals_under([]) == []
