"""LeaseStore and RetentionStore contract: claim, heartbeat, expiry, release, purge.

Every time is passed explicitly (``now=``), so nothing waits for a lease to run out.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent_core.values.clock import utcnow
from agent_core.values.records import AuditEvent, Checkpoint, RunRecord, ThreadKey
from agent_core.values.states import LIVE_STATES, RunState
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def a_run(run_id: str, **fields: Any) -> RunRecord:
    run = RunRecord(id=run_id, thread=THREAD, requester="U1", task="t", created_at=T0)
    return dataclasses.replace(run, **fields)


async def ids(runs: Any) -> list[str]:
    return [r.id for r in await runs]


async def test_claim_takes_a_free_lease_and_keeps_others_out(backend: Backend) -> None:
    a, b = await backend.open(), await backend.open()
    await a.create_run(a_run("run-1"))

    assert await a.claim_run("run-1", "worker-a", 30, now=at(0))
    assert not await b.claim_run("run-1", "worker-b", 30, now=at(10))
    assert await a.claim_run("run-1", "worker-a", 30, now=at(10))  # renewing its own

    got = await b.get_run("run-1")
    assert got is not None
    assert (got.owner, got.lease_expires_at, got.state) == ("worker-a", at(40), RunState.QUEUED)


async def test_an_expired_lease_is_found_and_can_be_taken_over(backend: Backend) -> None:
    a, b = await backend.open(), await backend.open()
    await a.create_run(a_run("run-1", state=RunState.RUNNING))
    await a.create_run(a_run("run-2", state=RunState.RUNNING, created_at=at(1)))
    await a.create_run(a_run("never-leased"))
    assert await a.claim_run("run-1", "worker-a", 30, now=at(0))
    assert await a.claim_run("run-2", "worker-a", 60, now=at(0))

    assert await ids(b.expired_runs(now=at(29))) == []
    assert await ids(b.expired_runs(now=at(30))) == ["run-1"]  # expiry is inclusive
    assert await ids(b.expired_runs(now=at(61))) == ["run-1", "run-2"]

    assert await b.claim_run("run-1", "worker-b", 30, now=at(31))
    assert not await a.claim_run("run-1", "worker-a", 30, now=at(32))
    assert await ids(b.expired_runs(now=at(32))) == []


async def test_heartbeat_extends_the_live_leases_it_is_asked_for(backend: Backend) -> None:
    store = await backend.open()
    for run_id in ("run-1", "run-2", "run-3", "theirs"):
        await store.create_run(a_run(run_id, state=RunState.RUNNING))
    for run_id in ("run-1", "run-2", "run-3"):
        assert await store.claim_run(run_id, "worker-a", 30, now=at(0))
    assert await store.claim_run("theirs", "worker-b", 30, now=at(0))
    assert await store.set_state("run-3", RunState.FINISHED, expected=LIVE_STATES)

    held = ["run-1", "run-2", "run-3", "theirs", "missing"]
    assert await store.heartbeat("worker-a", held, 30, now=at(20)) == {"run-1", "run-2"}
    assert await store.heartbeat("worker-c", held, 30, now=at(20)) == set()

    assert await ids(store.expired_runs(now=at(45))) == ["theirs"]
    assert await ids(store.expired_runs(now=at(50))) == ["run-1", "run-2", "theirs"]


async def test_heartbeat_leaves_a_run_its_owner_no_longer_holds_to_expire(
    backend: Backend,
) -> None:
    # A live row naming this worker that the worker does not hold in memory (its terminal
    # write was lost, or it comes from a previous process): nobody runs it, so nobody
    # renews it, and the reconciler finds it once the lease runs out.
    store = await backend.open()
    for run_id in ("held", "ghost"):
        await store.create_run(a_run(run_id, state=RunState.RUNNING))
        assert await store.claim_run(run_id, "worker-a", 30, now=at(0))

    assert await store.heartbeat("worker-a", ["held"], 30, now=at(20)) == {"held"}
    assert await store.heartbeat("worker-a", [], 30, now=at(20)) == set()

    assert await ids(store.expired_runs(now=at(30))) == ["ghost"]
    assert await ids(store.expired_runs(now=at(50))) == ["ghost", "held"]  # ties by id


async def test_heartbeat_reports_a_run_taken_over_as_not_renewed(backend: Backend) -> None:
    a, b = await backend.open(), await backend.open()
    await a.create_run(a_run("run-1", state=RunState.RUNNING))
    assert await a.claim_run("run-1", "worker-a", 30, now=at(0))
    assert await b.claim_run("run-1", "worker-b", 30, now=at(31))  # a's lease had run out

    assert await a.heartbeat("worker-a", ["run-1"], 30, now=at(32)) == set()
    got = await b.get_run("run-1")
    assert got is not None
    assert (got.owner, got.lease_expires_at) == ("worker-b", at(61))  # b's lease untouched


async def test_terminal_and_unknown_runs_cannot_be_claimed(store: Store) -> None:
    await store.create_run(a_run("done", state=RunState.FINISHED))
    await store.create_run(a_run("blocked", state=RunState.BLOCKED, owner="gone"))

    assert not await store.claim_run("done", "worker-a", 30, now=at(0))
    assert not await store.claim_run("blocked", "worker-a", 30, now=at(0))
    assert not await store.claim_run("missing", "worker-a", 30, now=at(0))
    assert await ids(store.expired_runs(now=at(100))) == []


async def test_release_frees_the_lease_for_anyone(store: Store) -> None:
    await store.create_run(a_run("run-1", state=RunState.RUNNING))
    assert await store.claim_run("run-1", "worker-a", 30, now=at(0))

    assert not await store.release_run("run-1", "worker-b")
    assert await store.release_run("run-1", "worker-a")
    assert not await store.release_run("run-1", "worker-a")

    got = await store.get_run("run-1")
    assert got is not None
    assert (got.owner, got.lease_expires_at) == (None, None)
    assert await store.claim_run("run-1", "worker-b", 30, now=at(1))


async def test_live_runs_lists_live_runs_oldest_first(store: Store) -> None:
    await store.create_run(a_run("b-newer", created_at=at(2), owner="worker-a"))
    await store.create_run(a_run("a-older", state=RunState.RUNNING, owner="worker-b"))
    await store.create_run(a_run("stopping", state=RunState.STOPPING, created_at=at(1)))
    await store.create_run(a_run("done", state=RunState.FAILED, owner="worker-a"))

    assert await ids(store.live_runs()) == ["a-older", "stopping", "b-newer"]
    assert await ids(store.live_runs(owner="worker-a")) == ["b-newer"]
    assert await ids(store.live_runs(owner="nobody")) == []


async def test_purge_deletes_only_what_is_old_and_done(backend: Backend) -> None:
    store = await backend.open()
    now = utcnow()
    old, recent = now - timedelta(days=30), now - timedelta(minutes=1)
    for run_id, state in [
        ("finished", RunState.FINISHED),
        ("blocked", RunState.BLOCKED),
        ("running", RunState.RUNNING),
    ]:
        await store.create_run(a_run(run_id, state=state))
        await store.save_checkpoint(Checkpoint(run_id, 1, (), created_at=old))
    await store.create_run(a_run("finished-recently", state=RunState.FINISHED))
    await store.save_checkpoint(Checkpoint("finished-recently", 1, (), created_at=recent))
    handled = await store.add_stop_request("running", THREAD, StopReason.STOP, "U1")
    assert await store.mark_stop_handled(handled.id)
    pending = await store.add_stop_request("running", THREAD, StopReason.ABORT, "U1")
    await store.record_event(AuditEvent("running", "stop.requested", "U1", at=old))
    await store.record_event(AuditEvent("running", "abort.requested", "U1", at=recent))

    assert await store.purge(older_than=now - timedelta(days=1)) == 2  # old event, checkpoint
    # A cut-off in the future takes the handled request (handled "now") and the recent
    # event as well, and the two finished runs (with the recent one's checkpoint): they
    # have not changed since (tests/stores/test_retention.py has the rule in full).
    assert await store.purge(older_than=now + timedelta(hours=1)) == 5

    other = await backend.open()
    assert await other.latest_checkpoint("finished") is None
    assert await other.latest_checkpoint("finished-recently") is None
    assert await other.latest_checkpoint("blocked") is not None  # resumable
    assert await other.latest_checkpoint("running") is not None
    assert await other.pending_stop_requests() == [pending]
    assert await other.events_for("running") == []
    assert await other.get_run("finished") is None
    assert await other.get_run("blocked") is not None  # its resume is not decided yet
    assert await other.purge(older_than=now + timedelta(hours=1)) == 0
