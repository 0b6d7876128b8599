"""The SQLite :class:`~agent_core.ports.Store`: one file, safe for several processes.

The default backend (``DATABASE_URL=sqlite:///./threadpilot.db``). Every process opens
its own connection to the file, configured so that processes cooperate:

- ``journal_mode=WAL``: readers never block the writer nor the writer the readers, so a
  worker's stop-request poll is not held up by another worker's checkpoint.
- ``synchronous=NORMAL``: with WAL this cannot corrupt the file, and a commit survives
  the crash or ``kill -9`` of any process (it is in the WAL, which the OS holds); only
  an OS crash or power cut can lose the last commits. ``FULL`` would add an fsync to
  every click and checkpoint for that case alone.
- every write runs in ``BEGIN IMMEDIATE``, which takes the write lock at the start.
  A deferred transaction that reads and then writes can fail with SQLITE_BUSY without
  waiting (SQLite's deadlock avoidance); an immediate one waits its turn.

Within a process there are two connections, each used by a thread of its own
(:mod:`agent_core.stores._sqlite_thread`): one writes, one reads. Each store call is one
piece of work for one of them, a whole transaction included, so the event loop makes
one hop per call, reads never queue behind writes, and the write lock is held only
while SQLite works, not while this process's event loop is busy elsewhere (other
workers' writes would wait on it). A click's stop request therefore waits for the
writes ahead of it in the thread, each a fraction of a millisecond, not for the event
loop to come round to each of their statements.

A writer that finds the file locked by another process waits, up to ``busy_timeout_s``,
in tries of at most ``BUSY_TRY_MS``; between tries it looks whether its caller has gone
(a cancelled caller returns at once, and its transaction is then rolled back instead of
committed), and when the budget is spent it fails with "the database is busy" (a
:class:`~agent_core.values.errors.StorageError`). That is the only retry that means anything
here: SQLite's other failures (a full disk, a corrupt file) do not heal in a moment, and
a statement's outcome is never in doubt as it is over a lost network connection. There
are no wake-ups: callers poll :meth:`SqliteStore.pending_stop_requests` and
:meth:`SqliteStore.pending_guidance` (every ``STOP_POLL_INTERVAL``, 250 ms by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiosqlite

from agent_core.stores import _codec as codec
from agent_core.stores import _retention as retention
from agent_core.stores._sqlite_thread import SqliteThread, Work
from agent_core.stores.migrations import TIMEOUT_S as MIGRATION_TIMEOUT_S
from agent_core.stores.migrations import upgrade_sqlite
from agent_core.stores.sql_installations import SqliteInstallations
from agent_core.stores.sqlite_queue import SqliteQueue, one_run_per_id
from agent_core.values.clock import utcnow
from agent_core.values.errors import StorageError
from agent_core.values.records import Forgotten, ResumeState, StopRequestRecord, TeamForgotten
from agent_core.values.states import LIVE_STATES, RunState

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

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

__all__ = ["BUSY_TRY_MS", "SqliteStore"]

BUSY_TRY_MS = 25
"""How long one try at a locked file may wait in SQLite's own busy handler before the
writer looks whether its caller has gone; see the module docstring."""

_BUSY_PAUSE_S = 0.005
"""Between tries, in the thread: a lock SQLite reports busy without waiting (it
does for some) must not make the store spin."""

T = TypeVar("T")

_LIVE = tuple(sorted(LIVE_STATES))


_params = codec.sqlite_params


_TAKE_DELIVERY = (
    "INSERT INTO deliveries (key, token, seen_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING"
)
"""Record a delivery's key (key, token, seen at); one row changed if it was the first."""


def _marks(count: int) -> str:
    return ", ".join("?" * count)


def _insert_sql(table: str, values: Mapping[str, Any]) -> str:
    return f"INSERT INTO {table} ({', '.join(values)}) VALUES ({_marks(len(values))})"


_TOUCH_RUN = "UPDATE runs SET updated_at = ? WHERE id = ?"
"""A change to a run's approvals is a change to the run, for App Home (it refreshes on
``updated_at``)."""


