"""SQLite with a competing writer: another process holds the file's write lock
(``BEGIN IMMEDIATE`` left open). A store call must still honour its caller's deadline,
reads must go on, a write that cannot get the lock in time must say so, and the store
must work again once the lock is free."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING

import pytest

from agent_core.stores.sqlite import SqliteStore
from agent_core.values.errors import StorageError
from agent_core.values.records import RunRecord, ThreadKey
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
DEADLINE_S = 10.0
SLACK_S = 0.25
"""What a call may take beyond its budget: the event loop's turn and a loaded machine,
far below SQLite's default 10 s busy wait that this file is about."""

HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
"""


@contextlib.asynccontextmanager
async def write_lock_held(path: str) -> AsyncIterator[None]:
    """Another process holds the write lock on ``path`` while the context is open."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        async with asyncio.timeout(DEADLINE_S):
            assert await holder.stdout.readline() == b"locked\n"
        yield
    finally:
        holder.stdin.write(b"release\n")
        await holder.stdin.drain()
        async with asyncio.timeout(DEADLINE_S):
            await holder.wait()


async def test_a_click_commit_honours_its_budget_while_another_process_writes(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "tp.db")
    store = await SqliteStore.open(path)  # the default busy timeout: 10 s
    budget = 1.0
    loop = asyncio.get_running_loop()
    try:
        await store.create_run(RunRecord("run-1", THREAD, "U1", "a task"))
        async with write_lock_held(path):
            started = loop.time()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(budget):  # as the click path does
                    await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
            assert loop.time() - started < budget + SLACK_S

            # The store is not stuck behind its cancelled write: reads answer at once.
            started = loop.time()
            async with asyncio.timeout(budget):
                assert await store.pending_stop_requests() == []
                assert await store.get_run("run-1") is not None
            assert loop.time() - started < SLACK_S

        # Lock released: the same store writes again, and the cancelled write left nothing.
        async with asyncio.timeout(DEADLINE_S):
            request = await store.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")
        other = await SqliteStore.open(path, migrate=False)
        try:
            assert await other.pending_stop_requests() == [request]
        finally:
            await other.close()
    finally:
        async with asyncio.timeout(DEADLINE_S):
            await store.close()


async def test_a_write_that_cannot_get_the_lock_in_time_says_the_database_is_busy(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "tp.db")
    store = await SqliteStore.open(path, busy_timeout_s=0.5)
    loop = asyncio.get_running_loop()
    try:
        async with write_lock_held(path):
            started = loop.time()
            with pytest.raises(StorageError, match=r"busy \(another process holds the write lock"):
                await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
            assert loop.time() - started < 0.5 + SLACK_S
            with pytest.raises(StorageError, match="busy"):
                await store.first_delivery("event:Ev1")
        assert await store.first_delivery("event:Ev1")  # and works once the lock is free
    finally:
        await store.close()


async def test_many_cancelled_writes_leave_the_store_usable(tmp_path: Path) -> None:
    """Cancellations landing at every moment (waiting for the lock, in BEGIN, in the
    statement, in COMMIT) never leave the lock held nor a transaction open."""
    path = str(tmp_path / "tp.db")
    store = await SqliteStore.open(path)
    other = await SqliteStore.open(path, migrate=False)
    try:
        async with write_lock_held(path):
            writes = [
                asyncio.create_task(
                    store.add_stop_request(f"run-{i}", THREAD, StopReason.STOP, "U")
                )
                for i in range(5)
            ]
            await asyncio.sleep(0)  # let them queue
            for task in writes:
                task.cancel()
            async with asyncio.timeout(SLACK_S):
                results = await asyncio.gather(*writes, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results)

        for i in range(20):  # cancel at whatever point each write has reached
            task = asyncio.create_task(
                store.add_stop_request(f"x-{i}", THREAD, StopReason.STOP, "U")
            )
            for _ in range(i):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        async with asyncio.timeout(DEADLINE_S):
            kept = await store.add_stop_request("run-last", THREAD, StopReason.STOP, "U")
            other_kept = await other.add_stop_request("run-other", THREAD, StopReason.STOP, "U")
        pending = await other.pending_stop_requests()
        assert pending[-2:] == [kept, other_kept]
        assert not [r for r in pending if r.run_id.startswith("run-") and r.run_id[4:].isdigit()]
    finally:
        await other.close()
        async with asyncio.timeout(DEADLINE_S):
            await store.close()
