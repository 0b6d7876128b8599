"""Real worker processes on one database: concurrent writers, then ``kill -9``.

The targets allow zero stop requests lost to ``kill -9`` of any process. Each
child commits stop requests, reports each one only after ``add_stop_request`` returned,
and is then killed with SIGKILL while its store is still open. Every reported request
must be there for the next worker.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agent_core.stores.factory import open_store

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import asyncio, sys
from agent_core.values.records import ThreadKey
from agent_core.values.stop import StopReason
from agent_core.stores.factory import open_store

async def main(url: str, worker: str, count: int) -> None:
    store = await open_store(url)
    for i in range(count):
        request = await store.add_stop_request(
            f"{worker}-run-{i}", ThreadKey("T", "C", "1.0"), StopReason.STOP, worker
        )
        print(request.id, flush=True)
    print("done", flush=True)
    await asyncio.Event().wait()  # hold the store open until SIGKILL

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""
WORKERS = 3
REQUESTS_EACH = 20


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/shared.db"
    else:
        pg_url: str = request.getfixturevalue("pg_url")
        yield pg_url


async def run_then_kill(url: str, worker: str) -> list[str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        url,
        worker,
        str(REQUESTS_EACH),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    committed: list[str] = []
    try:
        async with asyncio.timeout(30):
            while (line := (await child.stdout.readline()).decode().strip()) != "done":
                assert line, f"{worker} exited early with status {await child.wait()}"
                committed.append(line)
    finally:
        child.kill()  # SIGKILL: no cleanup, no close, no final commit
        await child.communicate()
    return committed


async def test_requests_survive_kill_9_of_concurrent_writers(url: str) -> None:
    # The children also race to migrate at start-up (for SQLite, a fresh file).
    reported = await asyncio.gather(*(run_then_kill(url, f"w{n}") for n in range(WORKERS)))

    store = await open_store(url)
    try:
        pending = {r.id for r in await store.pending_stop_requests()}
    finally:
        await store.close()
    committed = {request_id for ids in reported for request_id in ids}
    assert len(committed) == WORKERS * REQUESTS_EACH
    assert committed <= pending
