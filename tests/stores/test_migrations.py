"""Schema migrations: applied on open, idempotent, safe when workers start together, and
able to upgrade a database that an older version created."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiosqlite
import asyncpg  # type: ignore[import-untyped]
import pytest
from filelock import AsyncFileLock
from sqlalchemy import event
from sqlalchemy.engine import Engine

from agent_core.stores.factory import open_store
from agent_core.stores.migrations import (
    _PG_LOCK_KEY,
    VERSION_TABLE,
    head_revision,
    upgrade_postgres,
    upgrade_sqlite,
)
from agent_core.stores.postgres import PostgresStore
from agent_core.stores.sqlite import SqliteStore
from agent_core.values.errors import StorageError
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.records import ResumeState, RunRecord, ThreadKey
from agent_core.values.states import TERMINAL_STATES, RunState
from tests.stores.conftest import admin_execute, database_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Sequence
    from pathlib import Path

    from agent_core.ports import Store

TABLES = {
    "runs",
    "stop_requests",
    "checkpoints",
    "events",
    "deliveries",
    "guidance",
    "thread_participants",
    VERSION_TABLE,
}
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
T0_SQLITE = "2026-03-01T12:00:00.123456+00:00"  # how r0001 code wrote T0 into SQLite

# A finished run as r0001 code stored it: every column that revision has, no other.
R0001_ROW: dict[str, Any] = {
    "id": "old-run",
    "team": "T1",
    "channel": "C1",
    "thread_ts": "1700000000.000100",
    "requester": "U1",
    "task": "written before r0002",
    "state": "finished",
    "parent_id": None,
    "owner": None,
    "lease_expires_at": None,
    "status_ts": "1700000000.000200",
    "outcome": "finished",
    "stop_reason": None,
    "exit_code": "EXIT-FINAL-ANSWER",
    "stopped_by": None,
    "result": '{"turns":2}',
    "created_at": T0,
    "updated_at": T0,
}
R0001_RUN = RunRecord(
    id="old-run",
    thread=ThreadKey("T1", "C1", "1700000000.000100"),
    requester="U1",
    task="written before r0002",
    state=RunState.FINISHED,
    status_ts="1700000000.000200",
    outcome=Outcome.FINISHED,
    exit_code=ExitCode.FINAL_ANSWER,
    result={"turns": 2},
    created_at=T0,
    updated_at=T0,
    resume=ResumeState.DECLINED,  # r0007: it ended before any resume policy looked
)


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
    async with _fresh_postgres() as url:
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


async def _close(stores: Sequence[Store]) -> None:
    for store in stores:
        await store.close()


# -- upgrading a database an older version made -----------------------------------------


async def test_sqlite_upgrades_a_database_made_at_r0001(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    await upgrade_sqlite(
        lambda: aiosqlite.connect(path, isolation_level=None), where=path, to="r0001"
    )
    row = {k: T0_SQLITE if isinstance(v, datetime) else v for k, v in R0001_ROW.items()}
    async with aiosqlite.connect(path) as conn:
        columns = {r[1] for r in await conn.execute_fetchall("PRAGMA table_info(runs)")}
        assert "final_posted_at" not in columns  # really the r0001 schema
        marks = ", ".join("?" * len(row))
        await conn.execute(
            f"INSERT INTO runs ({', '.join(row)}) VALUES ({marks})", list(row.values())
        )
        await conn.commit()

    store = await SqliteStore.open(path)
    try:
        await _check_upgraded(store)
    finally:
        await store.close()
    versions, names, _ = await asyncio.to_thread(_inspect_sqlite, tmp_path / "old.db")
    assert versions == [await head_revision()]
    assert "ix_runs_state_final_posted" in names


@pytest.mark.postgres
async def test_postgres_upgrades_a_database_made_at_r0001(pg_url: str) -> None:
    async with _fresh_postgres() as url:
        await upgrade_postgres(lambda: asyncpg.connect(url), where=url, to="r0001")
        conn = await asyncpg.connect(url)
        try:
            columns = await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
            )
            assert "final_posted_at" not in {c["column_name"] for c in columns}
            marks = ", ".join(f"${i}" for i in range(1, len(R0001_ROW) + 1))
            sql = f"INSERT INTO runs ({', '.join(R0001_ROW)}) VALUES ({marks})"
            await conn.execute(sql, *R0001_ROW.values())
        finally:
            await conn.close()

        store = await PostgresStore.open(url)
        try:
            await _check_upgraded(store)
        finally:
            await store.close()
        conn = await asyncpg.connect(url)
        try:
            indexes = await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'runs'")
        finally:
            await conn.close()
        assert "ix_runs_state_final_posted" in {i["indexname"] for i in indexes}


async def _check_upgraded(store: Store) -> None:
    """The old row reads back whole, as not posted, and takes the new column's writes."""
    assert await store.get_run("old-run") == R0001_RUN
    unposted = await store.find_runs(states=TERMINAL_STATES, final_posted=False)
    assert unposted == [R0001_RUN]
    assert await store.update_run("old-run", final_posted_at=T0)
    assert await store.find_runs(final_posted=False) == []
    got = await store.get_run("old-run")
    assert got is not None
    assert (got.state, got.final_posted_at) == (RunState.FINISHED, T0)