class SqliteStore(SqliteQueue, SqliteInstallations):
    """Runs, stop requests, checkpoints, events and leases in one SQLite file (the run
    queue's SQL is :class:`~agent_core.stores.sqlite_queue.SqliteQueue`'s)."""

    def __init__(
        self, writer: SqliteThread, reader: SqliteThread, path: str, busy_timeout_s: float
    ) -> None:
        """Use :meth:`open`; this only wraps the connections it has configured."""
        self._writer = writer
        self._reader = reader
        self._path = path
        self._busy_budget_s = busy_timeout_s

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        busy_timeout_s: float = 10.0,
        migrate: bool = True,
        migration_timeout_s: float = MIGRATION_TIMEOUT_S,
    ) -> SqliteStore:
        """Open (creating if needed) the database file at ``path`` and migrate it, within
        ``migration_timeout_s`` (another worker's migration of the file included)."""

        async def connect() -> aiosqlite.Connection:
            # For the migrations only. isolation_level=None: the sqlite3 module issues
            # no BEGIN of its own; the migration does.
            return await aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_s)

        opened: list[SqliteThread] = []
        try:
            await asyncio.to_thread(_probe, path)
            writer = await SqliteThread.open(path, name="sqlite-writer", timeout_s=busy_timeout_s)
            opened.append(writer)
            await writer.run(lambda work: _configure(work.conn, path, busy_timeout_s))
            if migrate:
                await upgrade_sqlite(connect, where=path, timeout_s=migration_timeout_s)
            reader = await SqliteThread.open(path, name="sqlite-reader", timeout_s=busy_timeout_s)
            opened.append(reader)
            await reader.run(lambda work: _shorten_busy_wait(work.conn))
        except sqlite3.Error as exc:
            await _close_all(opened)
            raise StorageError(_cannot_open(path, exc)) from exc
        except BaseException:
            await _close_all(opened)
            raise
        return cls(writer, reader, path, busy_timeout_s)

    async def close(self) -> None:
        """Close both connections, once the work handed to them has finished (a cancelled
        call's roll-back included)."""
        await _close_all([self._reader, self._writer])

    # -- plumbing ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except _Busy as exc:
            raise StorageError(
                f"the database is busy (another process holds the write lock on "
                f"{self._path}): could not {action} within {self._busy_budget_s:g} s; try "
                "again in a moment, and if this lasts, look for a process keeping a "
                "transaction open on that file"
            ) from exc.__cause__
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite could not {action} in {self._path}: {exc}") from exc

    async def _transaction(self, action: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` in one ``BEGIN IMMEDIATE`` transaction, in the writer's thread: committed
        if it returns, rolled back if it raises or its caller has gone."""
        budget_s = self._busy_budget_s

        def work(job: Work) -> T:
            _retry_busy(job, budget_s, lambda: job.conn.execute("BEGIN IMMEDIATE"))
            try:
                result = body(job.conn)
                if job.abandoned.is_set():
                    raise _Abandoned
                job.conn.execute("COMMIT")
            except BaseException:
                # Without a transaction (a COMMIT that went through) it fails harmlessly.
                with contextlib.suppress(sqlite3.Error):
                    job.conn.execute("ROLLBACK")
                raise
            return result

        with self._errors(action):
            return await self._writer.run(work)

    async def _change(self, action: str, sql: str, params: Sequence[Any]) -> int:
        """Run one write statement in its own transaction; returns the rows it changed."""
        values = _params(params)
        return await self._transaction(action, lambda db: db.execute(sql, values).rowcount)

    async def _write_rows(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run one write statement (``... RETURNING``) in its own transaction; its rows."""
        values = _params(params)
        return await self._transaction(action, lambda db: db.execute(sql, values).fetchall())

    async def _rows(self, action: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A query's rows, read in the reader's thread."""
        values = _params(params)
        budget_s = self._busy_budget_s

        def work(job: Work) -> list[Any]:
            # WAL readers are not blocked by a writer, but can find the file busy for a
            # moment (another process recovering it): the same budget applies.
            return _retry_busy(job, budget_s, lambda: job.conn.execute(sql, values).fetchall())

        with self._errors(action):
            return await self._reader.run(work)

    async def _insert(self, action: str, table: str, values: Mapping[str, Any]) -> None:
        await self._change(action, _insert_sql(table, values), list(values.values()))

    # -- RunStore ----------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        values = codec.run_values(run)
        with one_run_per_id(run.id):
            await self._change("create a run", _insert_sql("runs", values), list(values.values()))

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._rows("read a run", "SELECT * FROM runs WHERE id = ?", [run_id])
        return codec.run_from_row(rows[0]) if rows else None

    async def set_state(
        self,
        run_id: str,
        new: RunState,
        *,
        expected: Collection[RunState],
        **changes: Any,
    ) -> bool:
        change = codec.state_change(new, expected=expected, changes=changes)
        states = change.expected
        if not states:
            return False
        columns = change.columns | {"updated_at": utcnow()}
        assignments = ", ".join(f"{c} = ?" for c in columns)
        sql = f"UPDATE runs SET {assignments} WHERE id = ? AND state IN ({_marks(len(states))})"
        params = [*columns.values(), run_id, *states]
        return await self._change("change a run's state", sql, params) == 1

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        values = codec.checkpoint_values(checkpoint)
        sql = _insert_sql("checkpoints", values) + (
            " ON CONFLICT (run_id) DO UPDATE SET turn = excluded.turn, "
            "messages = excluded.messages, created_at = excluded.created_at, "
            "started = excluded.started, spent = excluded.spent"
        )
        await self._change("save a checkpoint", sql, list(values.values()))

    async def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        sql = "SELECT * FROM checkpoints WHERE run_id = ?"
        rows = await self._rows("read a checkpoint", sql, [run_id])
        return codec.checkpoint_from_row(rows[0]) if rows else None

    async def record_event(self, event: AuditEvent) -> None:
        await self._insert("record an audit event", "events", codec.event_values(event))

    async def events_for(self, run_id: str) -> list[AuditEvent]:
        sql = "SELECT * FROM events WHERE run_id = ? ORDER BY id"
        rows = await self._rows("read audit events", sql, [run_id])
        return [codec.event_from_row(r) for r in rows]

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
            where.append(f"state IN ({_marks(len(query.states))})")
            params += query.states
        for column, value in query.equal.items():
            where.append(f"{column} = ?")
            params.append(value)
        if query.final_posted is not None:
            where.append(f"final_posted_at IS {'NOT ' if query.final_posted else ''}NULL")
        if query.top_level is not None:
            where.append(f"parent_id IS {'' if query.top_level else 'NOT '}NULL")
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, id LIMIT ?"
        rows = await self._rows("find runs", sql, [*params, query.limit])
        return [codec.run_from_row(r) for r in rows]

    async def update_run(self, run_id: str, **changes: Any) -> bool:
        columns = codec.run_updates(changes)
        if not columns:
            return await self.get_run(run_id) is not None
        columns["updated_at"] = utcnow()
        assignments = ", ".join(f"{c} = ?" for c in columns)
        sql = f"UPDATE runs SET {assignments} WHERE id = ?"
        return await self._change("update a run", sql, [*columns.values(), run_id]) == 1

    async def stop_requests_for(self, run_id: str) -> list[StopRequestRecord]:
        sql = "SELECT * FROM stop_requests WHERE run_id = ? ORDER BY requested_at, seq"
        rows = await self._rows("read a run's stop requests", sql, [run_id])
        return [codec.stop_from_row(r) for r in rows]

    # -- DashboardQueries --------------------------------------------------------------

    async def team_live_runs(
        self, team: str, *, requester: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        where, params = _team_filter(team, requester)
        sql = (
            f"SELECT * FROM runs WHERE {where} AND state IN ({_marks(len(_LIVE))}) "
            "ORDER BY created_at DESC, id DESC LIMIT ?"
        )
        rows = await self._rows("list a team's live runs", sql, [*params, *_LIVE, _limit(limit)])
        return [codec.run_from_row(r) for r in rows]

    async def team_ended_runs(
        self, team: str, *, requester: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        where, params = _team_filter(team, requester)
        sql = (
            f"SELECT * FROM runs WHERE {where} AND state NOT IN ({_marks(len(_LIVE))}) "
            "ORDER BY updated_at DESC, id DESC LIMIT ?"
        )
        rows = await self._rows("list a team's ended runs", sql, [*params, *_LIVE, _limit(limit)])
        return [codec.run_from_row(r) for r in rows]

    async def runs_changed_since(self, since: datetime, *, limit: int = 1000) -> list[RunRecord]:
        sql = "SELECT * FROM runs WHERE updated_at >= ? ORDER BY updated_at, id LIMIT ?"
        rows = await self._rows("find changed runs", sql, [since, _limit(limit)])
        return [codec.run_from_row(r) for r in rows]

    async def live_children(self, parent_ids: Collection[str]) -> list[RunRecord]:
        wanted = sorted(set(parent_ids))
        if not wanted:
            return []
        sql = (
            f"SELECT * FROM runs WHERE parent_id IN ({_marks(len(wanted))}) "
            f"AND state IN ({_marks(len(_LIVE))}) ORDER BY created_at, id"
        )
        rows = await self._rows("list live sub-agents", sql, [*wanted, *_LIVE])
        return [codec.run_from_row(r) for r in rows]

    async def checkpoint_turns(self, run_ids: Collection[str]) -> dict[str, int]:
        wanted = sorted(set(run_ids))
        if not wanted:
            return {}
        sql = f"SELECT run_id, turn FROM checkpoints WHERE run_id IN ({_marks(len(wanted))})"
        rows = await self._rows("read checkpoint turns", sql, wanted)
        return {str(r["run_id"]): int(r["turn"]) for r in rows}

    async def events_of_kind(
        self, run_ids: Collection[str], kinds: Collection[str]
    ) -> list[AuditEvent]:
        runs, wanted = sorted(set(run_ids)), sorted(set(kinds))
        if not runs or not wanted:
            return []
        sql = (
            f"SELECT * FROM events WHERE run_id IN ({_marks(len(runs))}) "
            f"AND kind IN ({_marks(len(wanted))}) ORDER BY at, id"
        )
        rows = await self._rows("read audit events", sql, [*runs, *wanted])
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
        await self._insert("commit a stop request", "stop_requests", codec.stop_values(record))
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
        # The delivery's key and the request in one transaction, one hop to the writer.
        take = _TAKE_DELIVERY, _params([delivery, uuid.uuid4().hex, record.requested_at])
        insert = _insert_sql("stop_requests", values), _params(list(values.values()))

        def commit(db: sqlite3.Connection) -> bool:
            if db.execute(*take).rowcount == 0:
                return False  # some worker took this delivery: nothing is written
            db.execute(*insert)
            return True

        taken = await self._transaction("commit a stop request", commit)
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
        columns = list(rows[0])
        insert = (
            f"INSERT INTO stop_requests ({', '.join(columns)}) SELECT {_marks(len(columns))} "
            f"WHERE EXISTS (SELECT 1 FROM runs WHERE id = ? AND state IN "
            f"({_marks(len(codec.STOPPABLE))})) AND NOT EXISTS (SELECT 1 FROM stop_requests "
            "WHERE run_id = ? AND status = 'requested')"
        )
        take = _params([delivery, uuid.uuid4().hex, utcnow()])

        def commit(db: sqlite3.Connection) -> list[StopRequestRecord] | None:
            if delivery is not None and db.execute(_TAKE_DELIVERY, take).rowcount == 0:
                return None
            added = [
                request
                for request, values in zip(requests, rows, strict=True)
                if db.execute(
                    insert,
                    _params([*values.values(), request.run_id, *codec.STOPPABLE, request.run_id]),
                ).rowcount
            ]
            runs = {r.run_id for r in added}
            for values in event_rows:
                if values["run_id"] in runs:
                    db.execute(_insert_sql("events", values), _params(list(values.values())))
            return added

        return await self._transaction("commit stop requests", commit)

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
        params: list[str] = []
        if run_ids is not None:
            params = list(run_ids)
            if not params:
                return []
            sql += f" AND run_id IN ({_marks(len(params))})"
        return await self._rows(what, sql + " ORDER BY requested_at, seq", params)

    async def mark_stop_handled(self, request_id: str) -> bool:
        sql = (
            "UPDATE stop_requests SET status = 'handled', handled_at = ? "
            "WHERE id = ? AND status = 'requested'"
        )
        return await self._change("mark a stop request handled", sql, [utcnow(), request_id]) == 1

    # -- LeaseStore --------------------------------------------------------------------

    async def claim_run(
        self, run_id: str, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> bool:
        now = now or utcnow()
        sql = (
            "UPDATE runs SET owner = ?, lease_expires_at = ? "
            f"WHERE id = ? AND state IN ({_marks(len(_LIVE))}) AND (owner IS NULL "
            "OR owner = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
        )
        expires = now + timedelta(seconds=ttl_s)
        params = [owner, expires, run_id, *_LIVE, owner, now]
        return await self._change("claim a run", sql, params) == 1

    async def release_run(self, run_id: str, owner: str) -> bool:
        sql = "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE id = ? AND owner = ?"
        return await self._change("release a run", sql, [run_id, owner]) == 1

    async def heartbeat(
        self, owner: str, run_ids: Collection[str], ttl_s: float, *, now: datetime | None = None
    ) -> set[str]:
        wanted = sorted(set(run_ids))
        if not wanted:
            return set()
        expires = (now or utcnow()) + timedelta(seconds=ttl_s)
        sql = (
            "UPDATE runs SET lease_expires_at = ? "
            f"WHERE owner = ? AND state IN ({_marks(len(_LIVE))}) "
            f"AND id IN ({_marks(len(wanted))}) RETURNING id"
        )
        rows = await self._write_rows("extend leases", sql, [expires, owner, *_LIVE, *wanted])
        return {str(row[0]) for row in rows}

    async def expired_runs(self, now: datetime | None = None) -> list[RunRecord]:
        sql = (
            f"SELECT * FROM runs WHERE state IN ({_marks(len(_LIVE))}) "
            "AND lease_expires_at <= ? ORDER BY created_at, id"
        )
        rows = await self._rows("find expired leases", sql, [*_LIVE, now or utcnow()])
        return [codec.run_from_row(r) for r in rows]

    async def live_runs(self, owner: str | None = None) -> list[RunRecord]:
        sql = f"SELECT * FROM runs WHERE state IN ({_marks(len(_LIVE))})"
        params: list[Any] = list(_LIVE)
        if owner is not None:
            sql += " AND owner = ?"
            params.append(owner)
        rows = await self._rows("list live runs", sql + " ORDER BY created_at, id", params)
        return [codec.run_from_row(r) for r in rows]

    # -- RetentionStore ----------------------------------------------------------------

    async def purge(self, older_than: datetime, *, batch_size: int = retention.BATCH_SIZE) -> int:
        cutoff = codec.sqlite_time(older_than)
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
            sql, params = "SELECT count(*) FROM runs WHERE requester = ?", [user]
        else:
            runs, rows = retention.USER_TEAM_RUNS, retention.USER_TEAM_ROWS
            value = retention.user_in_team(user, team)
            sql = "SELECT count(*) FROM runs WHERE requester = ? AND team = ?"
            params = [user, team]
        deleted = await self._delete_runs(runs, value, batch_size)
        for table, condition in rows:
            await self._delete_rows(table, condition, value, batch_size)
        kept = await self._rows("count a person's runs", sql, params)
        return Forgotten(runs=deleted.runs, kept=int(kept[0][0]))

    async def forget_team(
        self, team: str, *, batch_size: int = retention.BATCH_SIZE
    ) -> TeamForgotten:
        deleted = await self._delete_runs(retention.TEAM_RUNS, team, batch_size)
        rows = deleted.rows
        for table, condition in retention.TEAM_ROWS:
            rows += await self._delete_rows(table, condition, team, batch_size)
        sql = "SELECT count(*) FROM runs WHERE team = ?"
        kept = await self._rows("count a workspace's runs", sql, [team])
        return TeamForgotten(runs=deleted.runs, rows=rows, kept=int(kept[0][0]))

    async def _delete_runs(self, condition: str, value: Any, batch_size: int) -> retention.Deleted:
        """The runs matching ``condition`` that may go, and their rows, a batch per
        transaction (agent_core/stores/_retention.py)."""
        select = (
            retention.removable_runs(condition.format(cutoff="?", user="?", team="?")) + " LIMIT ?"
        )

        def batch(db: sqlite3.Connection) -> tuple[int, int]:
            ids = [row[0] for row in db.execute(select, (value, batch_size))]
            if not ids:
                return 0, 0
            marks = _marks(len(ids))
            rows = sum(
                db.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids).rowcount
                for table, column in retention.RUN_TABLES
            )
            return len(ids), rows

        return await retention.in_batches(
            lambda: self._transaction("delete ended runs", batch), batch_size
        )

    async def _delete_rows(self, table: str, condition: str, value: Any, batch_size: int) -> int:
        where = condition.format(cutoff="?", user="?", team="?")
        sql = (
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {where} LIMIT ?)"
        )

        async def batch() -> tuple[int, int]:
            count = await self._change(f"delete old rows of {table}", sql, [value, batch_size])
            return count, count

        return (await retention.in_batches(batch, batch_size)).rows

    # -- DeliveryLog -------------------------------------------------------------------

    async def first_delivery(self, key: str, *, now: datetime | None = None) -> bool:
        # One process holds the write lock at a time, so the statement's own answer
        # (a row inserted or not) is the whole truth.
        params = [key, uuid.uuid4().hex, now or utcnow()]
        return await self._change("record a delivery", _TAKE_DELIVERY, params) == 1

    async def forget_delivery(self, key: str) -> None:
        sql = "DELETE FROM deliveries WHERE key = ?"
        await self._change("forget a delivery", sql, [key])

    # -- ParticipantStore --------------------------------------------------------------

    async def add_participant(
        self, thread: ThreadKey, user: str, *, now: datetime | None = None
    ) -> None:
        sql = (
            "INSERT INTO thread_participants (team, channel, thread_ts, user_id, seen_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (team, channel, thread_ts, user_id) "
            "DO UPDATE SET seen_at = excluded.seen_at"
        )
        seen_at = codec.to_utc(now or utcnow())
        params = [thread.team, thread.channel, thread.thread_ts, user, seen_at]
        await self._change("record a thread participant", sql, params)

    async def participants(self, thread: ThreadKey) -> set[str]:
        sql = (
            "SELECT user_id FROM thread_participants "
            "WHERE team = ? AND channel = ? AND thread_ts = ?"
        )
        params = [thread.team, thread.channel, thread.thread_ts]
        return {str(r[0]) for r in await self._rows("read thread participants", sql, params)}

    # -- GuidanceStore -----------------------------------------------------------------

    async def add_guidance(self, record: GuidanceRecord) -> bool:
        values = codec.guidance_values(record)
        sql = _insert_sql("guidance", values) + " ON CONFLICT (id) DO NOTHING"
        return await self._change("commit guidance", sql, list(values.values())) == 1

    async def pending_guidance(
        self, run_ids: Collection[str] | None = None
    ) -> list[GuidanceRecord]:
        sql = "SELECT * FROM guidance WHERE status = 'queued'"
        params: list[str] = []
        if run_ids is not None:
            params = list(run_ids)
            if not params:
                return []
            sql += f" AND run_id IN ({_marks(len(params))})"
        rows = await self._rows("read queued guidance", sql + " ORDER BY queued_at, seq", params)
        return [codec.guidance_from_row(r) for r in rows]

    async def mark_guidance(
        self, ids: Collection[str], status: GuidanceStatus, *, at: datetime | None = None
    ) -> set[str]:
        value = codec.guidance_settled(status)
        wanted = sorted(set(ids))
        settled_at = at or utcnow()
        codec.to_utc(settled_at)  # a naive time is refused before the store is touched
        if not wanted:
            return set()
        sql = (
            "UPDATE guidance SET status = ?, settled_at = ? "
            f"WHERE status = 'queued' AND id IN ({_marks(len(wanted))}) RETURNING id"
        )
        rows = await self._write_rows("mark guidance", sql, [value, settled_at, *wanted])
        return {str(row[0]) for row in rows}

    async def guidance_for(self, run_id: str) -> list[GuidanceRecord]:
        sql = "SELECT * FROM guidance WHERE run_id = ? ORDER BY queued_at, seq"
        rows = await self._rows("read a run's guidance", sql, [run_id])
        return [codec.guidance_from_row(r) for r in rows]

    # -- ApprovalStore -----------------------------------------------------------------

    async def add_approval(self, record: ApprovalRecord) -> bool:
        values = codec.approval_values(record)
        sql = _insert_sql("approvals", values) + " ON CONFLICT (id) DO NOTHING"
        params = _params(list(values.values()))
        bump = _params([utcnow(), record.run_id])

        def add(db: sqlite3.Connection) -> bool:
            if db.execute(sql, params).rowcount != 1:
                return False
            db.execute(_TOUCH_RUN, bump)
            return True

        return await self._transaction("commit an approval", add)

    async def set_approval_message(self, approval_id: str, message_ts: str) -> bool:
        sql = "UPDATE approvals SET message_ts = ? WHERE id = ?"
        return await self._change("note an approval message", sql, [message_ts, approval_id]) == 1

    async def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        decided_by: str | None = None,
        at: datetime | None = None,
    ) -> bool:
        value = codec.approval_decided(status)
        decided_at = at or utcnow()
        codec.to_utc(decided_at)  # a naive time is refused before the store is touched
        sql = (
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ? "
            "WHERE id = ? AND status = 'requested' RETURNING run_id"
        )
        params = _params([value, decided_by, decided_at, approval_id])
        now = utcnow()

        def decide(db: sqlite3.Connection) -> bool:
            moved = db.execute(sql, params).fetchall()
            if not moved:
                return False
            db.execute(_TOUCH_RUN, _params([now, moved[0][0]]))
            return True

        return await self._transaction("decide an approval", decide)

    async def take_approval(self, approval_id: str, *, at: datetime | None = None) -> bool:
        taken_at = at or utcnow()
        codec.to_utc(taken_at)
        sql = (
            "UPDATE approvals SET taken_at = ? "
            "WHERE id = ? AND status <> 'requested' AND taken_at IS NULL"
        )
        return await self._change("take an approval", sql, [taken_at, approval_id]) == 1

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        sql = "SELECT * FROM approvals WHERE id = ?"
        rows = await self._rows("read an approval", sql, [approval_id])
        return codec.approval_from_row(rows[0]) if rows else None

    async def pending_approvals(
        self, run_ids: Collection[str] | None = None
    ) -> list[ApprovalRecord]:
        rows = await self._requested("approvals", run_ids, what="read requested approvals")
        return [codec.approval_from_row(r) for r in rows]

    async def approvals_for(self, run_id: str) -> list[ApprovalRecord]:
        sql = "SELECT * FROM approvals WHERE run_id = ? ORDER BY requested_at, seq"
        rows = await self._rows("read a run's approvals", sql, [run_id])
        return [codec.approval_from_row(r) for r in rows]

    async def pending_approvals_under(self, run_ids: Collection[str]) -> list[ApprovalRecord]:
        wanted = sorted(set(run_ids))
        if not wanted:
            return []
        sql = (
            f"WITH RECURSIVE tree(id) AS (SELECT id FROM runs WHERE id IN ({_marks(len(wanted))}) "
            "UNION SELECT r.id FROM runs r JOIN tree ON r.parent_id = tree.id) "
            "SELECT * FROM approvals WHERE status = 'requested' "
            "AND run_id IN (SELECT id FROM tree) ORDER BY requested_at, seq"
        )
        rows = await self._rows("read requested approvals", sql, wanted)
        return [codec.approval_from_row(r) for r in rows]

    async def ended_runs_with_open_approvals(self, *, limit: int = 100) -> list[RunRecord]:
        sql = (
            "SELECT * FROM runs WHERE id IN "
            "(SELECT run_id FROM approvals WHERE status = 'requested') "
            f"AND state NOT IN ({_marks(len(_LIVE))}) ORDER BY updated_at, id LIMIT ?"
        )
        rows = await self._rows("read ended runs with open approvals", sql, [*_LIVE, _limit(limit)])
        return [codec.run_from_row(r) for r in rows]

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
        sql, params = _resume_update(run_id, change)
        return await self._change("change a run's resume", sql, params) == 1

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
        insert = _insert_sql("runs", values), _params(list(values.values()))

        def start(db: sqlite3.Connection) -> bool:
            if db.execute(update, _params(params)).rowcount != 1:
                return False
            db.execute(*insert)  # if it fails, the resume's move is rolled back with it
            return True

        with one_run_per_id(continuation.id):
            return await self._transaction("start a continuation", start)

    async def pending_resumes(self, *, limit: int = 100) -> list[RunRecord]:
        sql = (
            f"SELECT * FROM runs WHERE {_PENDING_RESUMES} "
            "ORDER BY COALESCE(resume_at, updated_at), id LIMIT ?"
        )
        rows = await self._rows("list pending resumes", sql, [_limit(limit)])
        return [codec.run_from_row(r) for r in rows]

    async def last_user_stop(self, thread: ThreadKey) -> datetime | None:
        sql = (
            "SELECT MAX(requested_at) FROM stop_requests WHERE team = ? AND channel = ? "
            "AND thread_ts = ? AND kind IN ('stop', 'abort')"
        )
        params = [thread.team, thread.channel, thread.thread_ts]
        rows = await self._rows("read a thread's last stop", sql, params)
        return codec.from_db_time(rows[0][0]) if rows else None


_PENDING_RESUMES = "(resume IN ('scheduled', 'claimed') OR (state = 'blocked' AND resume IS NULL))"
"""The partial index ``ix_runs_resume_pending`` (r0007) holds exactly these rows."""


def _resume_update(run_id: str, change: codec.ResumeChange) -> tuple[str, list[Any]]:
    """``set_resume``'s compare-and-set: the statement and its parameters."""
    columns = change.columns | {"updated_at": utcnow()}
    assignments = ", ".join(f"{c} = ?" for c in columns)
    where, params = _resume_filter(change)
    sql = f"UPDATE runs SET {assignments} WHERE id = ? AND {where}"
    return sql, [*columns.values(), run_id, *params]


def _resume_filter(change: codec.ResumeChange) -> tuple[str, list[Any]]:
    """The WHERE clause (after ``id = ?``) of ``set_resume``'s compare-and-set."""
    which: list[str] = []
    params: list[Any] = [*change.states]
    if change.expected:
        which.append(f"resume IN ({_marks(len(change.expected))})")
        params += change.expected
    if change.undecided:
        which.append("resume IS NULL")
    where = [f"state IN ({_marks(len(change.states))})", f"({' OR '.join(which)})"]
    if change.due_by is not None:
        where.append(
            "((resume = 'scheduled' AND resume_at <= ?) "
            "OR (resume = 'claimed' AND lease_expires_at <= ?))"
        )
        params += [change.due_by, change.due_by]
    if change.claimed_by is not None:
        where.append("owner = ?")
        params.append(change.claimed_by)
    return " AND ".join(where), params


def _team_filter(team: str, requester: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of a team's top-level runs."""
    if requester is None:
        return "team = ? AND parent_id IS NULL", [team]
    return "team = ? AND parent_id IS NULL AND requester = ?", [team, requester]


def _limit(limit: int) -> int:
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    return limit


class _Busy(Exception):
    """Another process held the write lock for the whole busy budget."""


class _Abandoned(Exception):
    """The caller has gone (cancelled): nothing is committed, and nobody reads this."""


def _retry_busy(job: Work, budget_s: float, attempt: Callable[[], T]) -> T:
    """``attempt()``, tried again while the file is busy, until the budget is spent
    (:class:`_Busy`) or the caller has gone (:class:`_Abandoned`). Each try waits at most
    :data:`BUSY_TRY_MS` in SQLite's own busy handler."""
    started = time.monotonic()
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            if job.abandoned.is_set():
                raise _Abandoned from exc
            if time.monotonic() - started >= budget_s:
                raise _Busy from exc
        time.sleep(_BUSY_PAUSE_S)


def _configure(conn: sqlite3.Connection, path: str, busy_timeout_s: float) -> None:
    """The writer's settings: WAL and ``synchronous=NORMAL`` (module doc), then short busy
    tries (:func:`_retry_busy` makes up the budget)."""
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    mode = _switch_to_wal(conn, busy_timeout_s)
    if mode.lower() != "wal":
        raise StorageError(
            f"SQLite could not switch {path} to WAL mode (it is in {mode!r} mode); "
            "keep the database on a local filesystem, or use PostgreSQL"
        )
    conn.execute("PRAGMA synchronous = NORMAL")
    _shorten_busy_wait(conn)


def _shorten_busy_wait(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TRY_MS}")


def _switch_to_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> str:
    """Set WAL mode (a no-op once the file is in it); returns the mode now in force.

    Leaving rollback mode needs the file to itself, and SQLite answers SQLITE_BUSY at
    once instead of using the busy timeout. That only happens while several workers
    create the same new file together, so a short retry loop (in the writer's thread)
    settles it.
    """
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.005
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(row[0]) if row else "unknown"
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorname != "SQLITE_BUSY" or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


async def _close_all(threads: Sequence[SqliteThread]) -> None:
    for thread in threads:
        await thread.close()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY (another connection has the lock) and its extended codes, or
    SQLITE_LOCKED; "database is locked" in the message."""
    return (exc.sqlite_errorname or "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def _probe(path: str) -> None:
    """Open and close the file once (in a worker thread); the usual mistakes in
    ``DATABASE_URL`` come out named, not as SQLite's "unable to open database file"."""
    try:
        sqlite3.connect(path).close()
    except sqlite3.Error as exc:
        target = Path(path)
        if target.is_dir():
            problem = "it is a directory; name a file in it, e.g. sqlite:///dir/threadpilot.db"
            raise StorageError(f"SQLite could not open {path}: {problem}") from exc
        folder = target.absolute().parent
        if not folder.is_dir():
            problem = f"the directory {folder} does not exist; create it, or fix DATABASE_URL"
            raise StorageError(f"SQLite could not open {path}: {problem}") from exc
        raise


def _cannot_open(path: str, exc: sqlite3.Error) -> str:
    return (
        f"SQLite could not open {path}: {exc}; check that the directory exists and is "
        "writable, and that DATABASE_URL points at the intended file"
    )
