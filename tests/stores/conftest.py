"""Fixtures for the store contract suite: one test, every adapter.

``backend`` is parametrized over memory, SQLite (a real file in ``tmp_path``) and
PostgreSQL (a throwaway database created for this test session on the server at
``THREADPILOT_TEST_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/postgres``,
dropped at the end; every test starts with empty tables). When that server cannot be
reached the PostgreSQL cases are skipped, or fail when ``CI=true``.

A :class:`Backend` opens any number of store instances on one database, each with its
own connections, which is how the suite checks what another worker would see.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.memory import MemoryStore
from agent_core.stores.postgres import PostgresStore
from agent_core.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
    from pathlib import Path

    from agent_core.ports import Store

ADMIN_URL = os.environ.get(
    "THREADPILOT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
_TABLES = (
    "runs, stop_requests, checkpoints, events, deliveries, guidance, thread_participants, "
    "approvals, installations"
)


def run_in_thread(coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine to completion on a private loop in a thread: for session-scoped
    set-up, which must not touch the loops pytest-asyncio gives each test."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro()))
        except BaseException as exc:  # handed over to the calling thread below
            error.append(exc)

    thread = threading.Thread(target=target, name="pg-admin")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0] if result else None


async def admin_execute(sql: str, url: str = ADMIN_URL) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def database_url(name: str) -> str:
    return urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{name}"))


def unreachable(reason: str) -> None:
    message = f"PostgreSQL is not reachable at {ADMIN_URL}: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(f"{message} (start it, or set CI=true to make this a failure)")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A migrated, throwaway database for this session; dropped at the end."""
    name = f"threadpilot_test_{uuid.uuid4().hex[:12]}"
    try:
        run_in_thread(lambda: admin_execute(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        unreachable(str(exc))
    url = database_url(name)
    try:
        run_in_thread(lambda: _migrate(url))
        yield url
    finally:
        run_in_thread(lambda: admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _migrate(url: str) -> None:
    store = await PostgresStore.open(url)
    await store.close()


@pytest.fixture
async def own_pg_url(pg_url: str) -> AsyncIterator[str]:
    """A migrated database for this test alone: for tests that terminate its backends.

    (Depends on ``pg_url`` only so that an unreachable server skips or fails alike.)
    """
    name = f"threadpilot_test_{uuid.uuid4().hex[:12]}"
    await admin_execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    try:
        await _migrate(url)
        yield url
    finally:
        await admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def terminate_backends(url: str, admin: Any = None) -> int:
    """``pg_terminate_backend`` every session on ``url``'s database; returns how many.

    ``admin`` is an open asyncpg connection to another database, for loops.
    """
    name = urlsplit(url).path.lstrip("/")
    sql = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = $1 AND pid <> pg_backend_pid()"
    )
    if admin is not None:
        return int(await admin.fetchval(sql, name))
    conn = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        return int(await conn.fetchval(sql, name))
    finally:
        await conn.close()


@dataclass
class Backend:
    """One database; :meth:`open` gives another store instance (another worker's view)."""

    name: str
    opener: Callable[[], Awaitable[Store]]
    stores: list[Store] = field(default_factory=list)

    async def open(self) -> Store:
        store = await self.opener()
        self.stores.append(store)
        return store

    async def close_all(self) -> None:
        for store in reversed(self.stores):
            await store.close()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def backend_url(backend_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the backend's database is (resolved outside any event loop)."""
    if backend_kind == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return str(tmp_path / "threadpilot.db")


@pytest.fixture
async def backend(backend_kind: str, backend_url: str) -> AsyncIterator[Backend]:
    if backend_kind == "memory":
        shared = MemoryStore()  # one object is the whole "database"

        async def open_memory() -> Store:
            return shared

        result = Backend("memory", open_memory)
    elif backend_kind == "sqlite":

        async def open_sqlite() -> Store:
            # The first instance migrates the new file; the others find it ready.
            return await SqliteStore.open(backend_url, migrate=not result.stores)

        result = Backend("sqlite", open_sqlite)
    else:
        await admin_execute(f"TRUNCATE {_TABLES} RESTART IDENTITY", backend_url)

        async def open_postgres() -> Store:
            # The session fixture migrated this database already.
            return await PostgresStore.open(backend_url, migrate=False, max_size=4)

        result = Backend("postgres", open_postgres)
    try:
        yield result
    finally:
        await result.close_all()


@pytest.fixture
async def store(backend: Backend) -> Store:
    return await backend.open()
