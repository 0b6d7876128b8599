"""The schema, as versioned alembic migrations that every store applies when it opens.

Revisions are the files in ``versions/`` (shipped inside the package, so the wheel
carries them); there is no ``alembic.ini`` and no ``env.py``: :func:`upgrade` drives
alembic's programmatic API on a SQLAlchemy async engine through ``run_sync``, so one
migration script serves aiosqlite and asyncpg alike. Add a revision as
``versions/rNNNN_what.py`` with ``revision``/``down_revision`` set, written with ``op``
and frozen (a migration never imports application code, which keeps changing).

Several workers start at once, so an upgrade must be safe to race:

- PostgreSQL: the whole upgrade is one transaction holding an advisory lock; the loser
  waits, then finds the version table at head and does nothing.
- SQLite: the upgrade runs in one ``BEGIN IMMEDIATE`` transaction, which takes the
  file's write lock up front; the loser waits (busy timeout), then does nothing.
- Within one process, alembic's ``op`` and ``context`` are module-level proxies, so two
  upgrades must not interleave on one event loop: a per-loop lock serialises them.
"""

from __future__ import annotations

import asyncio
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
from sqlalchemy import event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from agent_core.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from alembic.runtime.migration import MigrationContext, RevisionStep
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["VERSION_TABLE", "head_revision", "upgrade_postgres", "upgrade_sqlite"]

VERSION_TABLE = "threadpilot_schema_version"
"""Not alembic's default ``alembic_version``: the database may be shared with another
application that uses alembic too."""

# An arbitrary constant, so every threadpilot worker contends for the same lock.
_PG_LOCK_KEY = 7_405_142_690_301

_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def upgrade_postgres(
    connect: Callable[[], Awaitable[Any]], *, where: str, to: str = "heads"
) -> None:
    """Bring a PostgreSQL database to head; ``connect`` returns an asyncpg connection.

    ``where`` names the database in error messages. ``to`` stops at an older revision,
    for tests that need a database as an earlier version left it; it never downgrades.
    Raises :class:`StorageError`.
    """
    engine = create_async_engine("postgresql+asyncpg://", async_creator=connect, poolclass=NullPool)
    await _upgrade(engine, lock="SELECT pg_advisory_xact_lock(:key)", where=where, to=to)


async def upgrade_sqlite(
    connect: Callable[[], Awaitable[Any]], *, where: str, to: str = "heads"
) -> None:
    """Bring a SQLite file to head (or to revision ``to``, as in :func:`upgrade_postgres`);
    ``connect`` returns an aiosqlite connection opened with ``isolation_level=None`` (so
    that SQLAlchemy's BEGIN below is the only one)."""
    engine = create_async_engine("sqlite+aiosqlite://", async_creator=connect, poolclass=NullPool)

    @event.listens_for(engine.sync_engine, "begin")
    def _begin_immediate(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    await _upgrade(engine, lock=None, where=where, to=to)


async def head_revision() -> str:
    """The newest revision shipped with this code."""
    script = await asyncio.to_thread(_scripts)
    head = script.get_current_head()
    assert head is not None
    return head


async def _upgrade(engine: AsyncEngine, *, lock: str | None, where: str, to: str) -> None:
    try:
        # Reading and executing the revision files is file work: off the event loop.
        script = await asyncio.to_thread(_scripts)
        async with _loop_lock(), engine.begin() as conn:
            await conn.run_sync(_upgrade_to, script, lock, to)
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


def _upgrade_to(conn: Connection, script: ScriptDirectory, lock: str | None, to: str) -> None:
    if lock is not None:
        conn.execute(text(lock), {"key": _PG_LOCK_KEY})

    def steps(heads: tuple[str, ...], _context: MigrationContext) -> list[RevisionStep]:
        pending = script.iterate_revisions(to, heads, implicit_base=True)
        return [
            MigrationStep.upgrade_from_script(script.revision_map, revision)
            for revision in reversed(list(pending))
        ]

    # The connection is already in a transaction (engine.begin), so alembic runs every
    # step inside it: the upgrade commits whole or not at all.
    with EnvironmentContext(Config(), script, fn=steps) as env:
        env.configure(connection=conn, version_table=VERSION_TABLE)
        with env.begin_transaction():
            env.run_migrations()
