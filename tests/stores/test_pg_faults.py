"""PostgreSQL under fault: backends terminated, connections lost before a statement was
sent or after it committed. Callers see only :class:`StorageError`, an idempotent call
is retried once on a fresh connection, and a retried write answers what really happened
(a compare-and-set that landed is a win, a stop request is stored and announced once).

Each test uses a database of its own, since it terminates every session on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores._pg import STOP_CHANNEL
from agent_core.stores.postgres import PostgresStore
from agent_core.values.errors import StorageError
from agent_core.values.records import (
    Admission,
    Checkpoint,
    GuidanceRecord,
    GuidanceStatus,
    RunRecord,
    StopRequestRecord,
    ThreadKey,
)
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason
from tests.stores.conftest import ADMIN_URL, terminate_backends
from tests.stores.pg_proxy import pg_proxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from tests.stores.pg_proxy import PgProxy

pytestmark = pytest.mark.postgres

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
DEADLINE_S = 10.0
SLACK_S = 0.25
"""What a cancelled call may take beyond its caller's deadline (a loaded machine)."""


def a_run(run_id: str, state: RunState = RunState.RUNNING) -> RunRecord:
    return RunRecord(run_id, THREAD, "U1", "a task", state=state)


class Heard:
    """NOTIFYs on the stop channel, heard on a connection of its own (no store's)."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.run_ids.append(payload)
        self._changed.set()

    async def until(self, run_id: str) -> None:
        async with asyncio.timeout(DEADLINE_S):
            while run_id not in self.run_ids:
                self._changed.clear()
                await self._changed.wait()


@contextlib.asynccontextmanager
async def listening(url: str) -> AsyncIterator[Heard]:
    heard = Heard()
    conn = await asyncpg.connect(url)
    try:
        await conn.add_listener(STOP_CHANNEL, heard)
        yield heard
    finally:
        await conn.close()


# -- one operation of each kind, with what it must have done ---------------------------


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    sql: str
    """A fragment of the operation's SQL, for the proxy to recognise it."""
    setup: Callable[[PostgresStore], Awaitable[None]]
    call: Callable[[PostgresStore], Awaitable[Any]]
    check: Callable[[PostgresStore, Any, Heard], Awaitable[None]]


async def _nothing(_store: PostgresStore) -> None:
    return None


RUN = a_run("run-1")


async def _create(store: PostgresStore) -> None:
    await store.create_run(RUN)


async def _add_request(store: PostgresStore) -> None:
    await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")


