"""PostgreSQL stop wake-ups: NOTIFY reaches another worker's listener, and a listener
whose connection is killed comes back and asks for a re-scan. Nothing here sleeps: each
test waits on an event, under a deadline."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.ports import StopWakeups
from agent_core.stores.memory import MemoryStore
from agent_core.stores.postgres import PostgresStore
from agent_core.stores.postgres_listener import LISTENER_APPLICATION_NAME, PostgresStopListener
from agent_core.values.errors import StorageError
from agent_core.values.records import RunRecord, ThreadKey, Wakeup
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.postgres

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
DEADLINE_S = 10.0


class Heard:
    """Records wake-ups and lets a test wait for the n-th one."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        self._changed = asyncio.Event()

    async def __call__(self, wakeup: Wakeup) -> None:
        assert wakeup.run_id is not None
        self.run_ids.append(wakeup.run_id)
        self._changed.set()

    async def until(self, count: int) -> list[str]:
        async with asyncio.timeout(DEADLINE_S):
            while len(self.run_ids) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.run_ids


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two workers' stores on one database."""
    listener = await PostgresStore.open(pg_url, migrate=False)
    clicker = await PostgresStore.open(pg_url, migrate=False)
    try:
        yield listener, clicker
    finally:
        await clicker.close()
        await listener.close()


def test_only_postgres_offers_wake_ups(stores: tuple[PostgresStore, PostgresStore]) -> None:
    wakeups: StopWakeups = stores[0]  # checked by mypy as well as here
    assert isinstance(wakeups, StopWakeups)
    assert not isinstance(MemoryStore(), StopWakeups)


async def test_a_committed_request_wakes_another_worker(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    worker, clicker = stores
    heard = Heard()
    async with worker.listen_stops(heard) as listener:
        assert listener.connected
        await clicker.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
        await clicker.add_stop_request("run-2", THREAD, StopReason.ABORT, "U2")
        assert await heard.until(2) == ["run-1", "run-2"]
    assert not listener.connected


async def test_a_killed_listener_reconnects_and_asks_for_a_rescan(
    stores: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    worker, clicker = stores
    heard = Heard()
    reconnected = asyncio.Event()

    async def rescan() -> None:
        reconnected.set()

    async with worker.listen_stops(heard, on_reconnect=rescan) as listener:
        admin = await asyncpg.connect(pg_url)
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = $1 AND datname = current_database()",
                LISTENER_APPLICATION_NAME,
            )
        finally:
            await admin.close()
        assert killed == 1

        async with asyncio.timeout(DEADLINE_S):
            await reconnected.wait()
        assert listener.connected
        # on_reconnect runs once LISTEN is back, so this one must be heard.
        await clicker.add_stop_request("run-after", THREAD, StopReason.STOP, "U1")
        assert await heard.until(1) == ["run-after"]


async def test_a_failing_callback_does_not_stop_the_listener(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    worker, clicker = stores
    heard = Heard()

    async def flaky(wakeup: Wakeup) -> None:
        await heard(wakeup)
        if wakeup.run_id == "run-bad":
            raise RuntimeError("callback bug")

    async with worker.listen_stops(flaky):
        await clicker.add_stop_request("run-bad", THREAD, StopReason.STOP, "U1")
        await clicker.add_stop_request("run-good", THREAD, StopReason.STOP, "U1")
        assert await heard.until(2) == ["run-bad", "run-good"]


async def test_listening_to_an_unreachable_server_fails_on_entry() -> None:
    async def ignore(_wakeup: Wakeup) -> None:
        return None

    listener = PostgresStopListener("postgresql://u:pw@127.0.0.1:1/db", ignore)
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:1/db"):
        async with listener:
            pass


async def test_a_queued_run_wakes_another_worker_with_no_run_named(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    worker, clicker = stores
    woken: asyncio.Queue[Wakeup] = asyncio.Queue()
    async with worker.listen_stops(woken.put):
        await clicker.enqueue_run(RunRecord("run-q", THREAD, "U1", "task"))
        async with asyncio.timeout(DEADLINE_S):
            wakeup = await woken.get()
    # Only the queue's taker need wake: no run's stop watcher reads tables for it.
    assert wakeup.queued
    assert wakeup.run_id is None