@contextlib.asynccontextmanager
async def _fresh_postgres() -> AsyncIterator[str]:
    """A database of its own (the session's shared one is migrated already)."""
    name = f"threadpilot_test_{uuid.uuid4().hex[:12]}"
    await admin_execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        await admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- a long history ------------------------------------------------------------------------

HISTORY = 200_000
"""Runs written before r0007: every 100th live, every other 50th ``blocked`` by a shutdown
(resumed after the upgrade), the rest finished with an ``ended_because`` in the result."""
CLICK_WAIT_S = 2.0
"""How long a click's write of an old worker may wait for the migration's locks (SQLite
builds an index holding its one writer: a few hundred milliseconds on a busy machine)."""
PG_CLICK_WAIT_S = 1.0
"""The same on PostgreSQL, where nothing holds ``runs`` for longer than a batch."""


RESULT = '{"turns": 2, "ended_because": "final_answer"}'


def _history_sql(sqlite: bool) -> str:
    if sqlite:
        numbers = (
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {HISTORY}) "
        )
        text, source, at, cast = "printf('%06d', i)", "FROM n", f"'{T0_SQLITE}'", ""
    else:
        numbers = ""
        text, source = "lpad(i::text, 6, '0')", f"FROM generate_series(1, {HISTORY}) AS i"
        at, cast = "'2026-03-01T12:00:00+00:00'::timestamptz", "::json"
    return (
        f"{numbers}INSERT INTO runs (id, team, channel, thread_ts, requester, task, state, "
        "exit_code, result, created_at, updated_at) "
        f"SELECT 'run-' || {text}, 'T1', 'C1', '1600000000.' || {text}, 'U1', "
        "'a task as long as people write them, give or take', "
        "CASE WHEN i % 100 = 0 THEN 'running' WHEN i % 50 = 0 THEN 'blocked' "
        "ELSE 'finished' END, "
        "CASE WHEN i % 100 = 0 THEN NULL WHEN i % 50 = 0 THEN 'EXIT-SHUTDOWN' "
        "ELSE 'EXIT-FINAL-ANSWER' END, "
        "CASE WHEN i % 100 = 0 THEN NULL "
        f"ELSE '{RESULT}'{cast} END, "
        f"{at}, {at} {source}"
    )


