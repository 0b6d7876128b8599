"""Abort / Stop committed in one worker -> seen by the owning worker (bench/README.md).

Targets: PostgreSQL p99 < 100 ms (LISTEN/NOTIFY wake-up), SQLite p99 < 350 ms (250 ms
poll). This process commits stop requests with the real store (``add_stop_request``
returns once the row is committed); a second process, ``bench._stop_owner``, runs the
real :class:`bot.workers.stop_watch.StopWatcher` and prints when each request reached its run.
Latency = observed - committed, on the machine-wide monotonic clock. Trials are spaced
by a random 0-300 ms so they land at every phase of the SQLite poll.

    .venv/bin/python -m bench.stop_propagation [--trials 200] [--backend sqlite|postgres|both]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from agent_core import RunRecord, StopReason, ThreadKey
from agent_core.stores.factory import open_store
from bench._stats import Row, machine_line, print_table

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGETS_MS = {"postgres": 100.0, "sqlite": 350.0}


async def measure(database_url: str, trials: int) -> list[float]:
    store = await open_store(database_url)
    thread = ThreadKey("T-bench", "C-bench", "1.0")
    for i in range(trials):
        await store.create_run(RunRecord(id=f"bench-{i}", thread=thread, requester="U", task="x"))
    owner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench._stop_owner",
        database_url,
        "--runs",
        str(trials),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert owner.stdout is not None and owner.stdin is not None
    try:
        async with asyncio.timeout(30):
            assert (await owner.stdout.readline()).strip() == b"ready"
        latencies: list[float] = []
        for i in range(trials):
            await asyncio.sleep(random.uniform(0, 0.3))  # spread over the poll phase
            await store.add_stop_request(f"bench-{i}", thread, StopReason.STOP, "U-bench")
            committed = time.monotonic()
            async with asyncio.timeout(10):
                line = (await owner.stdout.readline()).decode().split()
            assert line[0] == f"bench-{i}", line
            latencies.append((float(line[1]) - committed) * 1000)
        return latencies
    finally:
        owner.stdin.close()
        await asyncio.wait_for(owner.wait(), 10)
        await store.close()


async def postgres_url() -> tuple[str, str] | None:
    name = f"tp_bench_{uuid.uuid4().hex[:8]}"
    try:
        admin = await asyncpg.connect(ADMIN_DSN)
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"postgres: skipped ({exc})")
        return None
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    return f"postgresql://postgres@127.0.0.1:5432/{name}", name


async def drop(name: str) -> None:
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    args = parser.parse_args()
    rows: list[Row] = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'bench.db'}"
            samples = await measure(url, args.trials)
        rows.append(
            Row(
                "commit -> owner sees it, SQLite (250 ms poll)",
                samples,
                "ms",
                TARGETS_MS["sqlite"],
                target_id="stop_seen_sqlite",
            )
        )
    if args.backend in ("postgres", "both"):
        created = await postgres_url()
        if created is not None:
            url, name = created
            try:
                samples = await measure(url, args.trials)
            finally:
                await drop(name)
            rows.append(
                Row(
                    "commit -> owner sees it, PostgreSQL (LISTEN/NOTIFY)",
                    samples,
                    "ms",
                    TARGETS_MS["postgres"],
                    target_id="stop_seen_postgres",
                )
            )
    print_table(
        "Stop committed in one process -> seen by the owning process",
        rows,
        [machine_line(), "Two processes on one machine; real stores and StopWatcher."],
    )
    return 1 if any(r.verdict == "MISS" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
