"""Failures reach callers as :class:`StorageError`, saying what happened and what to do,
with the driver's error chained as the cause."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.factory import open_store
from agent_core.stores.migrations import VERSION_TABLE
from agent_core.stores.postgres import PostgresStore
from agent_core.stores.sqlite import SqliteStore
from agent_core.values.errors import StorageError
from agent_core.values.records import RunRecord, ThreadKey
from tests.stores.conftest import database_url

if TYPE_CHECKING:
    from pathlib import Path


def _set_version(path: Path, version: str) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = ?", (version,))
    finally:
        conn.close()


async def test_a_schema_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tp.db"
    store = await SqliteStore.open(str(path))
    await store.close()
    await asyncio.to_thread(_set_version, path, "r9999")

    with pytest.raises(StorageError, match="newer version"):
        await SqliteStore.open(str(path))


async def test_sqlite_driver_errors_are_translated(tmp_path: Path) -> None:
    path = tmp_path / "tp.db"
    store = await SqliteStore.open(str(path))
    try:
        await asyncio.to_thread(_drop_runs, path)
        with pytest.raises(StorageError, match="could not read a run") as caught:
            await store.get_run("run-1")
        assert isinstance(caught.value.__cause__, sqlite3.Error)
    finally:
        await store.close()


def _drop_runs(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("DROP TABLE runs")
    finally:
        conn.close()


@pytest.mark.postgres
async def test_a_missing_postgres_database_is_named(pg_url: str) -> None:
    with pytest.raises(StorageError, match="does not exist") as caught:
        await open_store(database_url("threadpilot_no_such_database"))
    assert "DATABASE_URL" in str(caught.value)
    assert isinstance(caught.value.__cause__, asyncpg.PostgresError)


@pytest.mark.postgres
async def test_postgres_driver_errors_are_translated(pg_url: str) -> None:
    store = await PostgresStore.open(pg_url, migrate=False)
    bogus = RunRecord("run-bogus", ThreadKey("T", "C", "1.0"), "U1", "task", state="bogus")  # type: ignore[arg-type]
    try:
        # The schema's CHECK constraint refuses a state the code does not know.
        with pytest.raises(StorageError, match="could not create a run") as caught:
            await store.create_run(bogus)
        assert isinstance(caught.value.__cause__, asyncpg.CheckViolationError)
    finally:
        await store.close()
