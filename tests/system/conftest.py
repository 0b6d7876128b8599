"""Fixtures for the multi-process tests (issue 4): a database per test, on either backend.

``database_url`` is parametrized over ``sqlite`` (a file in ``tmp_path``) and
``postgres`` (a throwaway database created for the one test on the server at
``THREADPILOT_TEST_POSTGRES``, migrated, and dropped afterwards). A fresh database per
test matters here: a worker reconciles every expired run it finds, so runs left behind
by an earlier test (one whose owner was killed, say) must not be in the next test's way.
As in ``tests/stores``, an unreachable PostgreSQL skips, or fails when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.factory import open_store
from tests.fakes.slack_api import FakeSlack
from tests.stores.conftest import admin_execute, unreachable
from tests.stores.conftest import database_url as postgres_database
from tests.system.workers import Cluster, kill_leftovers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock
    from llmock.testing import LLMockServer

    from agent_core.ports import Store


@pytest.fixture(scope="session", autouse=True)
def no_worker_left_behind() -> Iterator[None]:
    """Each cluster ends its workers; this catches any a failed teardown left running."""
    yield
    if leftovers := kill_leftovers():
        pytest.fail(f"worker processes were left running (killed now): {leftovers}")


async def _migrate(url: str) -> None:
    # Migrated here, once, so workers starting together do not all race to do it.
    store = await open_store(url)
    await store.close()


@contextlib.asynccontextmanager
async def fresh_postgres() -> AsyncIterator[str]:
    """A new, migrated PostgreSQL database for one test; dropped (forcibly) afterwards."""
    name = f"threadpilot_system_{uuid.uuid4().hex[:12]}"
    try:
        await admin_execute(f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        unreachable(str(exc))
    url = postgres_database(name)
    try:
        await _migrate(url)
        yield url
    finally:
        await admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/threadpilot.db"
        await _migrate(url)
        yield url
        return
    async with fresh_postgres() as url:
        yield url


@pytest.fixture
async def pg_database_url() -> AsyncIterator[str]:
    """For the PostgreSQL-only scenarios."""
    async with fresh_postgres() as url:
        yield url


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def journal(llm: LLMock, llmock_server: LLMockServer) -> Journal:
    """llmock's request journal, read without waiting. ``llm.requests`` blocks (the
    event loop too) for up to 2 s while a request is in flight, and leaves it out."""
    return llmock_server.state.journal


@contextlib.asynccontextmanager
async def opened_store(url: str) -> AsyncIterator[Store]:
    opened = await open_store(url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """The test's own connection to the workers' database, to read what they wrote."""
    async with opened_store(database_url) as opened:
        yield opened


@pytest.fixture
async def pg_store(pg_database_url: str) -> AsyncIterator[Store]:
    async with opened_store(pg_database_url) as opened:
        yield opened


@contextlib.asynccontextmanager
async def running_cluster(
    slack: FakeSlack, llm: LLMock, url: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    async with aiohttp.ClientSession() as http:
        cluster = Cluster(slack, llm.base_url(), url, tmp_path, http)
        try:
            yield cluster
        finally:
            await cluster.close()
            # Shown by pytest only when the test failed.
            for worker in cluster.workers.values():
                print(f"== {worker.name}: {worker.log_path}\n{worker.log_tail(60)}")


@pytest.fixture
async def cluster(
    slack: FakeSlack, llm: LLMock, database_url: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    async with running_cluster(slack, llm, database_url, tmp_path) as started:
        yield started


@pytest.fixture
async def pg_cluster(
    slack: FakeSlack, llm: LLMock, pg_database_url: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    async with running_cluster(slack, llm, pg_database_url, tmp_path) as started:
        yield started
