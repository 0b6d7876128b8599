"""SQLite-only behaviour: what the write lock does when a writer is cancelled."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiosqlite
import pytest

from agent_core.ports import ThreadKey
from agent_core.stop import StopReason
from agent_core.stores.sqlite import SqliteStore

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
