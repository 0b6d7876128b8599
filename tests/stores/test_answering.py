"""Calls a person waits on do not queue behind the runs' work
(agent_core.values.answering.answering).

On PostgreSQL: every connection of the store's pool is taken by an update waiting on a row
that another session holds locked (the runs' writes, stuck). A read made while
``answering()`` is set still answers at once, on the connections kept for it; the same
read made without it waits for a pool connection. And its connections are open from the
start: a server that takes no new connections (at its limit) still answers a click.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]

from agent_core.stores.postgres import ANSWERING_POOL_SIZE, PostgresStore
from agent_core.values.answering import answering
from agent_core.values.records import RunRecord, ThreadKey
from agent_core.values.states import RunState
from tests.stores.conftest import admin_execute
from tests.system.workers import until_async

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
WAIT_S = 5.0


async def test_an_answering_read_is_served_while_the_pool_is_taken(own_pg_url: str) -> None:
    store = await PostgresStore.open(own_pg_url, max_size=2, migrate=False)
    locker = await asyncpg.connect(own_pg_url)
    stuck: list[asyncio.Task[bool]] = []
    try:
        await store.create_run(RunRecord("held", THREAD, "U1", "a task"))
        await store.create_run(RunRecord("asked", THREAD, "U1", "another task"))
        lock = locker.transaction()
        await lock.start()
        await locker.execute("SELECT 1 FROM runs WHERE id = 'held' FOR UPDATE")
        stuck = [
            asyncio.create_task(
                store.set_state("held", RunState.RUNNING, expected=[RunState.QUEUED])
            )
            for _ in range(2)
        ]
        await _until_waiting_on_the_lock(own_pg_url, 2)

        plain = asyncio.create_task(store.get_run("asked"))
        with answering():
            asked = await asyncio.wait_for(store.get_run("asked"), WAIT_S)
        assert asked is not None and asked.task == "another task"
        assert not plain.done()  # no pool connection for it while the updates wait

        await lock.rollback()
        assert (await asyncio.wait_for(plain, WAIT_S)) is not None
        assert sorted(await asyncio.gather(*stuck)) == [False, True]  # one of them won
    finally:
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        await locker.close()
        await store.close()


async def test_answering_connections_are_open_before_the_first_click(own_pg_url: str) -> None:
    store = await PostgresStore.open(own_pg_url, migrate=False)
    name = urlsplit(own_pg_url).path.lstrip("/")
    try:
        await store.create_run(RunRecord("asked", THREAD, "U1", "a task"))
        # From now on the server opens no connection to this database: as at its limit.
        await admin_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        with answering():
            reads = [store.get_run("asked") for _ in range(ANSWERING_POOL_SIZE)]
            asked = await asyncio.wait_for(asyncio.gather(*reads), WAIT_S)
        assert [r.task if r else None for r in asked] == ["a task"] * ANSWERING_POOL_SIZE
    finally:
        await admin_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await store.close()


async def _until_waiting_on_the_lock(url: str, count: int) -> None:
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    watcher = await asyncpg.connect(url)  # its own: a transaction sees one snapshot of it
    try:

        async def waiting() -> bool:
            return bool(await watcher.fetchval(query) >= count)

        await until_async(waiting, what=f"{count} updates waiting on the row lock")
    finally:
        await watcher.close()