_MIGRATED = (
    "SELECT count(*) FILTER (WHERE resume = 'declined'), "
    "count(*) FILTER (WHERE ended_because = 'final_answer'), "
    "count(*) FILTER (WHERE state = 'blocked' AND resume IS NULL) FROM runs"
)
"""Declined (every finished run), ended because (every ended run, from its result), and
resumes ahead (those blocked by a shutdown)."""
MIGRATED = (HISTORY * 49 // 50, HISTORY * 99 // 100, HISTORY // 100)
_DECLINED = "SELECT count(*) FROM runs WHERE resume = 'declined'"


async def test_sqlite_migrates_a_long_history_while_an_old_worker_answers_clicks(
    tmp_path: Path,
) -> None:
    """Two workers start together on 200,000 runs written before r0007, with a busy
    timeout shorter than the migration: one migrates, the other waits for it; a worker
    of the previous version commits a click after each of the migration's batches (it
    sees their progress: the history is not rewritten in one transaction). The click is
    made at each batch's commit, not whenever the machine happens to schedule it, so
    every batch is followed by one, however loaded the machine."""
    path = str(tmp_path / "history.db")
    await upgrade_sqlite(
        lambda: aiosqlite.connect(path, isolation_level=None), where=path, to="r0006"
    )
    async with aiosqlite.connect(path) as conn:
        await conn.execute("PRAGMA journal_mode = WAL")  # as every version has left it
        await conn.execute(_history_sql(sqlite=True))
        await conn.commit()
    old_worker = await asyncio.to_thread(
        sqlite3.connect, path, timeout=CLICK_WAIT_S, isolation_level=None, check_same_thread=False
    )
    progress: list[int] = []

    def click() -> None:
        # A click's write as r0006 code makes it: it must not wait out its timeout.
        progress.append(_sqlite_click(old_worker, len(progress)))

    try:
        with _at_each_batch_commit(click):
            stores = await asyncio.gather(
                *(SqliteStore.open(path, busy_timeout_s=CLICK_WAIT_S) for _ in range(2))
            )
        clicked = old_worker.execute(
            "SELECT count(*) FROM runs WHERE status_ts LIKE '1700000000.%'"
        ).fetchone()[0]
    finally:
        await asyncio.to_thread(old_worker.close)
    await _close(stores)
    # One click after each batch, and one after the last look, which found no rows left.
    assert len(progress) == HISTORY // BACKFILL_BATCH + 1
    assert clicked == len(progress)  # every click landed, none was undone
    assert progress == sorted(progress)
    assert progress[0] > 0
    assert any(0 < declined < MIGRATED[0] for declined in progress), progress

    async with aiosqlite.connect(path) as conn:
        counts = await conn.execute_fetchall(_MIGRATED)
    assert tuple(next(iter(counts))) == MIGRATED
    versions, names, _ = await asyncio.to_thread(_inspect_sqlite, tmp_path / "history.db")
    assert versions == [await head_revision()]
    assert {"ix_runs_resume_pending", "ix_stop_requests_thread"} <= names


BACKFILL_BATCH = 2000
"""Rows per committed batch of r0007's backfill (its ``_BATCH``; a revision stays as it
was written)."""


@contextlib.contextmanager
def _at_each_batch_commit(action: Callable[[], None]) -> Iterator[None]:
    """Call ``action`` right after each batch of a SQLite migration commits (the
    ``COMMIT`` a revision sends as a statement of its own), before the next batch
    begins: what ``action`` does is certain to fall between two batches."""

    def after(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement == "COMMIT":
            action()

    event.listen(Engine, "after_cursor_execute", after)
    try:
        yield
    finally:
        event.remove(Engine, "after_cursor_execute", after)


def _declined_so_far(conn: sqlite3.Connection) -> int:
    """How many runs the migration has declined so far, read without any lock."""
    try:
        return int(
            conn.execute("SELECT count(*) FROM runs WHERE resume = 'declined'").fetchone()[0]
        )
    except sqlite3.OperationalError:  # no such column: r0007 has not begun
        return 0


def _write_at_once(path: str) -> None:
    """Take the file's write lock without waiting, as a worker starting next would."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _sqlite_click(conn: sqlite3.Connection, n: int) -> int:
    """A click's write as threadpilot makes it (``BEGIN IMMEDIATE``, the store's doc); then
    how many runs are declined so far, as far as this worker can see."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "UPDATE runs SET status_ts = ? WHERE id = ?",
        (f"1700000000.{n:06d}", f"run-{(n * 7919) % HISTORY + 1:06d}"),
    )
    conn.execute("COMMIT")
    return _declined_so_far(conn)