async def _check_read(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer == await store.get_run("run-1")
    assert answer is not None


async def _check_created(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer is None
    assert await store.get_run("run-1") == RUN


async def _check_finished(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer is True  # our compare-and-set landed: we won it
    run = await store.get_run("run-1")
    assert run is not None
    assert (run.state, run.stopped_by) == (RunState.FINISHED, "U9")


async def _check_requested(store: PostgresStore, answer: Any, heard: Heard) -> None:
    assert await store.stop_requests_for("run-1") == [answer]  # stored once
    await heard.until("run-1")  # and the owner was woken


CLICK = "stop:click:1700000000.000200:U1"


async def _check_requested_once(store: PostgresStore, answer: Any, heard: Heard) -> None:
    assert answer is not None  # our transaction landed: the delivery is ours, as the request
    await _check_requested(store, answer, heard)
    assert not await store.first_delivery(CLICK)
    assert (
        await store.add_stop_request_once("run-1", THREAD, StopReason.STOP, "U1", delivery=CLICK)
        is None
    )


async def _check_handled(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer is True  # we marked it: nobody else did
    assert await store.pending_stop_requests() == []


async def _check_updated(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer is True
    run = await store.get_run("run-1")
    assert run is not None
    assert run.status_ts == "1700000000.000900"


async def _check_checkpoint(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer is None
    assert await store.latest_checkpoint("run-1") == CHECKPOINT


async def _check_first(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer is True  # our insert landed: this delivery is ours to act on
    assert not await store.first_delivery("event:Ev1")


async def _mark_handled(store: PostgresStore) -> bool:
    [request] = await store.pending_stop_requests()
    return await store.mark_stop_handled(request.id)


CHECKPOINT = Checkpoint("run-1", 3, ({"role": "user", "content": "hi"},))
GUIDANCE = GuidanceRecord("g1", "run-1", THREAD, "U2", "Use Bergen.", "1700000000.000300")


async def _add_guidance(store: PostgresStore) -> None:
    assert await store.add_guidance(GUIDANCE)


async def _check_guidance_added(store: PostgresStore, answer: Any, heard: Heard) -> None:
    assert answer is True  # our insert landed: the reply is ours to announce
    assert await store.guidance_for("run-1") == [GUIDANCE]  # stored once
    await heard.until("run-1")  # and the owner was woken


async def _check_guidance_marked(store: PostgresStore, answer: Any, _heard: Heard) -> None:
    assert answer == {"g1"}  # we moved it: nobody else did
    [record] = await store.guidance_for("run-1")
    assert record.status is GuidanceStatus.DELIVERED


OPS = [
    Op("get_run", "FROM runs WHERE id", _create, lambda s: s.get_run("run-1"), _check_read),
    Op(
        "create_run",
        "INSERT INTO runs",
        _nothing,
        lambda s: s.create_run(RUN),
        _check_created,
    ),
    Op(
        "set_state",
        "UPDATE runs SET",
        _create,
        lambda s: s.set_state(
            "run-1", RunState.FINISHED, expected={RunState.RUNNING}, stopped_by="U9"
        ),
        _check_finished,
    ),
    Op(
        "add_stop_request",
        "INSERT INTO stop_requests",
        _nothing,
        lambda s: s.add_stop_request("run-1", THREAD, StopReason.STOP, "U1"),
        _check_requested,
    ),
    Op(
        "add_stop_request_once",
        "INSERT INTO deliveries",
        _nothing,
        lambda s: s.add_stop_request_once("run-1", THREAD, StopReason.STOP, "U1", delivery=CLICK),
        _check_requested_once,
    ),
    Op(
        "mark_stop_handled",
        "UPDATE stop_requests",
        _add_request,
        _mark_handled,
        _check_handled,
    ),
    Op(
        "update_run",
        "UPDATE runs SET",
        _create,
        lambda s: s.update_run("run-1", status_ts="1700000000.000900"),
        _check_updated,
    ),
    Op(
        "save_checkpoint",
        "INSERT INTO checkpoints",
        _nothing,
        lambda s: s.save_checkpoint(CHECKPOINT),
        _check_checkpoint,
    ),
    Op(
        "first_delivery",
        "INSERT INTO deliveries",
        _nothing,
        lambda s: s.first_delivery("event:Ev1"),
        _check_first,
    ),
    Op(
        "add_guidance",
        "INSERT INTO guidance",
        _nothing,
        lambda s: s.add_guidance(GUIDANCE),
        _check_guidance_added,
    ),
    Op(
        "mark_guidance",
        "UPDATE guidance",
        _add_guidance,
        lambda s: s.mark_guidance(["g1"], GuidanceStatus.DELIVERED),
        _check_guidance_marked,
    ),
]
WRITES = [op for op in OPS if op.name != "get_run"]


@contextlib.asynccontextmanager
async def proxied_store(url: str) -> AsyncIterator[tuple[PostgresStore, PgProxy]]:
    async with pg_proxy(url) as proxy:
        # No statement cache: every execution sends its SQL, which the proxy matches.
        pool = await asyncpg.create_pool(proxy.url, min_size=1, max_size=2, statement_cache_size=0)
        store = PostgresStore(pool, proxy.url)
        try:
            yield store, proxy
        finally:
            await store.close()


# -- a fail-over: every connection the pool holds is dead --------------------------------


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
async def test_the_first_call_after_a_failover_succeeds(own_pg_url: str, op: Op) -> None:
    async with proxied_store(own_pg_url) as (store, proxy), listening(own_pg_url) as heard:
        await op.setup(store)
        # Both pooled connections open and idle, then the server is gone from under them.
        await asyncio.gather(*(store.get_run(f"warm-{i}") for i in range(2)))
        proxy.sever()

        answer = await op.call(store)  # no "press again": this very call succeeds

        await op.check(store, answer, heard)


# -- the two moments a connection can be lost ----------------------------------------------


@pytest.mark.parametrize("op", WRITES, ids=lambda op: op.name)
async def test_a_write_whose_answer_was_lost_after_commit_answers_truly(
    own_pg_url: str, op: Op
) -> None:
    async with proxied_store(own_pg_url) as (store, proxy), listening(own_pg_url) as heard:
        await op.setup(store)
        proxy.cut_after_commit(op.sql)

        answer = await op.call(store)

        assert proxy.cuts == 1  # the write landed and its answer was lost
        await op.check(store, answer, heard)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
async def test_a_call_whose_connection_died_before_sending_is_made_once(
    own_pg_url: str, op: Op
) -> None:
    async with proxied_store(own_pg_url) as (store, proxy), listening(own_pg_url) as heard:
        await op.setup(store)
        proxy.cut_before_send(op.sql)

        answer = await op.call(store)

        assert proxy.cuts == 1
        await op.check(store, answer, heard)


async def test_a_lost_compare_and_set_is_not_a_win_when_another_writer_moved_the_run(
    own_pg_url: str,
) -> None:
    async with proxied_store(own_pg_url) as (store, proxy):
        await store.create_run(a_run("run-1"))
        other = await PostgresStore.open(own_pg_url, migrate=False)
        try:
            # Our terminal write is lost before the server sees it; meanwhile another
            # worker finishes the run. The retry must not report our win.
            proxy.cut_before_send("UPDATE runs SET")
            ours = asyncio.create_task(
                store.set_state("run-1", RunState.FAILED, expected={RunState.RUNNING})
            )
            async with asyncio.timeout(DEADLINE_S):
                await proxy.cut_done.wait()
            theirs = await other.set_state("run-1", RunState.FINISHED, expected={RunState.RUNNING})
            assert [theirs, await ours].count(True) == 1
            run = await other.get_run("run-1")
            assert run is not None
            assert run.state == (RunState.FINISHED if theirs else RunState.FAILED)
        finally:
            await other.close()


# -- a caller that gives up ------------------------------------------------------------


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
async def test_a_call_cancelled_on_a_stuck_server_returns_at_once(own_pg_url: str, op: Op) -> None:
    budget = 0.5
    async with proxied_store(own_pg_url) as (store, proxy):
        await op.setup(store)
        proxy.stall(op.sql)

        async def click() -> Any:
            async with asyncio.timeout(budget):  # as the click path does
                return await op.call(store)

        call = asyncio.create_task(click())
        done, _ = await asyncio.wait({call}, timeout=budget + SLACK_S)
        proxy.resume()  # only now: a cancelled caller must not wait for the server
        assert done, "the cancelled call waited for the stuck server"
        with pytest.raises(TimeoutError):  # the caller's own deadline, not a StorageError
            call.result()

        # Once the server answers again the store works; the stalled call's outcome is
        # whatever the server made of it, so start over on another run.
        async with asyncio.timeout(DEADLINE_S):
            await store.create_run(a_run("run-after"))
            assert await store.get_run("run-after") is not None


# -- a storm: sessions terminated over and over while workers read and write -----------------


FAILED = object()
"""What :meth:`Tally.call` returns for a call that raised."""


@dataclasses.dataclass
class Tally:
    escaped: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    failed: int = 0
    succeeded: int = 0
    requests: list[StopRequestRecord] = dataclasses.field(default_factory=list)
    winners: dict[str, list[RunState]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    firsts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    async def call(self, what: Awaitable[Any]) -> Any:
        try:
            answer = await what
        except StorageError:
            self.failed += 1
            return FAILED
        except Exception as exc:
            self.escaped[f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"] += 1
            return FAILED
        self.succeeded += 1
        return answer

    async def race_to_end(self, run_id: str, a: PostgresStore, b: PostgresStore) -> None:
        """Two workers race to end the run: at most one may be told it won."""
        ends = (RunState.FINISHED, RunState.FAILED)
        answers = await asyncio.gather(
            *(
                self.call(store.set_state(run_id, end, expected={RunState.RUNNING}))
                for store, end in zip((a, b), ends, strict=True)
            )
        )
        self.winners[run_id] += [end for end, won in zip(ends, answers, strict=True) if won is True]

    async def race_to_deliver(self, key: str, a: PostgresStore, b: PostgresStore) -> None:
        answers = await asyncio.gather(
            self.call(a.first_delivery(key)), self.call(b.first_delivery(key))
        )
        self.firsts[key] += answers.count(True)

    async def race_to_request(self, run_id: str, a: PostgresStore, b: PostgresStore) -> None:
        """Both workers got the same click: at most one may be told it added a request."""
        key = f"stop:click:{run_id}"
        answers = await asyncio.gather(
            *(
                self.call(
                    store.add_stop_request_once(
                        run_id, THREAD, StopReason.ABORT, "U2", delivery=key
                    )
                )
                for store in (a, b)
            )
        )
        added = [a for a in answers if isinstance(a, StopRequestRecord)]
        self.requests += added
        self.firsts[key] += len(added)


async def test_only_storage_errors_escape_while_backends_are_terminated(
    own_pg_url: str,
) -> None:
    workers = [await PostgresStore.open(own_pg_url, migrate=False, max_size=3) for _ in range(3)]
    tally = Tally()
    done = asyncio.Event()
    terminated = 0

    async def terminator() -> None:
        nonlocal terminated
        admin = await asyncpg.connect(ADMIN_URL)
        try:
            while not done.is_set():
                terminated += await terminate_backends(own_pg_url, admin)
        finally:
            await admin.close()

    async def work(w: int, store: PostgresStore) -> None:
        other = workers[(w + 1) % len(workers)]
        for i in range(25):
            run_id = f"run-{w}-{i}"
            await tally.call(store.create_run(a_run(run_id)))
            request = await tally.call(
                store.add_stop_request(run_id, THREAD, StopReason.STOP, "U1")
            )
            if request is not FAILED:
                tally.requests.append(request)
            await tally.race_to_end(run_id, store, other)
            await tally.race_to_deliver(f"event:{run_id}", store, other)
            await tally.race_to_request(run_id, store, other)
            await tally.call(store.get_run(run_id))
            await tally.call(store.pending_stop_requests([run_id]))

    killer = asyncio.create_task(terminator())
    try:
        await asyncio.gather(*(work(w, s) for w, s in enumerate(workers)))
    finally:
        done.set()
        await killer
        for store in workers:
            await store.close()

    assert not tally.escaped, tally.escaped
    assert terminated > 0
    assert tally.failed > 0, "the storm did not hit any call"
    assert tally.succeeded > 0
    assert max(tally.firsts.values()) <= 1, "two workers both took one delivery"

    after = await PostgresStore.open(own_pg_url, migrate=False)
    try:
        for request in tally.requests:  # every request a caller was told is stored...
            stored = await after.stop_requests_for(request.run_id)
            assert [r.id for r in stored].count(request.id) == 1  # ...exactly once
            # One click delivered to two workers: one request at most, whatever was lost.
            assert [r.requested_by for r in stored].count("U2") <= 1
        for run_id, winners in tally.winners.items():
            assert len(winners) <= 1, f"two workers both won {run_id}: {winners}"
            if winners:  # the reported win is the state the run is in
                run = await after.get_run(run_id)
                assert run is not None
                assert run.state == winners[0]
    finally:
        await after.close()


# -- a connection that closes inside a transaction -------------------------------------


async def test_a_connection_lost_inside_a_transaction_is_retried_not_used_after_release(
    own_pg_url: str,
) -> None:
    """The admission of a mention is a transaction; when its connection dies mid-way,
    asyncpg closes it and hands it back to the pool before the store looks at it (the
    transaction's exit then fails on the closed connection). The store must see a lost
    connection, not use the released one: the mention is admitted on a fresh connection
    (before: ``InterfaceError: cannot call Connection.is_closed(): connection has been
    released back to the pool`` escaped, and the mention was answered with an error)."""
    lease = datetime.now(UTC) + timedelta(seconds=30)
    run = dataclasses.replace(a_run("run-1", RunState.QUEUED), owner="w", lease_expires_at=lease)
    async with proxied_store(own_pg_url) as (store, proxy):
        proxy.cut_before_send("INSERT INTO runs")

        assert await store.admit_run(run, limit=3) is Admission.ACCEPTED

        assert proxy.cuts == 1
        stored = await store.get_run("run-1")
        assert stored is not None
        assert stored.owner == "w"
