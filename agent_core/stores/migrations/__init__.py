"""The schema, as versioned alembic migrations that every store applies when it opens.

Revisions are the files in ``versions/`` (shipped inside the package, so the wheel
carries them); there is no ``alembic.ini`` and no ``env.py``: :func:`upgrade` drives
alembic's programmatic API on a SQLAlchemy async engine through ``run_sync``, so one
migration script serves aiosqlite and asyncpg alike. Add a revision as
``versions/rNNNN_what.py`` with ``revision``/``down_revision`` set, written with ``op``
and frozen (a migration never imports application code, which keeps changing).

A history can be large (``runs`` holds every task), and workers still on the previous
version keep serving clicks while a new one migrates, so an upgrade never holds a table
for long:

- Each revision commits on its own (alembic's ``transaction_per_migration``), with its
  version stamp. A revision that rewrites rows does it in batches, each committed
  (inside ``op.get_context().autocommit_block()``), and builds an index
  on a table that may be large ``CONCURRENTLY`` on PostgreSQL (which must run outside a
  transaction). Such a revision is written to be run again from the start: a worker
  killed halfway leaves its committed batches, and the next one finishes the job.
- The whole upgrade has one deadline, ``timeout_s`` (``MIGRATION_TIMEOUT``), not the
  per-statement timeout of ordinary queries: a long history takes what it takes.

Several workers start at once, so an upgrade must be safe to race. One of them migrates
while holding a lock that spans its transactions; the others wait for it (up to the
same deadline), then find the version table at head and do nothing:

- PostgreSQL: a session advisory lock, tried every :data:`LOCK_POLL_S` (a waiter blocked
  inside a statement would hold a snapshot, and ``CREATE INDEX CONCURRENTLY`` waits for
  every older snapshot: the two would wait for each other).
- SQLite: a lock file beside the database (``<file>.migrate-lock``, held with the OS's
  file locks, released if the process dies), and ``BEGIN IMMEDIATE`` for each
  transaction, which takes the write lock up front.
- Within one process, alembic's ``op`` and ``context`` are module-level proxies, so two
  upgrades must not interleave on one event loop: a per-loop lock serialises them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationStep
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from filelock import AsyncFileLock
from sqlalchemy import event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from agent_core.stores.defaults import MIGRATION_TIMEOUT_S
from agent_core.values.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from alembic.runtime.migration import MigrationContext, RevisionStep
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    _Lock = Callable[[AsyncConnection], contextlib.AbstractAsyncContextManager[None]]

__all__ = [
    "LOCK_POLL_S",
    "TIMEOUT_S",
    "VERSION_TABLE",
    "head_revision",
    "upgrade_postgres",
    "upgrade_sqlite",
]

VERSION_TABLE = "threadpilot_schema_version"
"""Not alembic's default ``alembic_version``: the database may be shared with another
application that uses alembic too."""

TIMEOUT_S = MIGRATION_TIMEOUT_S
"""The default deadline of a whole upgrade (:mod:`agent_core.stores.defaults`)."""

LOCK_POLL_S = 0.2
"""How often a waiting worker tries the migration lock again."""

# An arbitrary constant, so every threadpilot worker contends for the same lock.
_PG_LOCK_KEY = 7_405_142_690_301

_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def upgrade_postgres(
    connect: Callable[[], Awaitable[Any]],
    *,
    where: str,
    to: str = "heads",
    timeout_s: float = TIMEOUT_S,
) -> None:
    """Bring a PostgreSQL database to head; ``connect`` returns an asyncpg connection
    (whose own command timeout should be no shorter than ``timeout_s``).

    ``where`` names the database in error messages. ``to`` stops at an older revision,
    for tests that need a database as an earlier version left it; it never downgrades.
    ``timeout_s`` bounds the whole upgrade, waiting for another worker's included.
    Raises :class:`StorageError`.
    """
    engine = create_async_engine("postgresql+asyncpg://", async_creator=connect, poolclass=NullPool)
    await _upgrade(engine, lock=_advisory_lock, where=where, to=to, timeout_s=timeout_s)


async def upgrade_sqlite(
    connect: Callable[[], Awaitable[Any]],
    *,
    where: str,
    to: str = "heads",
    timeout_s: float = TIMEOUT_S,
) -> None:
    """Bring a SQLite file to head (or to revision ``to``, as in :func:`upgrade_postgres`);
    ``connect`` returns an aiosqlite connection opened with ``isolation_level=None`` (so
    that SQLAlchemy's BEGIN below is the only one). ``where`` is the file's path: its lock
    file goes beside it."""
    engine = create_async_engine("sqlite+aiosqlite://", async_creator=connect, poolclass=NullPool)

    @event.listens_for(engine.sync_engine, "begin")
    def _begin_immediate(conn: Connection) -> None:
        # Not in an autocommit block: there, a revision's batches begin their own.
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    @event.listens_for(engine.sync_engine, "invalidate")
    def _release_write_lock(dbapi_connection: Any, _record: object, _exc: object) -> None:
        # A cancelled upgrade's connection is invalidated, then closed. Closing it leaves
        # a "zombie" that keeps its transaction, and so the file's write lock, until
        # the garbage collector finalizes the cut statement: the next start-up would
        # wait out its busy timeout. Rolling back first releases the lock at once.
        with contextlib.suppress(Exception):
            dbapi_connection.rollback()

    lock = AsyncFileLock(f"{where}.migrate-lock", poll_interval=LOCK_POLL_S)

    @contextlib.asynccontextmanager
    async def file_lock(_conn: AsyncConnection) -> AsyncIterator[None]:
        async with lock:
            yield

    await _upgrade(engine, lock=file_lock, where=where, to=to, timeout_s=timeout_s)


async def head_revision() -> str:
    """The newest revision shipped with this code."""
    script = await asyncio.to_thread(_scripts)
    head = script.get_current_head()
    assert head is not None
    return head


async def _upgrade(
    engine: AsyncEngine, *, lock: _Lock, where: str, to: str, timeout_s: float
) -> None:
    try:
        # Reading and executing the revision files is file work: off the event loop.
        script = await asyncio.to_thread(_scripts)
        async with (
            _loop_lock(),
            asyncio.timeout(timeout_s),
            engine.connect() as conn,
            lock(conn),
        ):
            await _run(conn, script, to)
    except TimeoutError as exc:
        raise StorageError(
            f"the schema of {where} was not migrated within {timeout_s:g} s (waiting for "
            "another worker's migration included); raise MIGRATION_TIMEOUT for a large "
            "history, and start again: what was migrated so far is kept"
        ) from exc
    except (RevisionError, CommandError) as exc:
        raise StorageError(
            f"the schema of {where} is at a revision this threadpilot does not know ({exc}); "
            "it was migrated by a newer version: run that version or a later one"
        ) from exc
    except SQLAlchemyError as exc:
        # ``orig`` is the driver's own error, without SQLAlchemy's wrapping text.
        cause = getattr(exc, "orig", None) or exc
        raise StorageError(f"could not migrate the schema of {where}: {cause}") from exc
    finally:
        await engine.dispose()


async def _run(conn: AsyncConnection, script: ScriptDirectory, to: str) -> None:
    """The upgrade, on ``conn``; cancelled, it raises the cancellation, not what
    alembic's clean-up of the cut transaction raised on top of it (PendingRollbackError)."""
    try:
        await conn.run_sync(_upgrade_to, script, to)
    except SQLAlchemyError as exc:
        cancelled = _cancellation(exc)
        if cancelled is None:
            raise
        raise cancelled from exc


def _cancellation(exc: BaseException) -> asyncio.CancelledError | None:
    """The cancellation ``exc`` was raised while handling, if any."""
    seen: BaseException | None = exc.__context__
    while seen is not None:
        if isinstance(seen, asyncio.CancelledError):
            return seen
        seen = seen.__context__
    return None


@contextlib.asynccontextmanager
async def _advisory_lock(conn: AsyncConnection) -> AsyncIterator[None]:
    """PostgreSQL's session advisory lock, tried until had (module docstring), with no
    transaction left open. It lasts as long as the upgrade's connection, which is closed
    at its end (never pooled), however the upgrade ends: a dead or cancelled session
    cannot be asked to unlock."""
    try_lock = text("SELECT pg_try_advisory_lock(:key)")
    while not await conn.scalar(try_lock, {"key": _PG_LOCK_KEY}):
        await conn.commit()
        await asyncio.sleep(LOCK_POLL_S)
    await conn.commit()
    yield


def _loop_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _loop_locks.get(loop)
    if lock is None:
        lock = _loop_locks[loop] = asyncio.Lock()
    return lock


@functools.cache
def _scripts() -> ScriptDirectory:
    script = ScriptDirectory(str(Path(__file__).parent))
    script.get_heads()  # loads every revision file now, in this (worker) thread
    return script


def _upgrade_to(conn: Connection, script: ScriptDirectory, to: str) -> None:
    def steps(heads: tuple[str, ...], _context: MigrationContext) -> list[RevisionStep]:
        pending = script.iterate_revisions(to, heads, implicit_base=True)
        return [
            MigrationStep.upgrade_from_script(script.revision_map, revision)
            for revision in reversed(list(pending))
        ]

    # One transaction per revision, committed with its version stamp (module docstring).
    with EnvironmentContext(Config(), script, fn=steps) as env:
        env.configure(connection=conn, version_table=VERSION_TABLE, transaction_per_migration=True)
        with env.begin_transaction():
            env.run_migrations()
    conn.commit()  # what alembic's reads began, if anything
