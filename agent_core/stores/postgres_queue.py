"""The run queue's SQL on PostgreSQL (:class:`~agent_core.ports.QueueStore`), mixed into
:class:`~agent_core.stores.postgres.PostgresStore`.

Taking the head of the queue is one statement, so one transaction: a ``SELECT ... FOR
UPDATE SKIP LOCKED`` picks the first waiting run in the fair order (the oldest of the
people with the fewest runs holding room, ``FAIR_ORDER_SQL``) that no other worker is
taking at that moment, and the ``UPDATE`` of the same statement makes it ``running``
with its owner and lease before anyone else can see it waiting. Workers claiming
together each get another run, and none waits on another's lock. Queueing a run sends
``NOTIFY threadpilot_stop, 'queue'`` (the stop channel's listener is the one every
worker already has), which wakes the workers with room at once; their periodic tick is
the backstop.

Admitting a person's run is a transaction that first takes transaction-scoped advisory
locks on its thread and on its person (their workspace and user id), then looks for a
live run in the thread (one live run per thread) and counts the person's live runs
(``MAX_RUNS_PER_USER``), and inserts the new one only if the thread is free and the
person below the limit: a second mention in the same thread or from the same person, on
any worker, waits for the first's commit and sees its run, so two cannot both start a
run in one thread nor both take the last place. (One statement would not do: under
READ COMMITTED its reads are made before it could wait on anything.)

A claim is not retried after its statement may have reached the server: a retry could
take a second run while the first, claimed unseen, is left to expire and be reconciled.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from agent_core.stores import _codec as codec
from agent_core.stores._pg import QUEUE_WAKEUP, STOP_CHANNEL
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
from agent_core.values.records import Admission

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from datetime import datetime

    from agent_core.values.records import RunRecord

__all__ = ["PostgresQueue"]

_T = TypeVar("_T")
_ORDER = "ORDER BY created_at, id"
_ANNOUNCE = f"SELECT pg_notify('{STOP_CHANNEL}', '{QUEUE_WAKEUP}')"
_ADMISSION_LOCK = 0x7470  # "tp": this app's advisory locks' first key
_LOCK = "SELECT pg_advisory_xact_lock($1, hashtext($2))"
_PERSON_RUNS = "SELECT " + person_runs_sql("$1", "$2")
_CONTINUE = CONTINUE_SQL.format(at="$2", by="$3", now="$4", id="$1") + " RETURNING id"
_PERSON_OF = "SELECT team, requester FROM runs WHERE id = $1"
_THREAD_HELD = "SELECT " + thread_held_sql("$1", "$2", "$3", "$4")
_EXISTS = "SELECT 1 FROM runs WHERE id = $1"
_SAME_RUN = "SELECT 1 FROM runs WHERE id = $1 AND created_at = $2 AND requester = $3 AND task = $4"


class PostgresQueue:
    """The queue methods; the host class provides the pool and its error handling."""

    if TYPE_CHECKING:

        async def _call(
            self,
            action: str,
            work: Callable[[Any, bool], Awaitable[_T]],
            *,
            idempotent: bool = False,
        ) -> _T: ...

        async def _fetch(self, action: str, sql: str, *params: Any) -> list[Any]: ...

        async def _execute(
            self, action: str, sql: str, *params: Any, idempotent: bool = False
        ) -> int: ...

        async def create_run(self, run: RunRecord) -> None: ...

    async def enqueue_run(self, run: RunRecord) -> None:
        check_waiting(run)
        await self.create_run(run)
        await self._announce()

    async def admit_run(self, run: RunRecord, *, limit: int | None) -> Admission:
        check_admitted(run)
        admission = await self._admit(run, limit)
        if admission is Admission.ACCEPTED and run.owner is None:
            await self._announce()
        return admission

    async def _admit(self, run: RunRecord, limit: int | None) -> Admission:
        values = codec.run_values(run)
        marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
        insert = f"INSERT INTO runs ({', '.join(values)}) VALUES ({marks})"
        thread = (run.thread.team, run.thread.channel, run.thread.thread_ts)
        person = (run.thread.team, run.requester)
        mine = (values["id"], values["created_at"], values["requester"], values["task"])

        async def work(conn: Any, retrying: bool) -> Admission:
            async with conn.transaction():
                # The thread's lock, then the person's: every admission takes them in
                # this order, so two never wait on each other.
                await conn.execute(_LOCK, _ADMISSION_LOCK, "\x1f".join(thread))
                await conn.execute(_LOCK, _ADMISSION_LOCK, "\x1f".join(person))
                if retrying and await conn.fetchval(_SAME_RUN, *mine) is not None:
                    return Admission.ACCEPTED  # our first attempt landed
                if await conn.fetchval(_EXISTS, run.id) is not None:
                    raise ValueError(f"run {run.id} already exists")
                if await conn.fetchval(_THREAD_HELD, *thread, utcnow()):
                    return Admission.THREAD_BUSY
                if limit is not None and await conn.fetchval(_PERSON_RUNS, *person) >= limit:
                    return Admission.PERSON_FULL
                try:
                    await conn.execute(insert, *values.values())
                except asyncpg.UniqueViolationError as exc:
                    raise ValueError(f"run {run.id} already exists") from exc
                return Admission.ACCEPTED

        return await self._call("admit a run", work, idempotent=True)

    async def admit_continuation(
        self, run_id: str, by: str, *, at: datetime, limit: int | None
    ) -> bool:
        async def work(conn: Any, _retrying: bool) -> bool:
            async with conn.transaction():
                person = await conn.fetchrow(_PERSON_OF, run_id)
                if person is None:
                    return False
                key = (person["team"], person["requester"])
                await conn.execute(_LOCK, _ADMISSION_LOCK, "\x1f".join(key))
                if limit is not None and await conn.fetchval(_PERSON_RUNS, *key) >= limit:
                    return False
                return await conn.fetchval(_CONTINUE, run_id, at, by, utcnow()) is not None

        # Not retried once sent: the caller reads the run to learn what became of it.
        return await self._call("continue a run", work)

    async def claim_queued(
        self, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> RunRecord | None:
        now = now or utcnow()
        sql = (
            f"WITH head AS (SELECT runs.id FROM {FAIR_FROM_SQL} "
            f"WHERE {WAITING_SQL} AND NOT {STOP_PENDING_SQL} "
            f"{FAIR_ORDER_SQL} LIMIT 1 FOR UPDATE OF runs SKIP LOCKED) "
            "UPDATE runs SET state = 'running', owner = $1, lease_expires_at = $2, "
            "updated_at = $3 FROM head WHERE runs.id = head.id RETURNING runs.*"
        )
        params = (owner, now + timedelta(seconds=ttl_s), utcnow())

        async def work(conn: Any, _retrying: bool) -> Any:
            return await conn.fetchrow(sql, *params)

        row = await self._call("take a queued run", work)
        return codec.run_from_row(row) if row is not None else None

    async def unclaim_run(self, run_id: str, owner: str) -> bool:
        sql = (
            "UPDATE runs SET state = 'queued', owner = NULL, lease_expires_at = NULL, "
            "updated_at = $3 WHERE id = $1 AND owner = $2 AND state = 'running'"
        )
        changed = await self._execute("put a run back in the queue", sql, run_id, owner, utcnow())
        return changed == 1

    async def requeue_run(self, run_id: str, owner: str, *, status_ts: str | None = None) -> bool:
        sql = (
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL, "
            "status_ts = coalesce($3, status_ts), updated_at = $4 "
            "WHERE id = $1 AND owner = $2 AND state = 'queued'"
        )
        params = (run_id, owner, status_ts, utcnow())
        if await self._execute("put an accepted run in the queue", sql, *params) != 1:
            return False
        await self._announce()
        return True

    async def _announce(self) -> None:
        """Wake the workers, after the run's write committed: a worker woken finds the
        run. A wake-up lost here costs a tick, never the run."""
        await self._execute("announce a queued run", _ANNOUNCE, idempotent=True)

    async def queued_runs(self, *, limit: int = 1000) -> list[RunRecord]:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        sql = f"SELECT runs.* FROM {FAIR_FROM_SQL} WHERE {WAITING_SQL} {FAIR_ORDER_SQL} LIMIT $1"
        return [codec.run_from_row(r) for r in await self._fetch("read the queue", sql, limit)]

    async def count_queued(self) -> int:
        sql = f"SELECT count(*) FROM runs WHERE {WAITING_SQL}"
        rows = await self._fetch("count the queue", sql)
        return int(rows[0][0])

    async def stopped_in_queue(self, *, limit: int = 100) -> list[RunRecord]:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        sql = f"SELECT * FROM runs WHERE {WAITING_SQL} AND {STOP_PENDING_SQL} {_ORDER} LIMIT $1"
        rows = await self._fetch("read stopped queued runs", sql, limit)
        return [codec.run_from_row(r) for r in rows]
