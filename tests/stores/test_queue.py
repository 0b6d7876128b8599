"""QueueStore contract: waiting runs, taken oldest first, never twice, durable."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.values.ended import EndedBecause
from agent_core.values.records import Admission, ResumeState, RunRecord, ThreadKey
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from tests.stores.conftest import Backend

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def waiting(n: int, **fields: Any) -> RunRecord:
    thread = ThreadKey("T1", "C1", f"1700000000.{n:06d}")
    run = RunRecord(
        id=f"run-{n:03d}",
        thread=thread,
        requester="U1",
        task=f"task {n}",
        created_at=T0 + timedelta(seconds=n),
    )
    return dataclasses.replace(run, **fields)


async def test_claims_take_the_oldest_first_and_make_it_running(backend: Backend) -> None:
    a, b = await backend.open(), await backend.open()
    for n in (3, 1, 2):
        await a.enqueue_run(waiting(n, status_ts=f"ts-{n}"))
    assert await b.count_queued() == 3
    assert [r.id for r in await b.queued_runs()] == ["run-001", "run-002", "run-003"]

    now = datetime.now(UTC)
    taken = await b.claim_queued("worker-b", 30, now=now)
    assert taken is not None and taken.id == "run-001"
    assert (taken.state, taken.owner, taken.status_ts) == (RunState.RUNNING, "worker-b", "ts-1")
    assert taken.lease_expires_at == now + timedelta(seconds=30)
    stored = await a.get_run("run-001")
    assert stored is not None and stored.state is RunState.RUNNING and stored.owner == "worker-b"
    assert [r.id for r in await a.queued_runs()] == ["run-002", "run-003"]
    assert await a.count_queued() == 2


async def test_an_empty_queue_gives_nothing(backend: Backend) -> None:
    store = await backend.open()
    assert await store.claim_queued("w", 30) is None
    assert await store.count_queued() == 0


async def test_only_waiting_runs_are_queued(backend: Backend) -> None:
    store = await backend.open()
    with pytest.raises(ValueError):
        await store.enqueue_run(waiting(1, owner="w"))
    with pytest.raises(ValueError):
        await store.enqueue_run(waiting(2, state=RunState.RUNNING))
    with pytest.raises(ValueError):
        await store.enqueue_run(waiting(3, parent_id="run-000"))
    # A resume in place is queued with its owner, a sub-agent with its parent: not waiting.
    await store.create_run(waiting(4, owner="w", lease_expires_at=T0))
    await store.create_run(waiting(5, parent_id="run-004"))
    assert await store.count_queued() == 0
    assert await store.claim_queued("other", 30) is None


async def test_concurrent_claims_never_take_a_run_twice(backend: Backend) -> None:
    stores = [await backend.open() for _ in range(3)]
    for n in range(30):
        await stores[0].enqueue_run(waiting(n))

    async def drain(i: int) -> list[str]:
        got = []
        while (run := await stores[i % 3].claim_queued(f"w{i}", 30)) is not None:
            got.append(run.id)
        return got

    results = await asyncio.gather(*(drain(i) for i in range(6)))
    taken = [run_id for got in results for run_id in got]
    assert sorted(taken) == sorted(f"run-{n:03d}" for n in range(30))
    assert len(set(taken)) == len(taken)


async def test_a_stopped_waiting_run_is_passed_over(backend: Backend) -> None:
    store = await backend.open()
    first, second = waiting(1), waiting(2)
    await store.enqueue_run(first)
    await store.enqueue_run(second)
    await store.add_stop_request(first.id, first.thread, StopReason.STOP, "U1")

    assert [r.id for r in await store.stopped_in_queue()] == [first.id]
    taken = await store.claim_queued("w", 30)
    assert taken is not None and taken.id == second.id
    assert await store.claim_queued("w", 30) is None


async def test_unclaim_puts_a_claimed_run_back(backend: Backend) -> None:
    store = await backend.open()
    await store.enqueue_run(waiting(1))
    taken = await store.claim_queued("w", 30)
    assert taken is not None
    assert not await store.unclaim_run(taken.id, "someone-else")
    assert await store.unclaim_run(taken.id, "w")
    again = await store.claim_queued("w2", 30)
    assert again is not None and again.id == taken.id and again.owner == "w2"


async def test_an_accepted_run_requeued_by_its_holder_waits_for_any_worker(
    backend: Backend,
) -> None:
    store = await backend.open()
    lease = datetime.now(UTC) + timedelta(seconds=30)
    await store.create_run(waiting(1, owner="w", lease_expires_at=lease))
    assert await store.claim_queued("w2", 30) is None  # held: not waiting
    assert not await store.requeue_run("run-001", "someone-else")

    assert await store.requeue_run("run-001", "w", status_ts="ts-1")
    (queued,) = await store.queued_runs()
    assert (queued.id, queued.owner, queued.lease_expires_at) == ("run-001", None, None)
    assert queued.status_ts == "ts-1"
    assert not await store.requeue_run("run-001", "w")  # nobody's now
    taken = await store.claim_queued("w2", 30)
    assert taken is not None and taken.id == "run-001" and taken.status_ts == "ts-1"


async def test_a_started_run_is_never_requeued(backend: Backend) -> None:
    store = await backend.open()
    lease = datetime.now(UTC) + timedelta(seconds=30)
    await store.create_run(waiting(1, owner="w", lease_expires_at=lease, status_ts="ts-1"))
    assert await store.set_state("run-001", RunState.RUNNING, expected=[RunState.QUEUED])
    assert not await store.requeue_run("run-001", "w")
    stored = await store.get_run("run-001")
    assert stored is not None and (stored.state, stored.owner) == (RunState.RUNNING, "w")


async def test_waiting_runs_survive_reopening(backend: Backend) -> None:
    if backend.name == "memory":
        pytest.skip("the memory store is the process")
    store = await backend.open()
    await store.enqueue_run(waiting(1, status_ts="ts-1"))
    await store.close()
    backend.stores.remove(store)
    reopened = await backend.open()
    assert [r.id for r in await reopened.queued_runs()] == ["run-001"]


# -- fair order (docs/operations.md, Queue and MAX_LIVE_RUNS) ----------------------


async def test_room_goes_to_the_oldest_run_of_the_person_with_fewest_runs_holding_it(
    backend: Backend,
) -> None:
    """U1 already has a run going; U2 has none. U1's queued run is the oldest, but the
    room goes to U2's; once both have one going, the oldest again."""
    a, b = await backend.open(), await backend.open()
    lease = datetime.now(UTC) + timedelta(seconds=30)
    await a.create_run(waiting(0, owner="w", lease_expires_at=lease, state=RunState.RUNNING))
    await a.enqueue_run(waiting(1))  # U1, the oldest waiting
    await a.enqueue_run(waiting(2, requester="U2"))
    await a.enqueue_run(waiting(3, requester="U2"))
    await a.enqueue_run(waiting(4))
    # Another workspace's U1 is another person, with nothing going.
    other = dataclasses.replace(waiting(5), thread=ThreadKey("T2", "C1", "1700000000.5"))
    await a.enqueue_run(other)
    queue = ["run-002", "run-003", "run-005", "run-001", "run-004"]
    assert [r.id for r in await b.queued_runs()] == queue

    order = []
    while (taken := await b.claim_queued("w", 30)) is not None:
        order.append(taken.id)
    # run-002 (U2: 0 going), then run-005 (T2's U1: 0), then U1 and U2 have one each:
    # run-001 is older than run-003; then U1 has 2, U2 1: run-003; then run-004.
    assert order == ["run-002", "run-005", "run-001", "run-003", "run-004"]


