"""Schema migrations: applied on open, idempotent, and safe when workers start together."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.ports import RunRecord, ThreadKey
from agent_core.stores.factory import open_store
from agent_core.stores.migrations import VERSION_TABLE, head_revision
from tests.stores.conftest import admin_execute, database_url

if TYPE_CHECKING:
    from pathlib import Path

    from agent_core.ports import Store

TABLES = {"runs", "stop_requests", "checkpoints", "events", VERSION_TABLE}


async def test_sqlite_open_twice_keeps_data_and_one_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/threadpilot.db"
    first = await open_store(url)
    await first.create_run(RunRecord("run-1", ThreadKey("T", "C", "1.0"), "U1", "task"))
    await first.close()

    second = await open_store(url)  # migrating an up-to-date file does nothing
    try:
        assert await second.get_run("run-1") is not None
    finally:
        await second.close()

    versions, tables, journal_mode = await asyncio.to_thread(
        _inspect_sqlite, tmp_path / "threadpilot.db"
    )
    assert versions == [await head_revision()]
    assert tables >= TABLES
    assert journal_mode == "wal"


def _inspect_sqlite(path: Path) -> tuple[list[str], set[str], str]:
    conn = sqlite3.connect(path)
    try:
        versions = [r[0] for r in conn.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    return versions, tables, journal_mode


async def test_sqlite_workers_starting_together_migrate_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/fresh.db"
    stores = await asyncio.gather(*(open_store(url) for _ in range(4)))
    await _close(stores)
    versions, _, _ = await asyncio.to_thread(_inspect_sqlite, tmp_path / "fresh.db")
    assert versions == [await head_revision()]


@pytest.mark.postgres
async def test_postgres_workers_starting_together_migrate_once(pg_url: str) -> None:
    # A database of its own: the session's shared one is migrated already.
    name = f"threadpilot_test_{uuid.uuid4().hex[:12]}"
    await admin_execute(f'CREATE DATABASE "{name}"')
    try:
        url = database_url(name)
        stores = await asyncio.gather(*(open_store(url) for _ in range(4)))
        await _close(stores)
        again = await open_store(url.replace("postgresql://", "postgres://"))
        await again.close()

        conn = await asyncpg.connect(url)
        try:
            versions = await conn.fetch(f"SELECT version_num FROM {VERSION_TABLE}")
            tables = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        finally:
            await conn.close()
        assert [v["version_num"] for v in versions] == [await head_revision()]
        assert {t["tablename"] for t in tables} >= TABLES
    finally:
        await admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _close(stores: list[Store]) -> None:
    for store in stores:
        await store.close()
