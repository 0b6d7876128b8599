"""StopRequestStore contract: committed, visible to other workers, ordered, handled once;
added with the delivery that asks for it, once per delivery, or not at all."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.postgres import PostgresStore
from agent_core.values.errors import StorageError
from agent_core.values.records import AuditEvent, RunRecord, StopRequestRecord, ThreadKey, Wakeup
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")


async def test_a_request_is_visible_to_another_instance_once_added(backend: Backend) -> None:
    clicker = await backend.open()  # the worker that got the click
    owner = await backend.open()  # the worker that runs the run

    added = await clicker.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")

    pending = await owner.pending_stop_requests(["run-1"])
    assert pending == [added]
    assert (added.status, added.handled_at, added.kind) == ("requested", None, StopReason.ABORT)
    assert added.requested_at.tzinfo is not None


async def test_pending_requests_come_oldest_first_and_filter_by_run(store: Store) -> None:
    first = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    second = await store.add_stop_request("run-2", THREAD, StopReason.STOP, "U2")
    third = await store.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")
    fourth = await store.add_stop_request("run-3", THREAD, StopReason.SHUTDOWN, "worker-a")

    assert await store.pending_stop_requests() == [first, second, third, fourth]
    assert await store.pending_stop_requests(["run-1"]) == [first, third]
    assert await store.pending_stop_requests({"run-3", "run-2"}) == [second, fourth]
    assert await store.pending_stop_requests([]) == []
    assert await store.pending_stop_requests(["run-9"]) == []


async def test_a_request_is_marked_handled_exactly_once(backend: Backend) -> None:
    store = await backend.open()
    request = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    others = [await backend.open() for _ in range(5)]

    results = await asyncio.gather(*(o.mark_stop_handled(request.id) for o in others))

    assert results.count(True) == 1
    assert await store.pending_stop_requests() == []
    assert not await store.mark_stop_handled(request.id)
    assert not await store.mark_stop_handled("no-such-request")


async def test_handling_one_request_leaves_the_others_pending(store: Store) -> None:
    stop = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    abort = await store.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")

    assert await store.mark_stop_handled(stop.id)

    assert await store.pending_stop_requests(["run-1"]) == [abort]


# -- a request and the delivery that asks for it, in one transaction -------------------

CLICK = "stop:click:1700000000.000200:U1"


async def test_a_delivery_adds_one_request_whichever_worker_gets_it(backend: Backend) -> None:
    clicker = await backend.open()
    other_worker = await backend.open()  # Slack delivered the same click there too

    added = await clicker.add_stop_request_once(
        "run-1", THREAD, StopReason.ABORT, "U1", request_id="r1", delivery=CLICK
    )
    again = await other_worker.add_stop_request_once(
        "run-1", THREAD, StopReason.ABORT, "U1", delivery=CLICK
    )
    here_again = await clicker.add_stop_request_once(
        "run-1", THREAD, StopReason.ABORT, "U1", delivery=CLICK
    )

    assert added is not None and added.id == "r1"
    assert (again, here_again) == (None, None)
    assert await other_worker.pending_stop_requests() == [added]
    # One delivery log: the key the request took is taken for every other use too.
    assert not await other_worker.first_delivery(CLICK)


async def test_workers_racing_with_one_delivery_add_exactly_one_request(backend: Backend) -> None:
    workers = [await backend.open() for _ in range(4)]

    for i in range(10):
        key = f"{CLICK}:{i}"
        answers = await asyncio.gather(
            *(
                w.add_stop_request_once(f"run-{i}", THREAD, StopReason.STOP, "U1", delivery=key)
                for w in workers
            )
        )
        added = [a for a in answers if a is not None]
        assert len(added) == 1, (key, answers)
        assert await workers[0].pending_stop_requests([f"run-{i}"]) == added


async def test_a_delivery_taken_before_adds_no_request(store: Store) -> None:
    assert await store.first_delivery(CLICK)

    assert (
        await store.add_stop_request_once("run-1", THREAD, StopReason.STOP, "U1", delivery=CLICK)
        is None
    )

    assert await store.pending_stop_requests() == []
    assert await store.stop_requests_for("run-1") == []


async def test_a_request_that_cannot_be_stored_leaves_its_delivery_untaken(
    backend: Backend, backend_url: str
) -> None:
    if backend.name == "memory":
        pytest.skip("nothing in memory refuses a row")
    store = await backend.open()

    async with stop_requests_refused(backend.name, backend_url):
        with pytest.raises(StorageError):
            await store.add_stop_request_once(
                "run-1", THREAD, StopReason.STOP, "U1", delivery=CLICK
            )
    assert await store.stop_requests_for("run-1") == []

    # Slack's repeat of that delivery finds it free, and is the one that commits.
    added = await store.add_stop_request_once(
        "run-1", THREAD, StopReason.STOP, "U1", delivery=CLICK
    )
    assert added is not None
    assert await store.pending_stop_requests() == [added]


@contextlib.asynccontextmanager
async def stop_requests_refused(kind: str, url: str) -> AsyncIterator[None]:
    """Every insert into ``stop_requests`` fails, by a trigger, until the block ends."""
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(url, isolation_level=None)) as conn:
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON stop_requests "
                "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
            )
            try:
                yield
            finally:
                conn.execute("DROP TRIGGER refuse")
        return
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected fault'; END $$; "
            "CREATE TRIGGER refuse BEFORE INSERT ON stop_requests "
            "FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
        try:
            yield
        finally:
            await conn.execute("DROP TRIGGER refuse ON stop_requests; DROP FUNCTION refuse()")
    finally:
        await conn.close()


# -- a batch (Stop all) ------------------------------------------------------------------


def a_request(run_id: str, user: str = "U-ADMIN") -> StopRequestRecord:
    return StopRequestRecord(uuid.uuid4().hex, run_id, THREAD, StopReason.STOP, user)


async def test_a_batch_asks_each_stoppable_run_once_and_audits_it(backend: Backend) -> None:
    clicker = await backend.open()
    owner = await backend.open()
    states = {
        "running": RunState.RUNNING,
        "queued": RunState.QUEUED,
        "stopping": RunState.STOPPING,
        "asked-already": RunState.RUNNING,
        "ended": RunState.FINISHED,
    }
    for run_id, state in states.items():
        await clicker.create_run(RunRecord(run_id, THREAD, "U1", "task", state=state))
    earlier = await clicker.add_stop_request("asked-already", THREAD, StopReason.STOP, "U1")
    batch = [a_request(run_id) for run_id in [*states, "unknown"]]
    audit = [AuditEvent(r.run_id, "stop.requested", r.requested_by) for r in batch]

    added = await clicker.add_stop_requests(batch, events=audit)

    assert added == batch[:2]  # running, queued: the others are ending, or were asked
    pending = await owner.pending_stop_requests()
    assert sorted(pending, key=lambda r: r.run_id) == sorted(
        [*added, earlier], key=lambda r: r.run_id
    )
    for run_id in [*states, "unknown"]:
        kinds = [e.kind for e in await owner.events_for(run_id)]
        assert kinds == (["stop.requested"] if run_id in ("running", "queued") else []), run_id


async def test_a_batch_is_taken_once_per_delivery(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    for run_id in ("r1", "r2"):
        await first.create_run(RunRecord(run_id, THREAD, "U1", "task", state=RunState.RUNNING))

    added = await first.add_stop_requests([a_request("r1")], delivery="stop:click:1")
    again = await second.add_stop_requests([a_request("r2")], delivery="stop:click:1")

    assert added is not None and [r.run_id for r in added] == ["r1"]
    assert again is None
    assert [r.run_id for r in await second.pending_stop_requests()] == ["r1"]


async def test_a_batch_naming_a_run_twice_is_refused(store: Store) -> None:
    await store.create_run(RunRecord("r1", THREAD, "U1", "task", state=RunState.RUNNING))
    with pytest.raises(ValueError, match="names a run twice"):
        await store.add_stop_requests([a_request("r1"), a_request("r1", "U2")])
    assert await store.pending_stop_requests() == []


@pytest.mark.postgres
async def test_a_batch_wakes_the_owner_of_each_run_it_asked(pg_url: str) -> None:
    owner = await PostgresStore.open(pg_url, migrate=False)
    clicker = await PostgresStore.open(pg_url, migrate=False)
    run_ids = [f"woken-{i}" for i in range(50)]
    woken: list[str] = []
    all_woken = asyncio.Event()

    async def wake(wakeup: Wakeup) -> None:
        assert wakeup.run_id is not None
        woken.append(wakeup.run_id)
        if set(run_ids) <= set(woken):
            all_woken.set()

    try:
        for run_id in run_ids:
            await clicker.create_run(RunRecord(run_id, THREAD, "U1", "t", state=RunState.RUNNING))
        async with owner.listen_stops(wake):
            added = await clicker.add_stop_requests([a_request(r) for r in run_ids])
            async with asyncio.timeout(10):
                await all_woken.wait()
        assert added is not None and len(added) == len(run_ids)
        assert sorted(woken) == sorted(run_ids)  # each once
    finally:
        await owner.close()
        await clicker.close()