async def test_a_waiting_run_holds_no_room_for_its_person(backend: Backend) -> None:
    store = await backend.open()
    for n in (1, 2):
        await store.enqueue_run(waiting(n))  # U1 waits twice: neither holds room
    await store.enqueue_run(waiting(3, requester="U2"))
    taken = await store.claim_queued("w", 30)
    assert taken is not None and taken.id == "run-001"
    taken = await store.claim_queued("w", 30)
    assert taken is not None and taken.id == "run-003"  # U1 now has one going


# -- admission (MAX_RUNS_PER_USER) ----------------------------------------------------


OK = Admission.ACCEPTED
FULL = Admission.PERSON_FULL


def accepted(n: int, **fields: Any) -> RunRecord:
    """A person's new run as a worker accepts it: held by it, with a lease."""
    lease = datetime.now(UTC) + timedelta(seconds=30)
    return waiting(n, owner="w", lease_expires_at=lease, **fields)


async def test_admission_counts_the_persons_live_and_waiting_runs(backend: Backend) -> None:
    store = await backend.open()
    assert await store.admit_run(accepted(1), limit=3) is OK
    assert await store.admit_run(waiting(2), limit=3) is OK  # waiting counts too
    await store.create_run(waiting(3, owner="w", lease_expires_at=T0, parent_id="run-001"))
    assert await store.admit_run(accepted(4), limit=3) is OK  # a sub-agent does not count
    assert await store.admit_run(accepted(5), limit=3) is FULL
    assert await store.get_run("run-005") is None
    # Someone else, or the same user id in another workspace, is another person.
    assert await store.admit_run(accepted(6, requester="U2"), limit=3) is OK
    other = dataclasses.replace(accepted(7), thread=ThreadKey("T2", "C1", "1700000000.7"))
    assert await store.admit_run(other, limit=3) is OK
    # An ended run gives its place back; no limit admits anything.
    assert await store.set_state("run-001", RunState.FINISHED, expected=[RunState.QUEUED])
    assert await store.admit_run(accepted(8), limit=3) is OK
    assert await store.admit_run(accepted(9), limit=3) is FULL
    assert await store.admit_run(accepted(9), limit=None) is OK
    stored = await store.get_run("run-008")
    assert stored is not None and stored.owner == "w" and stored.state is RunState.QUEUED
    assert await store.count_queued() == 1  # run-002


