"""Worker processes on PostgreSQL sharing the durable run queue (bench/README.md).

(a) ``--runs`` (1,000) mentions, spread over 2 and then 4 real ``python -m bot`` worker
    processes with ``MAX_LIVE_RUNS`` small enough that most of them queue; llmock answers
    each with a few words at once. While the queue drains, Stop is clicked on runs still
    showing their buttons (queued or live): click -> ack p99 < 100 ms, every click
    answered. Every run must end exactly once, no run may be taken from the queue twice
    (each worker logs ``run.dequeued``), and the throughput (runs ended per second,
    first mention to last ending) is reported.
(b) 2x overload: one worker with ``MAX_LIVE_RUNS=100`` and 200 mentions whose answers
    stall, so 100 runs are live and 100 wait; Stop is clicked on live and on queued runs:
    click -> ack p99 < 100 ms for each, every click answered.

The fake Slack runs in this process, llmock in its own; the worker processes are the
system tests' (``tests/system/workers.py``). Everything shares the machine's cores.

Usage: ``.venv/bin/python -m bench.queue_share [--runs N] [--workers 2,4]``
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import asyncpg  # type: ignore[import-untyped]

from agent_core.stores.factory import open_store
from bench._llmock import llmock_process
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line
from bot.views.status import ACTION_STOP
from tests.bot.harness import buttons
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.system.workers import Cluster

if TYPE_CHECKING:
    from tests.fakes.slack_messages import Message

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGET_MS = 100.0
LIVE_PER_WORKER = 25
"""Phase (a): small, so that most of the runs wait in the queue."""
SEND_CONCURRENCY = 20


async def fresh_database() -> tuple[str, str]:
    name = f"tp_bench_queue_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    store = await open_store(url)  # migrated once, before the workers race to
    await store.close()
    return url, name


async def drop(name: str) -> None:
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


class Bench:
    def __init__(self, slack: FakeSlack, cluster: Cluster) -> None:
        self.slack = slack
        self.cluster = cluster
        self.threads: list[str] = []
        self.clicks_ms: list[float] = []
        self.unanswered = 0

    async def mention_all(self, count: int) -> None:
        workers = list(self.cluster.workers.values())
        gate = asyncio.Semaphore(SEND_CONCURRENCY)

        async def one(i: int) -> None:
            envelope = slack_requests.app_mention(f"<@{self.slack.workspace.bot_user_id}> q{i}")
            event = envelope["event"]
            self.slack.seed_message(
                event["channel"], event["text"], user=event["user"], ts=event["ts"]
            )
            self.threads.append(str(event["ts"]))
            async with gate:
                assert await workers[i % len(workers)].event(envelope) == 200

        await asyncio.gather(*(one(i) for i in range(count)))

    def clickable(self) -> list[Message]:
        found = []
        for thread_ts in self.threads:
            for message in self.slack.thread("C0TPCHAN001", thread_ts):
                if message.is_bot and ACTION_STOP in buttons(message):
                    found.append(message)
        return found

    async def click(self, message: Message) -> None:
        workers = list(self.cluster.workers.values())
        worker = random.choice(workers)
        started = time.monotonic()
        try:
            status = await worker.click(message, ACTION_STOP)
        except (AssertionError, aiohttp.ClientError):
            self.unanswered += 1
            return
        if status != 200:
            self.unanswered += 1
            return
        self.clicks_ms.append((time.monotonic() - started) * 1000)


async def ended_once(url: str, cluster: Cluster, runs: int) -> tuple[int, int, int]:
    """(runs ended, runs still live, runs dequeued more than once)."""
    store = await open_store(url)
    try:
        ended = live = 0
        for record in await store.find_runs(limit=runs * 2):
            if record.state.is_terminal:
                ended += 1
            else:
                live += 1
    finally:
        await store.close()
    taken: Counter[str] = Counter()
    for worker in cluster.workers.values():
        taken.update(r["run_id"] for r in worker.logged("run.dequeued"))
    return ended, live, sum(1 for n in taken.values() if n > 1)


async def phase_share(workers: int, runs: int, llm_url: str, tmp: Path) -> tuple[list[Row], bool]:
    url, name = await fresh_database()
    try:
        async with FakeSlack() as slack, aiohttp.ClientSession() as http:
            cluster = Cluster(slack, llm_url, url, tmp / f"share{workers}", http)
            cluster.cwd.mkdir(parents=True, exist_ok=True)
            try:
                names = [f"w{i}" for i in range(workers)]
                await cluster.start(*names, MAX_LIVE_RUNS=str(LIVE_PER_WORKER), LOG_LEVEL="INFO")
                bench = Bench(slack, cluster)
                started = time.monotonic()
                sending = asyncio.create_task(bench.mention_all(runs))
                ended = 0
                while True:
                    await asyncio.sleep(0.1)  # the clicks' pacing, and the drain's re-check
                    targets = bench.clickable()
                    if targets and len(bench.clicks_ms) + bench.unanswered < runs // 10:
                        await bench.click(random.choice(targets))
                    if sending.done():
                        ended, live, _ = await ended_once(url, cluster, runs)
                        if ended >= runs and live == 0:
                            break
                    if time.monotonic() - started > 90:
                        break
                took = time.monotonic() - started
                await sending
                ended, live, twice = await ended_once(url, cluster, runs)
            finally:
                await cluster.close()
    finally:
        await drop(name)
    ok = ended == runs and live == 0 and twice == 0 and bench.unanswered == 0
    label = f"{workers} workers, {runs} runs"
    rows = [
        Row(f"click -> ack during the drain ({label})", bench.clicks_ms, "ms", TARGET_MS),
    ]
    print(
        f"{label}: {ended} ended, {live} still live, {twice} taken twice, "
        f"{bench.unanswered} clicks unanswered, {runs / took:.1f} runs/s ({took:.1f} s)"
    )
    return rows, ok


async def phase_overload(llm_url: str, tmp: Path) -> tuple[list[Row], bool]:
    url, name = await fresh_database()
    live_ms: list[float] = []
    queued_ms: list[float] = []
    unanswered = 0
    try:
        async with FakeSlack() as slack, aiohttp.ClientSession() as http:
            cluster = Cluster(slack, llm_url, url, tmp / "overload", http)
            cluster.cwd.mkdir(parents=True, exist_ok=True)
            try:
                await cluster.start("w0", MAX_LIVE_RUNS="100")
                bench = Bench(slack, cluster)
                await bench.mention_all(200)
                await slack.wait_until(lambda _s: len(bench.clickable()) >= 200 or None, timeout=60)
                messages = bench.clickable()
                queued = [m for m in messages if "Queued" in json.dumps(m.blocks)]
                live = [m for m in messages if m not in queued]
                for group, samples in ((live[:50], live_ms), (queued[:50], queued_ms)):
                    for message in group:
                        bench.clicks_ms = []
                        await bench.click(message)
                        samples.extend(bench.clicks_ms)
                        await asyncio.sleep(0.02)
                unanswered = bench.unanswered
            finally:
                await cluster.close()
    finally:
        await drop(name)
    rows = [
        Row("click -> ack, live run (100 live + 100 queued)", live_ms, "ms", TARGET_MS),
        Row("click -> ack, queued run (100 live + 100 queued)", queued_ms, "ms", TARGET_MS),
    ]
    ok = unanswered == 0 and len(live_ms) >= 40 and len(queued_ms) >= 40
    print(
        f"overload: {len(live_ms)} live and {len(queued_ms)} queued clicks, {unanswered} unanswered"
    )
    return rows, ok


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--workers", default="2,4")
    p.set_defaults(time_limit=280.0)
    args = p.parse_args()

    async def run() -> bool:
        rows: list[Row] = []
        ok = True
        with tempfile.TemporaryDirectory() as tmp:
            async with llmock_process("--words", "5") as llm_url:
                for workers in (int(w) for w in args.workers.split(",")):
                    got, passed = await phase_share(workers, args.runs, llm_url, Path(tmp))
                    rows += got
                    ok &= passed
            async with llmock_process("--words", "50", "--stall", "120") as llm_url:
                got, passed = await phase_overload(llm_url, Path(tmp))
                rows += got
                ok &= passed
        print_table(
            "Shared run queue: PostgreSQL worker processes",
            rows,
            [machine_line(), revision_line(), "Workers, fake Slack and llmock share the cores."],
        )
        return ok and all(r.verdict == "PASS" for r in rows)

    bench_main(args, run)


if __name__ == "__main__":
    main()
