"""Worker processes on PostgreSQL sharing the durable run queue (bench/README.md).

(a) ``--runs`` (1,000) mentions, spread over 2 and then 4 real ``python -m bot`` worker
    processes with ``MAX_LIVE_RUNS=25`` each, so that most of them queue; llmock answers
    each with a few words at once. While the queue drains, Stop is clicked (open loop,
    one every ``CLICK_EVERY_S``, through a random worker) on runs still showing their
    buttons, queued or live: click -> ack p99 < 100 ms, every click answered. A drain
    takes about 9 s and so gives 70-90 clicks, of which a p99 would be the slowest one:
    the drain is repeated ``--rounds`` (3) times, each on fresh workers and a fresh
    database, and the p99 is taken over every round's clicks (the table's max is the
    slowest of them all). In every round every run must end exactly once (one ending log
    line, one row per mention, none left live), no run may be taken from the queue twice
    (``run.dequeued`` in the workers' logs), and the throughput is runs ended per second,
    first mention to last ending, over the rounds.
(b) 2x overload: one worker with ``MAX_LIVE_RUNS=100`` and 200 mentions whose answers
    stall, so 100 runs are live and 100 wait; 50 Stop clicks on live runs and 50 on
    queued ones, interleaved: click -> ack p99 < 100 ms for each kind, every click
    answered, and every queued run clicked ends where it waits without calling the model
    (llmock saw exactly one request per live run). These mentions go to one workspace.

Mentions go to a channel each and round-robin over ``--teams`` workspaces: the app's
own Slack budget, not the queue, would otherwise set the pace (``bench/_queue_cluster.py``
says why; ``--teams 1`` measures that bound). The fake Slack runs in this process; llmock
in its own for (a), in a thread here for (b) (its in-flight count is the check); the
workers are the system tests' (``tests/system/workers.py``). Everything shares the cores.

Usage: ``.venv/bin/python -m bench.queue_share [--runs N] [--workers 2,4] [--teams T]
[--rounds R] [--skip-overload]``
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import asyncpg  # type: ignore[import-untyped]
from llmock.scenarios import Reply, StreamFault
from prometheus_client.parser import text_string_to_metric_families

from bench._clicker import Clicker
from bench._llmock import llmock_process, llmock_server
from bench._probes import LoopLag
from bench._queue_cluster import QueueBench, RunCheck, fresh_database
from bench._setup import bench_main, parser
from bench._stats import (
    Figure,
    Row,
    machine_line,
    percentile,
    print_figures,
    print_table,
    revision_line,
)
from bench._workers import APP_BUSY_LOOP_LAG_MS
from tests.fakes.slack_api import FakeSlack
from tests.system.workers import Cluster

if TYPE_CHECKING:
    from bench._queue_cluster import Mention
    from tests.fakes.slack_messages import Message
    from tests.system.workers import WorkerProcess

TARGET_MS = 100.0
LIVE_PER_WORKER = 25
"""Phase (a): small, so that most of the runs wait in the queue."""
CLICKS = 100
CLICK_EVERY_S = 0.1
DRAIN_LIMIT_S = 100.0
"""Phase (a) gives up on the drain after this long (and says how far it got)."""
OVERLOAD_LIVE = 100
OVERLOAD_CLICKS = 50
"""Per kind (live, queued)."""
ONE_BOT_MANY_TEAMS = {"ALLOW_EXTERNAL_USERS": "true", "ALLOW_GUESTS": "true"}
"""The workspaces here are team ids that spread the load over Slack budgets (the module
doc), served by one bot token: to the trust gate a mention from any team but the token's
is from another organisation. The gate is not what this measures, so it lets them in."""


@dataclass
class Drain:
    """One round of phase (a)."""

    clicks_ms: list[float]
    took_s: float
    check: RunCheck
    note: str


async def phase_share(
    workers: int, runs: int, teams: int, rounds: int, llm_url: str, tmp: Path
) -> tuple[Row, Figure, list[RunCheck], list[str]]:
    """Phase (a) ``rounds`` times: the row pools their clicks."""
    drains = [
        await drain_once(workers, runs, teams, llm_url, tmp / f"share{workers}-{k}")
        for k in range(rounds)
    ]
    label = f"{workers} workers, {runs} runs" + (f", {rounds} rounds" if rounds > 1 else "")
    row = Row(
        f"click → ack during the drain ({label})",
        [ms for d in drains for ms in d.clicks_ms],
        "ms",
        TARGET_MS,
        target_id="shared_queue" if runs >= 1000 else None,
    )
    ended = sum(d.check.ended for d in drains)
    rate = Figure(f"throughput, {label}", ended / sum(d.took_s for d in drains), "runs/s", ended)
    notes = [f"{workers} workers, round {k + 1}: {d.note}" for k, d in enumerate(drains)]
    return row, rate, [d.check for d in drains], notes


async def drain_once(workers: int, runs: int, teams: int, llm_url: str, tmp: Path) -> Drain:
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database())
        slack = await stack.enter_async_context(FakeSlack())
        http = await stack.enter_async_context(aiohttp.ClientSession())
        cluster = Cluster(
            slack,
            llm_url,
            url,
            tmp,
            http,
            busy_loop_lag_ms=APP_BUSY_LOOP_LAG_MS,
        )
        cluster.cwd.mkdir(parents=True, exist_ok=True)
        stack.push_async_callback(cluster.close)
        await cluster.start(
            *(f"w{i}" for i in range(workers)),
            MAX_LIVE_RUNS=str(LIVE_PER_WORKER),
            **ONE_BOT_MANY_TEAMS,
        )
        clicker = await stack.enter_async_context(Clicker())
        bench = QueueBench(slack, cluster, url, teams, prefix=f"S{workers}", clicker=clicker)
        await bench.warm_up()

        started = time.monotonic()
        drained, lag = asyncio.Event(), LoopLag()
        lagging = asyncio.create_task(lag.run(drained))
        sending = asyncio.create_task(bench.mention_all(runs))
        clicking = asyncio.create_task(click_during(bench))
        most_queued = 0
        while time.monotonic() - started < DRAIN_LIMIT_S:
            await asyncio.sleep(0.2)  # the drain's re-check: the database cannot notify us
            states = await bench.states()
            most_queued = max(most_queued, states["queued"])
            live = sum(n for s, n in states.items() if s in ("queued", "running", "stopping"))
            if sending.done() and states.total() >= runs and live == 0:
                break
        took = time.monotonic() - started
        clicking.cancel()
        await asyncio.gather(clicking, return_exceptions=True)
        await sending
        drained.set()
        await lagging
        inside = await acks_inside(bench.workers, http)
        check = await bench.check()
    clicks = bench.clicks_ms
    note = (
        f"{check.line()}; {len(clicks)} clicks answered (slowest {max(clicks, default=0):.0f}"
        f" ms), {bench.unanswered} unanswered; most waiting at once {most_queued}; drain "
        f"{took:.1f} s"
        + ("" if check.ended >= runs else f" (gave up after {DRAIN_LIMIT_S:g} s)")
        + f"; this process's loop lag p99 {percentile(lag.samples, 99):.0f} ms; {inside}"
    )
    return Drain(clicks, took, check, note)


async def acks_inside(workers: list[WorkerProcess], http: aiohttp.ClientSession) -> str:
    """The Stop clicks' ack times as the workers measured them (``/metrics``: from the
    handler's start to the ack), summed over the workers, for comparison with the
    clicker's: the difference is time spent before the handler ran, in either process."""
    buckets: dict[float, float] = {}
    for worker in workers:
        async with http.get(f"{worker.url}/metrics") as response:
            text = await response.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name == "threadpilot_click_ack_seconds_bucket"
                    and sample.labels.get("control") == "stop"
                ):
                    le = float(sample.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + sample.value
    total = buckets.get(float("inf"), 0.0)
    if not total:
        return "the workers timed no clicks"
    p99 = next(le for le in sorted(buckets) if buckets[le] >= 0.99 * total)
    under = buckets.get(TARGET_MS / 1000, 0.0)
    return (
        f"inside the workers: {under:.0f} of {total:.0f} acked within {TARGET_MS:g} ms, "
        f"p99 at most {p99 * 1000:g} ms (histogram bucket)"
    )


async def click_during(bench: QueueBench) -> None:
    """Open loop: a Stop every CLICK_EVERY_S on a random run showing its buttons."""
    tasks: list[asyncio.Task[float]] = []
    try:
        while len(tasks) < CLICKS:
            await asyncio.sleep(CLICK_EVERY_S)  # the clicks' pacing
            target = bench.some_clickable()
            if target is not None:
                mention, message = target
                worker = random.choice(bench.workers)
                tasks.append(asyncio.create_task(bench.click(mention, message, worker)))
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        await asyncio.gather(*tasks, return_exceptions=True)  # let the clicks in flight land
        raise


async def phase_overload(tmp: Path) -> tuple[list[Row], list[str], bool]:
    live_ms: list[float] = []
    queued_ms: list[float] = []
    async with AsyncExitStack() as stack:
        server = stack.enter_context(llmock_server())
        server.state.scenarios.add(Reply(text=" ".join(["word"] * 50), times=None))
        server.state.scenarios.add(
            StreamFault("stall", after_chunks=2, stall_seconds=120.0, times=None)
        )
        url = await stack.enter_async_context(fresh_database())
        slack = await stack.enter_async_context(FakeSlack())
        http = await stack.enter_async_context(aiohttp.ClientSession())
        cluster = Cluster(
            slack,
            server.base_url(),
            url,
            tmp / "overload",
            http,
            # Off here: this phase is about the runs MAX_LIVE_RUNS holds back. A worker that
            # queues a mention because its loop is late (200 arriving at once) starts it
            # once calm, with room to spare, so a run shown "Queued" could be live by its
            # click and the queued runs' checks would not be about the queue.
            busy_loop_lag_ms="0",
        )
        cluster.cwd.mkdir(parents=True, exist_ok=True)
        stack.push_async_callback(cluster.close)
        await cluster.start("w0", MAX_LIVE_RUNS=str(OVERLOAD_LIVE), **ONE_BOT_MANY_TEAMS)
        clicker = await stack.enter_async_context(Clicker())
        bench = QueueBench(slack, cluster, url, 1, prefix="OV", clicker=clicker)  # module doc
        await bench.warm_up(stalled=True)
        before = len(server.state.journal.records()) + server.state.journal.in_flight

        await bench.mention_all(2 * OVERLOAD_LIVE)
        await slack.wait_until(
            lambda _s: len(bench.clickable()) >= 2 * OVERLOAD_LIVE or None, timeout=60
        )
        live = bench.clickable(queued=False)
        queued = bench.clickable(queued=True)
        pairs: list[tuple[tuple[Mention, Message], list[float]]] = []
        for k in range(OVERLOAD_CLICKS):
            pairs += [(live[k], live_ms), (queued[k], queued_ms)]
        worker = bench.workers[0]
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.05

        async def one(k: int, target: tuple[Mention, Message], samples: list[float]) -> None:
            await asyncio.sleep(max(0.0, start + k * 0.02 - loop.time()))  # open loop
            took = await bench.click(*target, worker)
            if took == took:  # not NaN: answered
                samples.append(took)

        await asyncio.gather(*(one(k, t, s) for k, (t, s) in enumerate(pairs)))
        clicked_queued = [m for (m, _msg) in queued[:OVERLOAD_CLICKS]]
        ended, not_ended = await ended_in_queue(url, clicked_queued)
        model_calls = len(server.state.journal.records()) + server.state.journal.in_flight
        model_calls -= before
    reached_model = model_calls - OVERLOAD_LIVE
    ok = bench.unanswered == 0 and not_ended == 0 and reached_model == 0
    rows = [
        Row(
            f"click → ack, live run ({OVERLOAD_LIVE} live + {OVERLOAD_LIVE} queued)",
            live_ms,
            "ms",
            TARGET_MS,
            target_id="overload_ack",
        ),
        Row(
            f"click → ack, queued run ({OVERLOAD_LIVE} live + {OVERLOAD_LIVE} queued)",
            queued_ms,
            "ms",
            TARGET_MS,
            target_id="overload_ack",
        ),
    ]
    notes = [
        f"overload: {len(live_ms)} live and {len(queued_ms)} queued clicks answered, "
        f"{bench.unanswered} unanswered; queued runs clicked: {ended} ended in the queue, "
        f"{not_ended} not; model requests beyond one per live run: {reached_model}"
    ]
    return rows, notes, ok


async def ended_in_queue(url: str, mentions: list[Mention]) -> tuple[int, int]:
    """(ended where they waited, not) for the queued runs clicked: ``userinterlude``, no
    turn taken. Waited for (bounded): the ending is written after the ack."""
    threads = [m.ts for m in mentions]
    deadline = time.monotonic() + 20
    while True:
        db = await asyncpg.connect(url)
        try:
            rows = await db.fetch(
                "SELECT state, result FROM runs WHERE thread_ts = ANY($1::text[])", threads
            )
        finally:
            await db.close()
        ended = sum(
            1
            for r in rows
            if r["state"] == "userinterlude" and json.loads(r["result"] or "{}").get("turns") == 0
        )
        if ended == len(threads) or time.monotonic() > deadline:
            return ended, len(threads) - ended
        await asyncio.sleep(0.2)  # the database cannot notify us


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--workers", default="2,4")
    p.add_argument("--teams", type=int, default=40, help="workspaces the mentions go to")
    p.add_argument("--rounds", type=int, default=3, help="drains per worker count (a)")
    p.add_argument("--skip-overload", action="store_true")
    p.set_defaults(time_limit=400.0)
    args = p.parse_args()

    async def run() -> bool:
        rows: list[Row] = []
        figures: list[Figure] = []
        notes: list[str] = []
        ok = True
        with tempfile.TemporaryDirectory() as tmp:
            async with llmock_process("--words", "5") as llm_url:
                for workers in (int(w) for w in args.workers.split(",")):
                    row, rate, checks, more = await phase_share(
                        workers, args.runs, args.teams, args.rounds, llm_url, Path(tmp)
                    )
                    rows.append(row)
                    figures.append(rate)
                    notes += more
                    ok &= all(c.wrong == 0 and c.ended == args.runs for c in checks)
            if not args.skip_overload:
                got, more, passed = await phase_overload(Path(tmp))
                rows += got
                notes += more
                ok &= passed
        print_table("queue_share: click → ack while worker processes share the queue", rows, notes)
        print_figures(
            "queue_share: drain throughput",
            [replace(f) for f in figures],
            [
                f"mentions over {args.teams} workspace(s), a channel each; MAX_LIVE_RUNS="
                f"{LIVE_PER_WORKER} per worker; llmock answers 5 words at once",
                machine_line(),
                revision_line(),
                "workers, PostgreSQL, the fake Slack and llmock share the cores",
            ],
        )
        return ok and all(r.verdict != "MISS" for r in rows)

    bench_main(args, run)


if __name__ == "__main__":
    main()
