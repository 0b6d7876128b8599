"""The PostgreSQL :class:`~agent_core.ports.Store`, for several workers on several hosts.

Queries go through an asyncpg pool. Compare-and-set is one ``UPDATE ... WHERE id = $1
AND state = ANY($2) RETURNING id``: PostgreSQL row locks make exactly one of any number
of racing writers see the row in an expected state. A committed stop request or guidance
also sends ``NOTIFY threadpilot_stop, '<run id>'`` in the same statement, so the
notification goes out with the commit and never without it;
:meth:`PostgresStore.listen_stops` receives those wake-ups (see
:mod:`agent_core.stores.postgres_listener`). The tables stay the truth: a worker that
missed a notification finds the request or the guidance on its next poll or scan.

Lease times come from the caller's clock, as in every adapter, so that all of them
behave alike and tests can pass ``now``; hosts are expected to run NTP, and a lease TTL
of tens of seconds dwarfs their skew.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import asyncpg  # type: ignore[import-untyped]

from agent_core.stores import _codec as codec
from agent_core.stores import _retention as retention
from agent_core.stores._cleanup import Cleanups
from agent_core.stores._pg import (
    DRIVER_ERRORS,
    STOP_CHANNEL,
    connection_lost,
    is_driver_error,
)
from agent_core.stores.defaults import ANSWERING_POOL_SIZE, POOL_SIZE
from agent_core.stores.dsn import describe_dsn
from agent_core.stores.migrations import TIMEOUT_S as MIGRATION_TIMEOUT_S
from agent_core.stores.migrations import upgrade_postgres
from agent_core.stores.postgres_listener import PostgresStopListener
from agent_core.stores.postgres_queue import PostgresQueue
from agent_core.stores.sql_installations import PostgresInstallations
from agent_core.values.answering import ANSWERING
from agent_core.values.clock import utcnow
from agent_core.values.errors import StorageError
from agent_core.values.records import Forgotten, ResumeState, StopRequestRecord, TeamForgotten
from agent_core.values.states import LIVE_STATES, RunState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
    from datetime import datetime

    from agent_core.ports import Reconnected, StopWakeup
    from agent_core.values.outcomes import ExitCode
    from agent_core.values.records import (
        ApprovalRecord,
        ApprovalStatus,
        AuditEvent,
        Checkpoint,
        GuidanceRecord,
        GuidanceStatus,
        RunRecord,
        ThreadKey,
    )
    from agent_core.values.stop import StopReason

__all__ = [
    "ANSWERING_POOL_SIZE",
    "POOL_SIZE",
    "RELEASE_TIMEOUT_S",
    "RETRY_BUDGET_S",
    "PostgresStore",
]

RETRY_BUDGET_S = 3.0
"""A call whose connection was lost is retried only if that happened within this many
seconds of its start, and the retry gets as long again: Slack's ack budget for a click.
A caller that can wait longer (a terminal write) retries on its own, with backoff."""

RELEASE_TIMEOUT_S = 5.0
"""How long handing a connection back to the pool (asyncpg rolls back a transaction left
open) may take before asyncpg closes it instead."""

_T = TypeVar("_T")

if TYPE_CHECKING:
    _Work: TypeAlias = Callable[[Any, bool], Awaitable[_T]]
    """One attempt of a call: ``(connection, retrying) -> answer``."""


async def _give_back(pool: Any, conn: Any) -> None:
    # asyncpg closes a connection whose reset fails; its error is no caller's concern.
    with contextlib.suppress(*DRIVER_ERRORS):
        await pool.release(conn, timeout=RELEASE_TIMEOUT_S)


def _closed(conn: Any) -> bool:
    """Whether the pool's connection ``conn``, which a call still holds, is closed.

    A connection the server ended under the call (a terminated backend, a transaction
    whose exit failed on it) is closed by asyncpg, which hands it back to the pool at
    once and detaches it from ``conn``: asking it anything then raises InterfaceError
    ("connection has been released back to the pool"). That connection is closed too.
    """
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True


async def _close_pools(*pools: Any) -> None:
    for pool in dict.fromkeys(p for p in pools if p is not None):  # each once
        await pool.close()


async def _keep_session(_conn: Any) -> None:
    """The pool's reset of a connection handed back: none beyond asyncpg's own rollback of
    a transaction left open. Its default (``RESET ALL``, ``UNLISTEN *``, advisory locks
    released, ...) is one more round trip per call, holding the connection meanwhile, and
    this store leaves no session state behind: its ``LISTEN`` and its migration each have
    a connection of their own, outside the pool."""


_LIVE = sorted(LIVE_STATES)


def _insert_sql(table: str, values: Mapping[str, Any]) -> str:
    marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
    return f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})"


def _count(status: str) -> int:
    """Rows affected, from a command tag such as ``UPDATE 3``."""
    return int(status.rsplit(" ", 1)[-1])


class _Failed(Exception):
    """One attempt failed with a driver error; the store decides whether to retry."""

    def __init__(self, cause: Exception, *, sent: bool, lost: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.sent = sent
        """The statement may have reached the server (False: failed getting a connection)."""
        self.lost = lost
        """The connection is gone: another one may succeed."""


def _cannot_connect(where: str, exc: BaseException, connect_timeout_s: float) -> str:
    """Why :meth:`PostgresStore.open` could not use the database, and what to check."""
    if isinstance(exc, TimeoutError):
        return (
            f"PostgreSQL at {where} did not answer within {connect_timeout_s:g} s; check "
            "the host and port in DATABASE_URL, and that PostgreSQL (not some other "
            "service) listens there"
        )
    if isinstance(exc, ConnectionRefusedError):
        return (
            f"nothing accepts connections at {where} (connection refused); check the host "
            "and port in DATABASE_URL, and that PostgreSQL is running"
        )
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"{exc} at {where}; create it (createdb), or fix the name in DATABASE_URL"
    return (
        f"cannot use PostgreSQL at {where}: {exc}; check DATABASE_URL and that the server "
        "is running and accepts this user"
    )


class PostgresStore(PostgresQueue, PostgresInstallations):
    """Runs, stop requests, checkpoints, events and leases in a PostgreSQL database (the
    run queue's SQL is :class:`~agent_core.stores.postgres_queue.PostgresQueue`'s)."""

    def __init__(self, pool: Any, dsn: str, *, answering_pool: Any = None) -> None:
        """Use :meth:`open`; this only wraps the pools it has created. Calls made while
        :data:`~agent_core.values.answering.ANSWERING` is set use ``answering_pool`` (the one pool
        if there is none)."""
        self._pool = pool
        self._answering_pool = answering_pool if answering_pool is not None else pool
        self._dsn = dsn
        self._where = describe_dsn(dsn)
        self._cleanups = Cleanups(self._where)

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = POOL_SIZE,
        migrate: bool = True,
        connect_timeout_s: float = 5.0,
        command_timeout_s: float = 30.0,
        migration_timeout_s: float = MIGRATION_TIMEOUT_S,
    ) -> PostgresStore:
        """Connect to ``dsn`` (``postgresql://user:password@host:port/db``), migrate.

        Every connection (the pool's, now and later, and the migration's) gives up after
        ``connect_timeout_s`` (a host that accepts TCP and never answers, or answers
        slowly), and every statement of the pools' after ``command_timeout_s``. The
        migration has ``migration_timeout_s`` in all (a long history, another worker's
        migration to wait for, an index built concurrently). All end in
        :class:`StorageError`.
        """
        where = describe_dsn(dsn)
        limits = {"timeout": connect_timeout_s, "command_timeout": command_timeout_s}
        try:
            # The pool first: its errors (refused, no such database, bad password) come
            # straight from asyncpg, unwrapped, and make the clearest messages.
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, reset=_keep_session, **limits
            )
        except DRIVER_ERRORS as exc:
            raise StorageError(_cannot_connect(where, exc, connect_timeout_s)) from exc
        answering = None
        try:
            answering = await asyncpg.create_pool(
                dsn,
                min_size=ANSWERING_POOL_SIZE,
                max_size=ANSWERING_POOL_SIZE,
                max_inactive_connection_lifetime=0,  # opened once, kept (ANSWERING_POOL_SIZE)
                reset=_keep_session,
                **limits,
            )
            if migrate:
                await _migrate(dsn, where, connect_timeout_s, migration_timeout_s)
        except DRIVER_ERRORS as exc:
            await _close_pools(pool, answering)
            problem = _cannot_connect(where, exc, connect_timeout_s)
            raise StorageError(f"cannot migrate: {problem}") from exc
        except BaseException:
            await _close_pools(pool, answering)
            raise
        return cls(pool, dsn, answering_pool=answering)

    async def close(self) -> None:
        await self._cleanups.wait()  # connections released by cancelled calls come back
        await _close_pools(self._pool, self._answering_pool)

    def listen_stops(
        self, on_stop: StopWakeup, *, on_reconnect: Reconnected | None = None
    ) -> PostgresStopListener:
        """Wake-ups for committed stop requests, on a dedicated connection (not the pool:
        a LISTEN must stay on one session, and must not hold a query connection)."""
        return PostgresStopListener(self._dsn, on_stop, on_reconnect=on_reconnect)

    # -- plumbing ----------------------------------------------------------------------
    #
    # Every call runs as ``work(connection, retrying)`` through :meth:`_call`, which
    # translates the driver's errors and, when the connection was lost, retries once on a
    # fresh one (the pool's connections are expired: after a fail-over they are all
    # dead). ``idempotent`` calls are retried whatever the moment of the loss; the others
    # only when it came before their statement was sent (getting a connection). A write
    # that is retried after an unknown outcome is written so that the retry answers what
    # really happened; ``retrying`` lets it say so in SQL (see ``set_state``).

    def _error(self, action: str, exc: BaseException, *, retried: bool = False) -> StorageError:
        again = " (also on a new connection)" if retried else ""
        return StorageError(f"PostgreSQL could not {action} at {self._where}: {exc}{again}")

    async def _call(self, action: str, work: _Work[_T], *, idempotent: bool = False) -> _T:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await self._attempt(work, retrying=False)
        except _Failed as failed:
            first = failed
        if first.lost and first.sent:
            # A connection the pool handed out was dead: after a fail-over they all are,
            # so replace them all, and neither the retry nor the next caller gets another.
            # (Failing to open a new connection says nothing about the open ones: expiring
            # them then would turn a server that refuses new connections into an outage.)
            await self._pool.expire_connections()
            if self._answering_pool is not self._pool:
                await self._answering_pool.expire_connections()
        in_time = loop.time() - started < RETRY_BUDGET_S
        if not (first.lost and in_time and (idempotent or not first.sent)):
            raise self._error(action, first.cause) from first.cause
        try:
            async with asyncio.timeout(RETRY_BUDGET_S):
                return await self._attempt(work, retrying=True)
        except _Failed as failed:
            second = failed.cause
        except TimeoutError as exc:  # the budget's own: the attempt's are _Failed
            second = exc
        raise self._error(action, second, retried=True) from second

    async def _attempt(self, work: _Work[_T], *, retrying: bool) -> _T:
        pool = self._answering_pool if ANSWERING.get() else self._pool
        try:
            conn = await pool.acquire()
        except Exception as exc:
            if not is_driver_error(exc):
                raise
            raise _Failed(exc, sent=False, lost=True) from exc
        try:
            result = await work(conn, retrying)
        except Exception as exc:
            if not is_driver_error(exc):
                self._release(pool, conn)
                raise
            # Asked while the connection is still held: after it goes back it is not ours.
            lost = connection_lost(exc) or _closed(conn)
            self._release(pool, conn)
            raise _Failed(exc, sent=True, lost=lost) from exc
        except BaseException:
            # A cancellation too: the connection goes back in a task of the store's, so a
            # cancelled caller does not wait for asyncpg to cancel the query and reset.
            self._release(pool, conn)
            raise
        self._release(pool, conn)
        return result

    def _release(self, pool: Any, conn: Any) -> None:
        self._cleanups.spawn(_give_back(pool, conn), "release a connection")

    async def _execute(self, action: str, sql: str, *params: Any, idempotent: bool = False) -> int:
        async def work(conn: Any, _retrying: bool) -> int:
            return _count(await conn.execute(sql, *params))

        return await self._call(action, work, idempotent=idempotent)

    async def _fetch(self, action: str, sql: str, *params: Any) -> list[Any]:
        """Rows of a read, or of an idempotent ``... RETURNING`` write: both are retried."""

        async def work(conn: Any, _retrying: bool) -> list[Any]:
            return list(await conn.fetch(sql, *params))

        return await self._call(action, work, idempotent=True)

    async def _changed(self, action: str, sql: str, *params: Any, idempotent: bool = False) -> bool:
        """Run a ``... RETURNING`` write; True if it touched a row."""

        async def work(conn: Any, _retrying: bool) -> bool:
            return await conn.fetchval(sql, *params) is not None

        return await self._call(action, work, idempotent=idempotent)

    async def _runs(self, action: str, sql: str, *params: Any) -> list[RunRecord]:
        return [codec.run_from_row(r) for r in await self._fetch(action, sql, *params)]

    # -- RunStore ----------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        values = codec.run_values(run)
        sql = _insert_sql("runs", values)
        same = (
            "SELECT 1 FROM runs WHERE id = $1 AND created_at = $2 AND requester = $3 AND task = $4"
        )

        async def work(conn: Any, retrying: bool) -> None:
            try:
                await conn.execute(sql, *values.values())
            except asyncpg.UniqueViolationError as exc:
                # On a retry the row may be our own first attempt's, which landed.
                mine = (values["id"], values["created_at"], values["requester"], values["task"])
                if retrying and await conn.fetchval(same, *mine) is not None:
                    return
                # The same error as MemoryStore's, so callers handle one.
                raise ValueError(f"run {run.id} already exists") from exc

        await self._call("create a run", work, idempotent=True)

    async def get_run(self, run_id: str) -> RunRecord | None:
        runs = await self._runs("read a run", "SELECT * FROM runs WHERE id = $1", run_id)
        return runs[0] if runs else None

    async def set_state(
        self,
        run_id: str,
        new: RunState,
        *,
        expected: Collection[RunState],
        **changes: Any,
    ) -> bool:
        change = codec.state_change(new, expected=expected, changes=changes)
        columns = change.columns | {"updated_at": utcnow()}
        marks = {c: f"${i}" for i, c in enumerate(columns, start=3)}
        assignments = ", ".join(f"{c} = {mark}" for c, mark in marks.items())
        update = f"UPDATE runs SET {assignments} WHERE id = $1 AND"
        cas = "state = ANY($2::text[])"
        # A retry after an unknown outcome must not run the compare-and-set blindly: if
        # the first attempt landed, the state is no longer expected and the retry would
        # report a loss. So it also matches the row as our own write left it: our new
        # state and our ``updated_at``, a timestamp taken once for this call. (Only on a
        # retry: two writers could, in principle, stamp the same microsecond.)
        ours = f"state = {marks['state']} AND updated_at = {marks['updated_at']}"
        params = [run_id, list(change.expected), *columns.values()]

        async def work(conn: Any, retrying: bool) -> bool:
            condition = f"({cas} OR ({ours}))" if retrying else cas
            return await conn.fetchval(f"{update} {condition} RETURNING id", *params) is not None

        return await self._call("change a run's state", work, idempotent=True)

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        values = codec.checkpoint_values(checkpoint)
        sql = _insert_sql("checkpoints", values) + (
            " ON CONFLICT (run_id) DO UPDATE SET turn = excluded.turn, "
            "messages = excluded.messages, created_at = excluded.created_at, "
            "started = excluded.started, spent = excluded.spent"
        )
        await self._execute("save a checkpoint", sql, *values.values(), idempotent=True)

    async def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        sql = "SELECT * FROM checkpoints WHERE run_id = $1"
        rows = await self._fetch("read a checkpoint", sql, run_id)
        return codec.checkpoint_from_row(rows[0]) if rows else None

    async def record_event(self, event: AuditEvent) -> None:
        values = codec.event_values(event)
        sql = _insert_sql("events", values)
        await self._execute("record an audit event", sql, *values.values())

    async def events_for(self, run_id: str) -> list[AuditEvent]:
        sql = "SELECT * FROM events WHERE run_id = $1 ORDER BY id"
        return [codec.event_from_row(r) for r in await self._fetch("read events", sql, run_id)]

    # -- RunQueries --------------------------------------------------------------------

    async def find_runs(
        self,
        *,
        states: Collection[RunState] | None = None,
        stop_reason: StopReason | None = None,
        exit_code: ExitCode | None = None,
        final_posted: bool | None = None,
        thread: ThreadKey | None = None,
        owner: str | None = None,
        top_level: bool | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        query = codec.run_query(
            states=states,
            stop_reason=stop_reason,
            exit_code=exit_code,
            final_posted=final_posted,
            thread=thread,
            owner=owner,
            top_level=top_level,
            limit=limit,
        )
        if query.matches_nothing:
            return []
        where: list[str] = []
        params: list[Any] = []
        if query.states is not None:
            params.append(list(query.states))
            where.append(f"state = ANY(${len(params)}::text[])")
        for column, value in query.equal.items():
            params.append(value)
            where.append(f"{column} = ${len(params)}")
        if query.final_posted is not None:
            where.append(f"final_posted_at IS {'NOT ' if query.final_posted else ''}NULL")
        if query.top_level is not None:
            where.append(f"parent_id IS {'' if query.top_level else 'NOT '}NULL")
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        # COLLATE "C": ties break by code point, as in SQLite and the memory store,
        # whatever the database's collation.
        params.append(query.limit)
        sql += f' ORDER BY created_at, id COLLATE "C" LIMIT ${len(params)}'
        return await self._runs("find runs", sql, *params)

    async def update_run(self, run_id: str, **changes: Any) -> bool:
        columns = codec.run_updates(changes)
        if not columns:
            return await self.get_run(run_id) is not None
        columns["updated_at"] = utcnow()
        assignments = ", ".join(f"{c} = ${i}" for i, c in enumerate(columns, start=2))
        sql = f"UPDATE runs SET {assignments} WHERE id = $1 RETURNING id"
        return await self._changed("update a run", sql, run_id, *columns.values(), idempotent=True)

    async def stop_requests_for(self, run_id: str) -> list[StopRequestRecord]:
        sql = "SELECT * FROM stop_requests WHERE run_id = $1 ORDER BY requested_at, seq"
        rows = await self._fetch("read a run's stop requests", sql, run_id)
        return [codec.stop_from_row(r) for r in rows]

    # -- DashboardQueries --------------------------------------------------------------

    async def team_live_runs(
        self, team: str, *, requester: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        where, params = _team_filter(team, requester)
        sql = (
            f"SELECT * FROM runs WHERE {where} AND state = ANY(${len(params) + 1}::text[]) "
            f'ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT ${len(params) + 2}'
        )
        return await self._runs("list a team's live runs", sql, *params, _LIVE, _limit(limit))

    async def team_ended_runs(
        self, team: str, *, requester: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        where, params = _team_filter(team, requester)
        sql = (
            f"SELECT * FROM runs WHERE {where} AND NOT state = ANY(${len(params) + 1}::text[]) "
            f'ORDER BY updated_at DESC, id COLLATE "C" DESC LIMIT ${len(params) + 2}'
        )
        return await self._runs("list a team's ended runs", sql, *params, _LIVE, _limit(limit))

    async def runs_changed_since(self, since: datetime, *, limit: int = 1000) -> list[RunRecord]:
        order = 'ORDER BY updated_at, id COLLATE "C"'
        sql = f"SELECT * FROM runs WHERE updated_at >= $1 {order} LIMIT $2"
        return await self._runs("find changed runs", sql, codec.to_utc(since), _limit(limit))

    async def live_children(self, parent_ids: Collection[str]) -> list[RunRecord]:
        wanted = sorted(set(parent_ids))
        if not wanted:
            return []
        sql = (
            "SELECT * FROM runs WHERE parent_id = ANY($1::text[]) AND state = ANY($2::text[]) "
            'ORDER BY created_at, id COLLATE "C"'
        )
        return await self._runs("list live sub-agents", sql, wanted, _LIVE)

    async def checkpoint_turns(self, run_ids: Collection[str]) -> dict[str, int]:
        wanted = sorted(set(run_ids))
        if not wanted:
            return {}
        sql = "SELECT run_id, turn FROM checkpoints WHERE run_id = ANY($1::text[])"
        rows = await self._fetch("read checkpoint turns", sql, wanted)
        return {str(r["run_id"]): int(r["turn"]) for r in rows}

    async def events_of_kind(
        self, run_ids: Collection[str], kinds: Collection[str]
    ) -> list[AuditEvent]:
        runs, wanted = sorted(set(run_ids)), sorted(set(kinds))
        if not runs or not wanted:
            return []
        sql = (
            "SELECT * FROM events WHERE run_id = ANY($1::text[]) AND kind = ANY($2::text[]) "
            "ORDER BY at, id"
        )
        rows = await self._fetch("read audit events", sql, runs, wanted)
        return [codec.event_from_row(r) for r in rows]

    # -- StopRequestStore --------------------------------------------------------------

    async def add_stop_request(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        request_id: str | None = None,
    ) -> StopRequestRecord:
        record = codec.new_stop_request(run_id, thread, kind, requested_by, request_id)
        values = codec.stop_values(record)
        assert list(values)[1] == "run_id"  # $2 below
        # One statement is one transaction: the row and its NOTIFY commit together (a
        # NOTIFY is only delivered at commit), in one round trip before the click's
        # ack. It is idempotent by the request's id, generated here: a retry after an
        # unknown outcome inserts nothing if the first attempt landed, and notifies
        # again anyway (the WITH's insert runs whether or not the SELECT reads it): a
        # wake-up is a hint, a second one costs a table read, a missing one a poll
        # interval.
        sql = (
            f"WITH added AS ({_insert_sql('stop_requests', values)} "
            f"ON CONFLICT (id) DO NOTHING) SELECT pg_notify('{STOP_CHANNEL}', $2)"
        )
        await self._execute("commit a stop request", sql, *values.values(), idempotent=True)
        return record

    async def add_stop_request_once(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        delivery: str,
        request_id: str | None = None,
    ) -> StopRequestRecord | None:
        record = codec.new_stop_request(run_id, thread, kind, requested_by, request_id)
        values = codec.stop_values(record)
        # As add_stop_request, with the delivery's key taken in that one statement: the
        # request is inserted, and notified, only if the key's insert made a row.
        n = len(values)
        take = (
            f"INSERT INTO deliveries (key, token, seen_at) VALUES (${n + 1}, ${n + 2}, ${n + 3}) "
            "ON CONFLICT (key) DO NOTHING RETURNING key"
        )
        columns, marks = ", ".join(values), ", ".join(f"${i}" for i in range(1, n + 1))
        sql = (
            f"WITH taken AS ({take}), "
            f"added AS (INSERT INTO stop_requests ({columns}) SELECT {marks} FROM taken) "
            f"SELECT pg_notify('{STOP_CHANNEL}', $2) FROM taken"
        )
        token = uuid.uuid4().hex
        params = (*values.values(), delivery, token, record.requested_at)

        async def work(conn: Any, retrying: bool) -> bool:
            if await conn.fetch(sql, *params):
                return True
            # On a retry the key may be there because our first attempt landed, and with
            # it the request (one transaction): the token on the row says whose it was.
            mine = "SELECT 1 FROM deliveries WHERE key = $1 AND token = $2"
            return retrying and await conn.fetchval(mine, delivery, token) is not None

        taken = await self._call("commit a stop request", work, idempotent=True)
        return record if taken else None

    async def add_stop_requests(
        self,
        requests: Sequence[StopRequestRecord],
        *,
        events: Sequence[AuditEvent] = (),
        delivery: str | None = None,
    ) -> list[StopRequestRecord] | None:
        rows, event_rows = codec.stop_batch(requests, events)
        if not rows:
            return []
        token = uuid.uuid4().hex
        params: list[Any] = [
            *([row[c] for row in rows] for c in _BATCH_STOP_COLUMNS),
            *([row[c] for row in event_rows] for c in _BATCH_EVENT_COLUMNS),
            list(codec.STOPPABLE),
        ]
        if delivery is None:
            taken = "SELECT 1"
        else:
            n = len(params)
            taken = (
                f"INSERT INTO deliveries (key, token, seen_at) VALUES (${n + 1}, ${n + 2}, "
                f"${n + 3}) ON CONFLICT (key) DO NOTHING RETURNING 1"
            )
            params += [delivery, token, utcnow()]
        sql = _BATCH_STOPS.format(taken=taken)
        ids = [r.id for r in requests]
        mine = "SELECT 1 FROM deliveries WHERE key = $1 AND token = $2"
        landed = "SELECT id FROM stop_requests WHERE id = ANY($1::text[])"

        async def work(conn: Any, retrying: bool) -> set[str] | None:
            row = await conn.fetchrow(sql, *params)
            if row["took"] and not retrying:
                return set(row["ids"] or ())
            # On a retry our first attempt may have landed: then the key is ours (its
            # token), and the requests it added are there by their ids.
            if delivery is not None and await conn.fetchval(mine, delivery, token) is None:
                return None
            return {r["id"] for r in await conn.fetch(landed, ids)}

        added = await self._call("commit stop requests", work, idempotent=True)
        return None if added is None else [r for r in requests if r.id in added]

    async def pending_stop_requests(
        self, run_ids: Collection[str] | None = None
    ) -> list[StopRequestRecord]:
        rows = await self._requested("stop_requests", run_ids, what="read stop requests")
        return [codec.stop_from_row(r) for r in rows]

    async def _requested(
        self, table: str, run_ids: Collection[str] | None, *, what: str
    ) -> list[Any]:
        """The ``requested`` rows of ``table`` (stop requests, approvals), oldest first;
        only those of ``run_ids`` when given."""
        sql = f"SELECT * FROM {table} WHERE status = 'requested'"
        params: list[Any] = []
        if run_ids is not None:
            sql += " AND run_id = ANY($1::text[])"
            params.append(list(run_ids))
        return await self._fetch(what, sql + " ORDER BY requested_at, seq", *params)

    async def mark_stop_handled(self, request_id: str) -> bool:
        update = "UPDATE stop_requests SET status = 'handled', handled_at = $2 WHERE id = $1 AND"
        # On a retry, a request handled at exactly our ``handled_at`` was handled by us.
        handled_at = utcnow()

        async def work(conn: Any, retrying: bool) -> bool:
            condition = (
                "(status = 'requested' OR handled_at = $2)" if retrying else "status = 'requested'"
            )
            sql = f"{update} {condition} RETURNING id"
            return await conn.fetchval(sql, request_id, handled_at) is not None

        return await self._call("mark a stop request handled", work, idempotent=True)

    # -- LeaseStore --------------------------------------------------------------------

    async def claim_run(
        self, run_id: str, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> bool:
        now = now or utcnow()
        sql = (
            "UPDATE runs SET owner = $2, lease_expires_at = $3 "
            "WHERE id = $1 AND state = ANY($4::text[]) AND (owner IS NULL OR owner = $2 "
            "OR lease_expires_at IS NULL OR lease_expires_at <= $5) RETURNING id"
        )
        expires = now + timedelta(seconds=ttl_s)
        # Idempotent: a retry after our claim landed finds the lease ours, and renews it.
        params = (run_id, owner, expires, _LIVE, now)
        return await self._changed("claim a run", sql, *params, idempotent=True)

    async def release_run(self, run_id: str, owner: str) -> bool:
        update = "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE id = $1 AND"

        async def work(conn: Any, retrying: bool) -> bool:
            # On a retry a free lease may be our first attempt's doing: either way the
            # caller no longer holds it, which is what it asked for.
            condition = "(owner = $2 OR owner IS NULL)" if retrying else "owner = $2"
            return (
                await conn.fetchval(f"{update} {condition} RETURNING id", run_id, owner) is not None
            )

        return await self._call("release a run", work, idempotent=True)

    async def heartbeat(
        self, owner: str, run_ids: Collection[str], ttl_s: float, *, now: datetime | None = None
    ) -> set[str]:
        wanted = sorted(set(run_ids))
        if not wanted:
            return set()
        expires = (now or utcnow()) + timedelta(seconds=ttl_s)
        sql = (
            "UPDATE runs SET lease_expires_at = $2 "
            "WHERE owner = $1 AND state = ANY($3::text[]) AND id = ANY($4::text[]) RETURNING id"
        )
        rows = await self._fetch("extend leases", sql, owner, expires, _LIVE, wanted)
        return {str(row["id"]) for row in rows}

    async def expired_runs(self, now: datetime | None = None) -> list[RunRecord]:
        sql = (
            "SELECT * FROM runs WHERE state = ANY($1::text[]) AND lease_expires_at <= $2 "
            "ORDER BY created_at, id"
        )
        return await self._runs("find expired leases", sql, _LIVE, now or utcnow())

    async def live_runs(self, owner: str | None = None) -> list[RunRecord]:
        if owner is None:
            sql = "SELECT * FROM runs WHERE state = ANY($1::text[]) ORDER BY created_at, id"
            return await self._runs("list live runs", sql, _LIVE)
        sql = (
            "SELECT * FROM runs WHERE state = ANY($1::text[]) AND owner = $2 "
            "ORDER BY created_at, id"
        )
        return await self._runs("list live runs", sql, _LIVE, owner)

    # -- RetentionStore ----------------------------------------------------------------

    async def purge(self, older_than: datetime, *, batch_size: int = retention.BATCH_SIZE) -> int:
        cutoff = codec.to_utc(older_than)
        deleted = await self._delete_runs(retention.OLD_RUNS, cutoff, batch_size)
        rows = deleted.rows
        for table, condition in retention.OLD_ROWS:
            rows += await self._delete_rows(table, condition, cutoff, batch_size)
        return rows

    async def forget_requester(
        self, user: str, *, team: str | None = None, batch_size: int = retention.BATCH_SIZE
    ) -> Forgotten:
        if team is None:
            runs, rows, value = retention.USER_RUNS, retention.USER_ROWS, user
            sql, params = "SELECT count(*) FROM runs WHERE requester = $1", [user]
        else:
            runs, rows = retention.USER_TEAM_RUNS, retention.USER_TEAM_ROWS
            value = retention.user_in_team(user, team)
            sql = "SELECT count(*) FROM runs WHERE requester = $1 AND team = $2"
            params = [user, team]
        deleted = await self._delete_runs(runs, value, batch_size)
        for table, condition in rows:
            await self._delete_rows(table, condition, value, batch_size)
        kept = await self._fetch("count a person's runs", sql, *params)
        return Forgotten(runs=deleted.runs, kept=int(kept[0][0]))

    async def forget_team(
        self, team: str, *, batch_size: int = retention.BATCH_SIZE
    ) -> TeamForgotten:
        deleted = await self._delete_runs(retention.TEAM_RUNS, team, batch_size)
        rows = deleted.rows
        for table, condition in retention.TEAM_ROWS:
            rows += await self._delete_rows(table, condition, team, batch_size)
        sql = "SELECT count(*) FROM runs WHERE team = $1"
        kept = await self._fetch("count a workspace's runs", sql, team)
        return TeamForgotten(runs=deleted.runs, rows=rows, kept=int(kept[0][0]))

    async def _delete_runs(self, condition: str, value: Any, batch_size: int) -> retention.Deleted:
        """The runs matching ``condition`` that may go, and their rows: a batch per
        statement (agent_core/stores/_retention.py). Runs another worker's purge is
        deleting are skipped, not waited for."""
        select = retention.removable_runs(condition.format(cutoff="$1", user="$1", team="$1"))
        deletes = [
            f"d{i} AS (DELETE FROM {table} WHERE {column} IN (SELECT id FROM doomed) RETURNING 1)"
            for i, (table, column) in enumerate(retention.RUN_TABLES)
        ]
        counts = " + ".join(f"(SELECT count(*) FROM d{i})" for i in range(len(deletes)))
        runs = f"d{len(deletes) - 1}"  # RUN_TABLES ends with runs
        sql = (
            f"WITH doomed AS ({select} LIMIT $2 FOR UPDATE SKIP LOCKED), {', '.join(deletes)} "
            f"SELECT (SELECT count(*) FROM {runs}) AS runs, {counts} AS rows"
        )

        async def batch() -> tuple[int, int]:
            # Idempotent: what a first attempt deleted, if it committed, a retry cannot find.
            (row,) = await self._fetch("delete ended runs", sql, value, batch_size)
            return int(row["runs"]), int(row["rows"])

        return await retention.in_batches(batch, batch_size)

    async def _delete_rows(self, table: str, condition: str, value: Any, batch_size: int) -> int:
        where = condition.format(cutoff="$1", user="$1", team="$1")
        sql = (
            f"DELETE FROM {table} WHERE ctid = ANY(ARRAY("
            f"SELECT ctid FROM {table} WHERE {where} LIMIT $2 FOR UPDATE SKIP LOCKED))"
        )

        async def batch() -> tuple[int, int]:
            count = await self._execute(
                f"delete old rows of {table}", sql, value, batch_size, idempotent=True
            )
            return count, count

        return (await retention.in_batches(batch, batch_size)).rows

    # -- DeliveryLog -------------------------------------------------------------------

    async def first_delivery(self, key: str, *, now: datetime | None = None) -> bool:
        # ON CONFLICT waits for a racing insert of the same key to commit or roll back,
        # so exactly one of any number of racing workers gets a row back.
        sql = (
            "INSERT INTO deliveries (key, token, seen_at) VALUES ($1, $2, $3) "
            "ON CONFLICT (key) DO NOTHING RETURNING key"
        )
        token = uuid.uuid4().hex
        seen_at = codec.to_utc(now or utcnow())

        async def work(conn: Any, retrying: bool) -> bool:
            if await conn.fetchval(sql, key, token, seen_at) is not None:
                return True
            # On a retry the key may be there because our first attempt landed: the
            # token on the row says whose insert it was.
            mine = "SELECT 1 FROM deliveries WHERE key = $1 AND token = $2"
            return retrying and await conn.fetchval(mine, key, token) is not None

        return await self._call("record a delivery", work, idempotent=True)

    async def forget_delivery(self, key: str) -> None:
        sql = "DELETE FROM deliveries WHERE key = $1"
        await self._execute("forget a delivery", sql, key, idempotent=True)

    # -- ParticipantStore --------------------------------------------------------------

    async def add_participant(
        self, thread: ThreadKey, user: str, *, now: datetime | None = None
    ) -> None:
        sql = (
            "INSERT INTO thread_participants (team, channel, thread_ts, user_id, seen_at) "
            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (team, channel, thread_ts, user_id) "
            "DO UPDATE SET seen_at = excluded.seen_at"
        )
        seen_at = codec.to_utc(now or utcnow())
        params = (thread.team, thread.channel, thread.thread_ts, user, seen_at)
        # Idempotent: a retry writes the same row again.
        await self._execute("record a thread participant", sql, *params, idempotent=True)

    async def participants(self, thread: ThreadKey) -> set[str]:
        sql = (
            "SELECT user_id FROM thread_participants "
            "WHERE team = $1 AND channel = $2 AND thread_ts = $3"
        )
        rows = await self._fetch(
            "read thread participants", sql, thread.team, thread.channel, thread.thread_ts
        )
        return {str(row["user_id"]) for row in rows}

    # -- GuidanceStore -----------------------------------------------------------------

    async def add_guidance(self, record: GuidanceRecord) -> bool:
        values = codec.guidance_values(record)
        assert list(values)[:2] == ["id", "run_id"]  # $1 and $2 below
        # As for a stop request: the row and its NOTIFY commit together, in one round
        # trip before the event's ack, and the owner wakes at once. The NOTIFY goes out
        # even for a reply already there (a re-delivery): a hint costs a table read.
        sql = (
            f"WITH added AS ({_insert_sql('guidance', values)} ON CONFLICT (id) DO NOTHING "
            f"RETURNING id) SELECT (SELECT count(*) FROM added), pg_notify('{STOP_CHANNEL}', $2)"
        )
        # On a retry the row may be our own first attempt's, which landed: the same
        # reply, queued at the same instant by the same author.
        mine = "SELECT 1 FROM guidance WHERE id = $1 AND queued_at = $2 AND author = $3"

        async def work(conn: Any, retrying: bool) -> bool:
            if await conn.fetchval(sql, *values.values()) == 1:
                return True
            same = (values["id"], values["queued_at"], values["author"])
            return retrying and await conn.fetchval(mine, *same) is not None

        return await self._call("commit guidance", work, idempotent=True)

    async def pending_guidance(
        self, run_ids: Collection[str] | None = None
    ) -> list[GuidanceRecord]:
        sql = "SELECT * FROM guidance WHERE status = 'queued'"
        params: list[Any] = []
        if run_ids is not None:
            sql += " AND run_id = ANY($1::text[])"
            params.append(list(run_ids))
        rows = await self._fetch("read queued guidance", sql + " ORDER BY queued_at, seq", *params)
        return [codec.guidance_from_row(r) for r in rows]

    async def mark_guidance(
        self, ids: Collection[str], status: GuidanceStatus, *, at: datetime | None = None
    ) -> set[str]:
        value = codec.guidance_settled(status)
        wanted = sorted(set(ids))
        settled_at = codec.to_utc(at or utcnow())
        if not wanted:
            return set()
        update = "UPDATE guidance SET status = $2, settled_at = $3 WHERE id = ANY($1::text[]) AND"

        async def work(conn: Any, retrying: bool) -> set[str]:
            # On a retry, a row settled to our status at exactly our time was ours.
            condition = (
                "(status = 'queued' OR (status = $2 AND settled_at = $3))"
                if retrying
                else "status = 'queued'"
            )
            rows = await conn.fetch(f"{update} {condition} RETURNING id", wanted, value, settled_at)
            return {str(row["id"]) for row in rows}

        return await self._call("mark guidance", work, idempotent=True)

    async def guidance_for(self, run_id: str) -> list[GuidanceRecord]:
        sql = "SELECT * FROM guidance WHERE run_id = $1 ORDER BY queued_at, seq"
        rows = await self._fetch("read a run's guidance", sql, run_id)
        return [codec.guidance_from_row(r) for r in rows]

    # -- ApprovalStore -----------------------------------------------------------------

    async def add_approval(self, record: ApprovalRecord) -> bool:
        values = codec.approval_values(record)
        sql = _insert_sql("approvals", values) + " ON CONFLICT (id) DO NOTHING RETURNING id"
        # On a retry the row may be our own first attempt's, which landed: the same id
        # at the same instant (ids are fresh uuids).
        mine = "SELECT 1 FROM approvals WHERE id = $1 AND requested_at = $2"

        touch = "UPDATE runs SET updated_at = $2 WHERE id = $1"

        async def work(conn: Any, retrying: bool) -> bool:
            if await conn.fetchval(sql, *values.values()) is not None:
                # A hint for App Home (it refreshes on updated_at): not worth a transaction.
                await conn.execute(touch, record.run_id, codec.to_utc(utcnow()))
                return True
            same = (values["id"], values["requested_at"])
            return retrying and await conn.fetchval(mine, *same) is not None

        return await self._call("commit an approval", work, idempotent=True)

    async def set_approval_message(self, approval_id: str, message_ts: str) -> bool:
        sql = "UPDATE approvals SET message_ts = $2 WHERE id = $1"
        changed = await self._execute(
            "note an approval message", sql, approval_id, message_ts, idempotent=True
        )
        return changed == 1

    async def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        decided_by: str | None = None,
        at: datetime | None = None,
    ) -> bool:
        value = codec.approval_decided(status)
        decided_at = codec.to_utc(at or utcnow())
        # The decision and its wake-up commit together, in one round trip before the
        # click's ack, on the stop requests' channel: the owner's watcher wakes at once.
        update = (
            "UPDATE approvals SET status = $2, decided_by = $3, decided_at = $4 "
            "WHERE id = $1 AND {condition} RETURNING run_id"
        )
        notify = (
            "WITH moved AS ({update}), "
            "touched AS (UPDATE runs SET updated_at = $4 WHERE id IN (SELECT run_id FROM moved)) "
            "SELECT (SELECT count(*) FROM moved), "
            f"(SELECT pg_notify('{STOP_CHANNEL}', run_id) FROM moved)"
        )

        async def work(conn: Any, retrying: bool) -> bool:
            # On a retry, a row decided to our status by us at our time was ours.
            condition = (
                "(status = 'requested' OR (status = $2 AND decided_by IS NOT DISTINCT FROM $3 "
                "AND decided_at = $4))"
                if retrying
                else "status = 'requested'"
            )
            sql = notify.format(update=update.format(condition=condition))
            row = await conn.fetchrow(sql, approval_id, value, decided_by, decided_at)
            return bool(row[0])

        return await self._call("decide an approval", work, idempotent=True)

    async def take_approval(self, approval_id: str, *, at: datetime | None = None) -> bool:
        taken_at = codec.to_utc(at or utcnow())
        sql = (
            "UPDATE approvals SET taken_at = $2 WHERE id = $1 AND status <> 'requested' "
            "AND (taken_at IS NULL OR taken_at = $2) RETURNING id"
        )
        return bool(await self._fetch("take an approval", sql, approval_id, taken_at))

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = await self._fetch(
            "read an approval", "SELECT * FROM approvals WHERE id = $1", approval_id
        )
        return codec.approval_from_row(rows[0]) if rows else None

    async def pending_approvals(
        self, run_ids: Collection[str] | None = None
    ) -> list[ApprovalRecord]:
        rows = await self._requested("approvals", run_ids, what="read requested approvals")
        return [codec.approval_from_row(r) for r in rows]

    async def approvals_for(self, run_id: str) -> list[ApprovalRecord]:
        sql = "SELECT * FROM approvals WHERE run_id = $1 ORDER BY requested_at, seq"
        rows = await self._fetch("read a run's approvals", sql, run_id)
        return [codec.approval_from_row(r) for r in rows]

    async def pending_approvals_under(self, run_ids: Collection[str]) -> list[ApprovalRecord]:
        sql = (
            "WITH RECURSIVE tree(id) AS (SELECT unnest($1::text[]) "
            "UNION SELECT r.id FROM runs r JOIN tree ON r.parent_id = tree.id) "
            "SELECT * FROM approvals WHERE status = 'requested' "
            "AND run_id IN (SELECT id FROM tree) ORDER BY requested_at, seq"
        )
        rows = await self._fetch("read requested approvals", sql, list(run_ids))
        return [codec.approval_from_row(r) for r in rows]

    async def ended_runs_with_open_approvals(self, *, limit: int = 100) -> list[RunRecord]:
        sql = (
            "SELECT * FROM runs WHERE id IN "
            "(SELECT run_id FROM approvals WHERE status = 'requested') "
            'AND NOT state = ANY($1::text[]) ORDER BY updated_at, id COLLATE "C" LIMIT $2'
        )
        return await self._runs("read ended runs with open approvals", sql, _LIVE, _limit(limit))

    # -- ResumeStore -------------------------------------------------------------------

    async def set_resume(
        self,
        run_id: str,
        new: ResumeState | None,
        *,
        expected: Collection[ResumeState | None],
        due_by: datetime | None = None,
        claimed_by: str | None = None,
        state: RunState | None = None,
        **changes: Any,
    ) -> bool:
        change = codec.resume_change(
            new,
            expected=expected,
            due_by=due_by,
            claimed_by=claimed_by,
            state=state,
            changes=changes,
        )
        if change.matches_nothing:
            return False
        update, params = _resume_update(run_id, change)

        async def work(conn: Any, retrying: bool) -> bool:
            return await conn.fetchval(update(retrying), *params) is not None

        return await self._call("change a run's resume", work, idempotent=True)

    async def start_continuation(
        self,
        run_id: str,
        continuation: RunRecord,
        *,
        expected: Collection[ResumeState | None],
        due_by: datetime | None = None,
        claimed_by: str | None = None,
        **changes: Any,
    ) -> bool:
        change = codec.resume_change(
            ResumeState.STARTED,
            expected=expected,
            due_by=due_by,
            claimed_by=claimed_by,
            state=None,
            changes=changes,
        )
        if change.matches_nothing:
            return False
        update, params = _resume_update(run_id, change)
        values = codec.run_values(continuation)
        insert = _insert_sql("runs", values)
        mine = "SELECT 1 FROM runs WHERE id = $1 AND continued_from IS NOT DISTINCT FROM $2"

        async def work(conn: Any, retrying: bool) -> bool:
            if retrying and await conn.fetchval(mine, continuation.id, continuation.continued_from):
                return True  # our first attempt committed, its answer was lost
            async with conn.transaction():
                if await conn.fetchval(update(False), *params) is None:
                    return False
                try:
                    await conn.execute(insert, *values.values())
                except asyncpg.UniqueViolationError as exc:  # rolls the move back too
                    raise ValueError(f"run {continuation.id} already exists") from exc
            return True

        return await self._call("start a continuation", work, idempotent=True)

    async def pending_resumes(self, *, limit: int = 100) -> list[RunRecord]:
        sql = (
            f"SELECT * FROM runs WHERE {_PENDING_RESUMES} "
            'ORDER BY COALESCE(resume_at, updated_at), id COLLATE "C" LIMIT $1'
        )
        return await self._runs("list pending resumes", sql, _limit(limit))

    async def last_user_stop(self, thread: ThreadKey) -> datetime | None:
        sql = (
            "SELECT MAX(requested_at) FROM stop_requests WHERE team = $1 AND channel = $2 "
            "AND thread_ts = $3 AND kind IN ('stop', 'abort')"
        )
        rows = await self._fetch(
            "read a thread's last stop", sql, thread.team, thread.channel, thread.thread_ts
        )
        return codec.from_db_time(rows[0][0]) if rows else None


_PENDING_RESUMES = "(resume IN ('scheduled', 'claimed') OR (state = 'blocked' AND resume IS NULL))"
"""The partial index ``ix_runs_resume_pending`` (r0007) holds exactly these rows."""


_BATCH_STOP_COLUMNS = (
    "id",
    "run_id",
    "team",
    "channel",
    "thread_ts",
    "kind",
    "requested_by",
    "requested_at",
)
_BATCH_EVENT_COLUMNS = ("run_id", "kind", "actor", "at", "detail")
_BATCH_STOPS = (
    # One statement: the delivery's key, every request whose run is still stoppable and
    # not asked already, their audit events, and a NOTIFY per run, committed together.
    "WITH taken AS ({taken}), "
    "added AS (INSERT INTO stop_requests "
    "(id, run_id, team, channel, thread_ts, kind, requested_by, status, requested_at) "
    "SELECT u.id, u.run_id, u.team, u.channel, u.thread_ts, u.kind, u.requested_by, "
    "'requested', u.requested_at "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], "
    "$7::text[], $8::timestamptz[]) "
    "AS u(id, run_id, team, channel, thread_ts, kind, requested_by, requested_at) "
    "JOIN runs r ON r.id = u.run_id "
    "WHERE EXISTS (SELECT 1 FROM taken) AND r.state = ANY($14::text[]) "
    "AND NOT EXISTS (SELECT 1 FROM stop_requests s "
    "WHERE s.run_id = u.run_id AND s.status = 'requested') "
    "RETURNING id, run_id), "
    "audited AS (INSERT INTO events (run_id, kind, actor, at, detail) "
    "SELECT e.run_id, e.kind, e.actor, e.at, e.detail::json "
    "FROM unnest($9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::text[]) "
    "AS e(run_id, kind, actor, at, detail) "
    "WHERE e.run_id IN (SELECT run_id FROM added)) "
    "SELECT (SELECT count(*) FROM taken) AS took, (SELECT array_agg(id) FROM added) AS ids, "
    f"(SELECT count(pg_notify('{STOP_CHANNEL}', run_id)) FROM added) AS woken"
)
"""``add_stop_requests``' statement; ``{taken}`` takes the delivery's key (or is ``SELECT
1`` without one)."""


def _resume_update(
    run_id: str, change: codec.ResumeChange
) -> tuple[Callable[[bool], str], list[Any]]:
    """``set_resume``'s compare-and-set: the statement (given whether it is a retry) and
    its parameters. A retry after an unknown outcome also matches the row as our own first
    attempt left it (our decision, our ``updated_at``), as in ``set_state``."""
    columns = change.columns | {"updated_at": utcnow()}
    params: list[Any] = [run_id, *columns.values()]
    marks = {c: f"${i}" for i, c in enumerate(columns, start=2)}
    assignments = ", ".join(f"{c} = {mark}" for c, mark in marks.items())
    cas = _resume_filter(change, params)
    ours = f"resume IS NOT DISTINCT FROM {marks['resume']} AND updated_at = {marks['updated_at']}"

    def sql(retrying: bool) -> str:
        condition = f"(({cas}) OR ({ours}))" if retrying else cas
        return f"UPDATE runs SET {assignments} WHERE id = $1 AND {condition} RETURNING id"

    return sql, params


def _resume_filter(change: codec.ResumeChange, params: list[Any]) -> str:
    """The compare-and-set condition of ``set_resume``; its values are appended to
    ``params``, and referred to by their positions there."""

    def mark(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    which: list[str] = []
    if change.expected:
        which.append(f"resume = ANY({mark(list(change.expected))}::text[])")
    if change.undecided:
        which.append("resume IS NULL")
    where = [f"state = ANY({mark(list(change.states))}::text[])", f"({' OR '.join(which)})"]
    if change.due_by is not None:
        due = mark(change.due_by)
        where.append(
            f"((resume = 'scheduled' AND resume_at <= {due}) "
            f"OR (resume = 'claimed' AND lease_expires_at <= {due}))"
        )
    if change.claimed_by is not None:
        where.append(f"owner = {mark(change.claimed_by)}")
    return " AND ".join(where)


def _team_filter(team: str, requester: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause (parameters ``$1``...) of a team's top-level runs, and its values."""
    if requester is None:
        return "team = $1 AND parent_id IS NULL", [team]
    return "team = $1 AND parent_id IS NULL AND requester = $2", [team, requester]


def _limit(limit: int) -> int:
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    return limit


async def _migrate(dsn: str, where: str, connect_timeout_s: float, timeout_s: float) -> None:
    """Bring the schema to head, on connections of its own (each statement may take the
    whole ``timeout_s``)."""
    await upgrade_postgres(
        lambda: asyncpg.connect(dsn, timeout=connect_timeout_s, command_timeout=timeout_s),
        where=where,
        timeout_s=timeout_s,
    )