@pytest.mark.postgres
async def test_postgres_migrates_a_long_history_while_an_old_worker_answers_clicks(
    pg_url: str,
) -> None:
    """As for SQLite: two workers whose statements time out long before the migration
    is done both start; a worker of the previous version keeps committing clicks."""
    async with _fresh_postgres() as url:
        await upgrade_postgres(lambda: asyncpg.connect(url), where=url, to="r0006")
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(_history_sql(sqlite=False))
        finally:
            await conn.close()
        old_worker = await asyncpg.connect(url)
        try:
            await old_worker.execute(f"SET lock_timeout = '{int(PG_CLICK_WAIT_S * 1000)}ms'")
            starting = asyncio.gather(
                *(PostgresStore.open(url, command_timeout_s=2.0) for _ in range(2))
            )
            clicks = 0
            while not starting.done():
                run_id = f"run-{(clicks * 7919) % HISTORY + 1:06d}"
                await old_worker.execute(
                    "UPDATE runs SET status_ts = $1 WHERE id = $2", f"1700.{clicks}", run_id
                )
                clicks += 1
            stores = await starting
            await _close(stores)
            assert clicks > 0
            assert tuple(await old_worker.fetchrow(_MIGRATED)) == MIGRATED
            versions = await old_worker.fetch(f"SELECT version_num FROM {VERSION_TABLE}")
            assert [v["version_num"] for v in versions] == [await head_revision()]
            invalid = await old_worker.fetchval(
                "SELECT count(*) FROM pg_index WHERE NOT indisvalid"
            )
            assert invalid == 0  # every index built concurrently is whole
        finally:
            await old_worker.close()


async def test_a_migration_cut_short_is_finished_by_the_next_start(tmp_path: Path) -> None:
    """A worker killed halfway through r0007's batches (here: its start-up cancelled)
    leaves what it committed; the next worker to start finishes the job."""
    path = str(tmp_path / "history.db")
    await upgrade_sqlite(
        lambda: aiosqlite.connect(path, isolation_level=None), where=path, to="r0006"
    )
    async with aiosqlite.connect(path) as conn:
        await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute(_history_sql(sqlite=True))
        await conn.commit()
    starting: list[asyncio.Future[SqliteStore]] = []
    committed: list[None] = []

    def cut_short() -> None:
        # At the tenth batch's commit, wherever the machine's scheduling would have put
        # an outside cancel: the next step the migration awaits is cancelled.
        committed.append(None)
        if len(committed) == 10:
            starting[0].cancel()

    with _at_each_batch_commit(cut_short):
        starting.append(asyncio.ensure_future(SqliteStore.open(path)))
        with pytest.raises(asyncio.CancelledError):
            await starting[0]
    # The cancelled start-up holds no lock: a write begins at once.
    await asyncio.to_thread(_write_at_once, path)
    async with aiosqlite.connect(path) as conn:
        (declined,) = next(iter(await conn.execute_fetchall(_DECLINED)))
    assert 0 < declined < MIGRATED[0]  # what the ten batches committed is kept
    versions, _, _ = await asyncio.to_thread(_inspect_sqlite, tmp_path / "history.db")
    assert versions == ["r0006"]  # r0007 is not done

    store = await SqliteStore.open(path)
    await store.close()

    async with aiosqlite.connect(path) as conn:
        counts = await conn.execute_fetchall(_MIGRATED)
    assert tuple(next(iter(counts))) == MIGRATED
    versions, _, _ = await asyncio.to_thread(_inspect_sqlite, tmp_path / "history.db")
    assert versions == [await head_revision()]


async def test_waiting_past_the_migration_timeout_is_a_clear_error(tmp_path: Path) -> None:
    """Another worker holds the migration lock (it migrates a long history): past
    MIGRATION_TIMEOUT this one gives up, saying which setting to raise."""
    path = str(tmp_path / "threadpilot.db")
    async with AsyncFileLock(f"{path}.migrate-lock"):
        # A task of its own, as another worker's start-up would be.
        starting = asyncio.ensure_future(SqliteStore.open(path, migration_timeout_s=0.5))
        with pytest.raises(StorageError, match="raise MIGRATION_TIMEOUT"):
            await starting
    store = await SqliteStore.open(path)  # once it is free, the file is migrated
    await store.close()


@pytest.mark.postgres
async def test_postgres_waiting_past_the_migration_timeout_is_a_clear_error(
    pg_url: str,
) -> None:
    async with _fresh_postgres() as url:
        other = await asyncpg.connect(url)  # a worker migrating
        try:
            await other.execute(f"SELECT pg_advisory_lock({_PG_LOCK_KEY})")
            with pytest.raises(StorageError, match="raise MIGRATION_TIMEOUT"):
                await PostgresStore.open(url, migration_timeout_s=0.5)
        finally:
            await other.close()
        store = await PostgresStore.open(url)
        await store.close()