async def test_admission_refuses_what_is_not_a_persons_new_run(backend: Backend) -> None:
    store = await backend.open()
    with pytest.raises(ValueError):
        await store.admit_run(waiting(1, state=RunState.RUNNING), limit=3)
    with pytest.raises(ValueError):
        await store.admit_run(waiting(2, parent_id="run-000"), limit=3)
    with pytest.raises(ValueError):
        await store.admit_run(waiting(3, owner="w"), limit=3)  # an owner with no lease
    assert await store.admit_run(accepted(4), limit=3) is OK
    with pytest.raises(ValueError):
        await store.admit_run(accepted(4), limit=3)


async def test_admissions_at_once_never_pass_the_limit(backend: Backend) -> None:
    """Ten mentions from one person at once, through three workers' stores, with two
    places left: two are admitted, whatever the interleaving."""
    stores = [await backend.open() for _ in range(3)]
    assert await stores[0].admit_run(accepted(0), limit=3) is OK
    results = await asyncio.gather(
        *(stores[n % 3].admit_run(accepted(n), limit=3) for n in range(1, 11))
    )
    assert results.count(OK) == 2
    assert results.count(FULL) == 8
    live = await stores[1].find_runs(states=[RunState.QUEUED], limit=100)
    assert len(live) == 3


# -- Continue's admission (MAX_RUNS_PER_USER counts continuations) ----------------------


def spent(n: int, **fields: Any) -> RunRecord:
    """A run that spent its budget: blocked, never resumed on its own (Continue may)."""
    return waiting(
        n,
        state=RunState.BLOCKED,
        ended_because=EndedBecause.BUDGET_EXHAUSTED,
        resume=ResumeState.DECLINED,
        **fields,
    )


