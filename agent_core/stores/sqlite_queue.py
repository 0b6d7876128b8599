"""The run queue's SQL on SQLite (:class:`~agent_core.ports.QueueStore`), mixed into
:class:`~agent_core.stores.sqlite.SqliteStore`.

Taking the head of the queue is one ``UPDATE ... WHERE id = (SELECT ... LIMIT 1)
RETURNING *`` inside the store's ``BEGIN IMMEDIATE`` transaction: the file's write lock
is held from the start, so two processes claiming at once are serialised and the second
finds the first's run already gone from the queue. The head is the oldest run of the
people with the fewest runs holding room (``FAIR_ORDER_SQL``). Admitting a person's run
reads whether its thread has a live run (``thread_held_sql``) and how many live runs its
person has, then inserts it, in the same kind of transaction, so two mentions at once
cannot both start a run in one thread, nor both take a person's last place.
There are no wake-ups: workers look at the queue when one of their runs ends and on
their periodic tick.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from agent_core.stores import _codec as codec
from agent_core.stores._queue import (
    CONTINUE_SQL,
    FAIR_FROM_SQL,
    FAIR_ORDER_SQL,
    STOP_PENDING_SQL,
    WAITING_SQL,
    check_admitted,
    check_waiting,
    person_runs_sql,
    thread_held_sql,
)
from agent_core.values.clock import utcnow
from agent_core.values.errors import StorageError
from agent_core.values.records import Admission

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from datetime import datetime

    from agent_core.values.records import RunRecord

__all__ = ["SqliteQueue", "one_run_per_id"]

_ORDER = "ORDER BY created_at, id"
_T = TypeVar("_T")


class SqliteQueue:
    """The queue methods; the host class provides the connection handling."""

    if TYPE_CHECKING:

        async def _write_rows(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]: ...

        async def _rows(self, action: str, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

        async def _change(self, action: str, sql: str, params: Sequence[Any]) -> int: ...

        async def create_run(self, run: RunRecord) -> None: ...

        async def _transaction(
            self, action: str, body: Callable[[sqlite3.Connection], _T]
        ) -> _T: ...

    async def enqueue_run(self, run: RunRecord) -> None:
        check_waiting(run)
        await self.create_run(run)

    async def admit_run(self, run: RunRecord, *, limit: int | None) -> Admission:
        check_admitted(run)
        values = codec.run_values(run)
        thread = run.thread
        busy = f"SELECT {thread_held_sql('?', '?', '?', '?')}"
        busy_params = codec.sqlite_params([thread.team, thread.channel, thread.thread_ts, utcnow()])
        full = f"SELECT {person_runs_sql('?', '?')} >= ?"
        full_params = (thread.team, run.requester, limit)
        insert = f"INSERT INTO runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})"
        insert_params = codec.sqlite_params(list(values.values()))

        def admit(db: sqlite3.Connection) -> Admission:
            # BEGIN IMMEDIATE: the write lock is held from the first read, so a second
            # admission for the thread (or the person) reads after this one's commit.
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run.id,)).fetchone():
                raise ValueError(f"run {run.id} already exists")
            if db.execute(busy, busy_params).fetchone()[0]:
                return Admission.THREAD_BUSY
            if limit is not None and db.execute(full, full_params).fetchone()[0]:
                return Admission.PERSON_FULL
            db.execute(insert, insert_params)
            return Admission.ACCEPTED

        with one_run_per_id(run.id):
            return await self._transaction("admit a run", admit)

    async def admit_continuation(
        self, run_id: str, by: str, *, at: datetime, limit: int | None
    ) -> bool:
        # One statement, and SQLite writes one at a time: the count cannot go stale.
        sql = CONTINUE_SQL.format(at="?", by="?", now="?", id="?")
        params: list[Any] = [at, by, utcnow(), run_id]
        if limit is not None:
            person = (
                "(SELECT team FROM runs WHERE id = ?)",
                "(SELECT requester FROM runs WHERE id = ?)",
            )
            sql += f" AND {person_runs_sql(*person)} < ?"
            params += [run_id, run_id, limit]
        return await self._change("continue a run", sql, params) == 1

    async def claim_queued(
        self, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> RunRecord | None:
        now = now or utcnow()
        sql = (
            "UPDATE runs SET state = 'running', owner = ?, lease_expires_at = ?, updated_at = ? "
            f"WHERE id = (SELECT runs.id FROM {FAIR_FROM_SQL} "
            f"WHERE {WAITING_SQL} AND NOT {STOP_PENDING_SQL} {FAIR_ORDER_SQL} LIMIT 1) "
            "RETURNING *"
        )
        expires = now + timedelta(seconds=ttl_s)
        rows = await self._write_rows("take a queued run", sql, [owner, expires, utcnow()])
        return codec.run_from_row(rows[0]) if rows else None

    async def unclaim_run(self, run_id: str, owner: str) -> bool:
        sql = (
            "UPDATE runs SET state = 'queued', owner = NULL, lease_expires_at = NULL, "
            "updated_at = ? WHERE id = ? AND owner = ? AND state = 'running'"
        )
        params = [utcnow(), run_id, owner]
        return await self._change("put a run back in the queue", sql, params) == 1

    async def requeue_run(self, run_id: str, owner: str, *, status_ts: str | None = None) -> bool:
        sql = (
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL, "
            "status_ts = coalesce(?, status_ts), updated_at = ? "
            "WHERE id = ? AND owner = ? AND state = 'queued'"
        )
        params = [status_ts, utcnow(), run_id, owner]
        return await self._change("put an accepted run in the queue", sql, params) == 1

    async def queued_runs(self, *, limit: int = 1000) -> list[RunRecord]:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        sql = f"SELECT runs.* FROM {FAIR_FROM_SQL} WHERE {WAITING_SQL} {FAIR_ORDER_SQL} LIMIT ?"
        return [codec.run_from_row(r) for r in await self._rows("read the queue", sql, [limit])]

    async def count_queued(self) -> int:
        rows = await self._rows("count the queue", f"SELECT count(*) FROM runs WHERE {WAITING_SQL}")
        return int(rows[0][0])

    async def stopped_in_queue(self, *, limit: int = 100) -> list[RunRecord]:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        sql = f"SELECT * FROM runs WHERE {WAITING_SQL} AND {STOP_PENDING_SQL} {_ORDER} LIMIT ?"
        rows = await self._rows("read stopped queued runs", sql, [limit])
        return [codec.run_from_row(r) for r in rows]


@contextlib.contextmanager
def one_run_per_id(run_id: str) -> Iterator[None]:
    """A run written twice raises ``ValueError``, the same error as MemoryStore's, so
    callers handle one."""
    try:
        yield
    except StorageError as exc:
        cause = exc.__cause__
        if (
            isinstance(cause, sqlite3.IntegrityError)
            and cause.sqlite_errorname == "SQLITE_CONSTRAINT_PRIMARYKEY"
        ):
            raise ValueError(f"run {run_id} already exists") from cause
        raise
