"""SQLite-only behaviour: what the write lock does when a writer is cancelled."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import TYPE_CHECKING

import aiosqlite
import pytest

from agent_core.stores.sqlite import SqliteStore
from agent_core.values.records import ThreadKey
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from pathlib import Path

THREAD = ThreadKey("T1", "C1", "1.0")


async def test_a_write_cancelled_while_waiting_for_the_lock_leaves_it_free(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "tp.db")
    # A short busy timeout: if the lock were left held, the last write fails fast.
    store = await SqliteStore.open(path, busy_timeout_s=2.0)
    other = await SqliteStore.open(path, busy_timeout_s=2.0, migrate=False)
    holder = await aiosqlite.connect(path, isolation_level=None)
    try:
        await holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        task = asyncio.create_task(store.add_stop_request("run-1", THREAD, StopReason.STOP, "U"))
        await asyncio.sleep(0)  # one step: the task queues its BEGIN IMMEDIATE, then waits
        task.cancel()
        await holder.execute("COMMIT")  # the queued BEGIN now succeeds, then must roll back
        with pytest.raises(asyncio.CancelledError):
            await task

        # Both the cancelled store and another writer can still write.
        await store.add_stop_request("run-2", THREAD, StopReason.STOP, "U")
        await other.add_stop_request("run-3", THREAD, StopReason.STOP, "U")
        assert [r.run_id for r in await other.pending_stop_requests()] == ["run-2", "run-3"]
    finally:
        await holder.close()
        await other.close()
        await store.close()


def _write_elsewhere(path: str, timeout_s: float, after_s: float) -> str | None:
    """Called on the event loop, which it keeps busy: ``after_s`` of other work, then
    another worker's write, waiting up to ``timeout_s`` for the write lock; the error it
    met, or None if it committed."""
    time.sleep(after_s)  # wait-ok: the event loop busy with something else
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout_s)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM deliveries WHERE key = 'nothing'")
        conn.execute("COMMIT")
        return None
    except sqlite3.Error as exc:
        return str(exc)
    finally:
        conn.close()


async def test_a_busy_event_loop_does_not_keep_other_workers_from_writing(
    tmp_path: Path,
) -> None:
    """A write this process started must not hold the file's write lock while its event
    loop is busy with something else: every other worker would wait on that loop."""
    path = str(tmp_path / "tp.db")
    store = await SqliteStore.open(path)
    try:
        await store.add_stop_request("run-0", THREAD, StopReason.STOP, "U")  # in use
        write = asyncio.create_task(store.add_stop_request("run-1", THREAD, StopReason.STOP, "U"))
        await asyncio.sleep(0)  # one step: the write is handed to the store
        # The loop is now busy (blocked here: being busy is what is tested, not a wait)
        # and meanwhile another worker writes, with 5 s to get the lock: the store's
        # transaction must be able to finish without the loop.
        error = _write_elsewhere(path, timeout_s=5.0, after_s=0.2)
        assert error is None, f"the other worker could not write: {error}"
        await write
        assert [r.run_id for r in await store.pending_stop_requests()] == ["run-0", "run-1"]
    finally:
        await store.close()