async def test_a_continue_counts_towards_the_persons_limit_until_it_starts(
    backend: Backend,
) -> None:
    store = await backend.open()
    now = datetime.now(UTC)
    for n in (1, 2):
        await store.create_run(spent(n))
    assert await store.admit_run(accepted(3), limit=2) is OK

    assert await store.admit_continuation("run-001", "U9", at=now, limit=2)
    continued = await store.get_run("run-001")
    assert continued is not None
    assert (continued.resume, continued.resume_by) == (ResumeState.SCHEDULED, "U9")
    # The continuation not started yet holds a place: a mention, or another Continue,
    # of the same person is past the limit.
    assert await store.admit_run(accepted(4), limit=2) is Admission.PERSON_FULL
    assert not await store.admit_continuation("run-002", "U1", at=now, limit=2)
    untouched = await store.get_run("run-002")
    assert untouched is not None
    assert (untouched.resume, untouched.resume_by) == (ResumeState.DECLINED, None)
    # Continued once only; a run that did not spend its budget is not continued.
    assert not await store.admit_continuation("run-001", "U1", at=now, limit=None)
    assert not await store.admit_continuation("run-003", "U1", at=now, limit=None)
    # Someone else's limit is their own.
    await store.create_run(spent(5, requester="U2"))
    assert await store.admit_continuation("run-005", "U2", at=now, limit=1)


async def test_continues_and_mentions_at_once_never_pass_the_limit(backend: Backend) -> None:
    """Three Continues and three mentions of one person at once, through three workers'
    stores, with one place left: one of them wins."""
    stores = [await backend.open() for _ in range(3)]
    now = datetime.now(UTC)
    for n in (1, 2, 3):
        await stores[0].create_run(spent(n))
    results = await asyncio.gather(
        *(stores[n % 3].admit_continuation(f"run-00{n}", "U1", at=now, limit=1) for n in (1, 2, 3)),
        *(stores[n % 3].admit_run(accepted(n), limit=1) for n in (4, 5, 6)),
    )
    assert results.count(True) + results.count(OK) == 1, results


async def test_admissions_at_once_in_one_thread_admit_exactly_one(backend: Backend) -> None:
    """Ten mentions in one thread at once (people of their own, so no person is full),
    through three workers' stores: one run is admitted, the others find the thread
    busy (one live run per thread, issue 28 item 4)."""
    stores = [await backend.open() for _ in range(3)]
    thread = ThreadKey("T1", "C1", "1700000000.000001")
    runs = [accepted(n, thread=thread, requester=f"U{n}") for n in range(10)]
    results = await asyncio.gather(
        *(stores[n % 3].admit_run(run, limit=3) for n, run in enumerate(runs))
    )
    assert results.count(OK) == 1, results
    assert results.count(Admission.THREAD_BUSY) == 9
    assert len(await stores[1].find_runs(thread=thread)) == 1


async def test_a_thread_is_held_by_a_waiting_or_leased_run_not_by_an_orphan(
    backend: Backend,
) -> None:
    store = await backend.open()
    thread = ThreadKey("T1", "C1", "1700000000.000001")
    assert await store.admit_run(waiting(1, thread=thread), limit=None) is OK
    assert await store.admit_run(accepted(2, thread=thread), limit=None) is Admission.THREAD_BUSY
    assert await store.set_state("run-001", RunState.FINISHED, expected=[RunState.QUEUED])
    assert await store.admit_run(accepted(3, thread=thread), limit=None) is OK
    # Its worker is gone (the lease ran out): the row holds nothing, whoever finds it ends it.
    assert await store.set_state(
        "run-003", RunState.RUNNING, expected=[RunState.QUEUED], lease_expires_at=T0
    )
    assert await store.admit_run(accepted(4, thread=thread), limit=None) is OK
    # A sub-agent's row is its parent's business.
    other = ThreadKey("T1", "C1", "1700000000.000002")
    await store.create_run(waiting(5, thread=other, owner="w", lease_expires_at=T0, parent_id="x"))
    assert await store.admit_run(accepted(6, thread=other), limit=None) is OK
