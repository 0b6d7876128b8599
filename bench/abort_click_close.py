"""Abort click over HTTP → upstream LLM connection closed, same worker: p99 < 50 ms
(bench/README.md).

The real ThreadpilotApp over HTTP, the fake Slack, and llmock: in a thread of this
process for the quiet part, in a process of its own for the loaded part (whose 4,000
chunks/s would otherwise be this process's CPU too). Its journal's ``ended_at``, the
moment the server saw the connection go, is ``time.monotonic()`` either way: the
benchmark's clock. ``t0`` is taken just before the signed ``block_actions`` POST is
sent; the figure is ``ended_at`` of that run's model request - ``t0``. Two settings:

- quiet: one run at a time (``--trials``, 200), its answer stalled mid-stream, so
  nothing else competes with the click;
- loaded: ``--runs`` (200) runs streaming, paced at one chunk per ``--chunk-ms`` (as in
  click_ack), and each of them gets an Abort click, open loop every ``--interval-ms``;
  each aborted run is replaced by a new one.

Also shown: the click's HTTP ack time. Every click is checked to have cut its run's
model stream short, and to have its stop request committed in the store (docs/architecture.md,
The path of a click: committed before the ack).

Usage: ``.venv/bin/python -m bench.abort_click_close [--trials N] [--runs N]
[--chunk-ms MS] [--interval-ms MS]``
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core import StopReason
from bench._llmock import (
    answers_that_stall,
    journal_of,
    llmock_server,
    paced_llmock,
    settled_records,
)
from bench._probes import LoopLag
from bench._setup import bench_main, parser
from bench._slack_app import ACTION_ABORT, LoadedApp
from bench._stats import Row, machine_line, percentile, print_table, revision_line

if TYPE_CHECKING:
    from llmock.journal import RequestRecord
    from llmock.testing import LLMockServer

    from bench._slack_app import Target

TARGET_MS = 50.0
WORDS = 5000


@dataclass
class Clicks:
    t0: dict[str, float] = field(default_factory=dict)
    """Task text → monotonic time the Abort click was sent."""
    ack_ms: list[float] = field(default_factory=list)
    close_ms: list[float] = field(default_factory=list)
    """Click → llmock saw the connection go (its journal's ``ended_at``)."""
    returned_ms: list[float] = field(default_factory=list)
    """Click → the run's model call returned cancelled, its connection already closed."""
    run_of: dict[str, str] = field(default_factory=dict)
    """Task text → run id."""
    not_cut: int = 0
    """Clicks whose model request was not cut short, or whose record never appeared."""
    clicked: list[tuple[str, StopReason]] = field(default_factory=list)
    uncommitted: int = 0
    """Clicks acknowledged without their stop request committed (it must be, before the ack)."""
    lag_ms: list[float] = field(default_factory=list)

    def settle(self, records: list[RequestRecord]) -> None:
        by_task = {_task_of(r): r for r in records}
        for task, t0 in self.t0.items():
            record = by_task.get(task)
            if record is None or record.completed:
                self.not_cut += 1
                continue
            self.close_ms.append((record.ended_at - t0) * 1000)


def _task_of(record: RequestRecord) -> str:
    messages = (record.body or {}).get("messages") or [{}]
    return str(messages[-1].get("content", ""))


async def abort(app: LoadedApp, clicks: Clicks, target: Target) -> None:
    payload = app.click_payload(target, ACTION_ABORT)
    clicks.clicked.append((target.run_id, StopReason.ABORT))
    clicks.run_of[target.task] = target.run_id
    clicks.t0[target.task] = time.monotonic()
    clicks.ack_ms.append(await app.click_http(payload) * 1000)


async def quiet(llm: LLMockServer, trials: int) -> Clicks:
    answers_that_stall(llm)
    clicks = Clicks()
    app = LoadedApp(llm.base_url(), "http")
    await app.start()
    try:
        for _ in range(trials):
            target = await app.wait_streaming_thread(await app.mention())
            await abort(app, clicks, target)
            # One at a time: the next trial starts once the server has seen this close.
            clicks.settle(await settled_records(llm))
            clicks.t0.clear()
            llm.state.journal.clear()
        clicks.uncommitted = await app.uncommitted(clicks.clicked)
    finally:
        await app.close()
        llm.state.reset()
    return clicks


async def loaded(llm_url: str, runs: int, chunk_ms: int, interval_s: float) -> Clicks:
    clicks = Clicks()
    app = LoadedApp(llm_url, "http")
    await app.start()
    try:
        await app.fill(runs)
        targets = app.streaming_targets()[:runs]
        done, lag = asyncio.Event(), LoopLag()
        async with asyncio.TaskGroup() as group:
            lag_task = group.create_task(lag.run(done))
            start = asyncio.get_running_loop().time() + 0.05
            aborts = [
                group.create_task(_abort_at(app, clicks, target, start + k * interval_s))
                for k, target in enumerate(targets)
            ]
            replacements = await asyncio.gather(*aborts)
            done.set()
            await lag_task
            await asyncio.gather(*replacements)
        clicks.lag_ms = lag.samples
        clicks.settle(await _records_for(llm_url, set(clicks.t0)))
        for task, t0 in clicks.t0.items():
            returned = app.watch.cancelled_at.get(clicks.run_of[task])
            if returned is not None:
                clicks.returned_ms.append((returned - t0) * 1000)
        clicks.uncommitted = await app.uncommitted(clicks.clicked)
    finally:
        await app.close()
    return clicks


async def _abort_at(
    app: LoadedApp, clicks: Clicks, target: Target, at: float
) -> asyncio.Task[object]:
    await asyncio.sleep(max(0.0, at - asyncio.get_running_loop().time()))
    await abort(app, clicks, target)
    # Keep the load up: a new streaming run for each one aborted (not timed).
    return asyncio.create_task(app.mention())


async def _records_for(llm_url: str, tasks: set[str]) -> list[RequestRecord]:
    """The journal once every aborted run's request is in it (bounded)."""
    # Other runs are still streaming, so "nothing in flight" never comes: poll the
    # journal (in the llmock process, over HTTP) for at most 10 s.
    async with asyncio.timeout(10):
        while True:
            records = await journal_of(llm_url)
            if tasks <= {_task_of(r) for r in records}:
                return records
            await asyncio.sleep(0.05)


async def measure(trials: int, runs: int, chunk_ms: int, interval_ms: float) -> bool:
    with llmock_server() as llm:
        calm = await quiet(llm, trials)
    # Loaded: llmock in a process of its own, or its 4,000 chunks/s would be this
    # process's CPU too.
    async with paced_llmock("process", chunk_ms=chunk_ms, words=WORDS) as llm_url:
        busy = await loaded(llm_url, runs, chunk_ms, interval_ms / 1000)
    rows = [
        Row("quiet: click → llmock saw close", calm.close_ms, "ms", TARGET_MS),
        Row("quiet: click → HTTP ack", calm.ack_ms, "ms"),
        Row(
            f"{runs} streaming: click → connection closed, model call returned",
            busy.returned_ms,
            "ms",
            TARGET_MS,
            target_id="abort_click_close" if runs >= 200 else None,
        ),
        Row(f"{runs} streaming: click → llmock saw close", busy.close_ms, "ms"),
        Row(f"{runs} streaming: click → HTTP ack", busy.ack_ms, "ms"),
    ]
    print_table(
        "abort_click_close: Abort click over HTTP → upstream LLM connection closed",
        rows,
        [
            "loaded, judged: the model closes its connection before its call returns "
            "cancelled (abort_close checks that order), so the return bounds the close from "
            "above; llmock, streaming to 200 clients from another process, notices a close "
            "only at its next write to it (up to one chunk interval later), so its ended_at "
            "is shown for information",
            f"loaded clicks whose model call never returned cancelled: "
            f"{len(busy.t0) - len(busy.returned_ms)}",
            f"clicks whose model stream was not cut short (or never seen closed): quiet "
            f"{calm.not_cut}, loaded {busy.not_cut}; acked without their stop request "
            f"committed: quiet {calm.uncommitted}, loaded {busy.uncommitted}",
            f"loaded: {runs} runs paced at one chunk per {chunk_ms} ms "
            f"(~{runs * 1000 // chunk_ms} chunks/s), one Abort every {interval_ms:g} ms; "
            f"event-loop lag p50 {percentile(busy.lag_ms, 50):.1f} ms, "
            f"p99 {percentile(busy.lag_ms, 99):.1f} ms",
            "app + fake Slack on one event loop; llmock in a thread for the quiet part, in "
            "a process of its own for the loaded part (its journal read over HTTP; "
            "its monotonic clock is this one's); ended_at is taken by llmock when it sees "
            "the disconnect",
            machine_line(),
            revision_line(),
        ],
    )
    not_returned = len(busy.t0) - len(busy.returned_ms)
    wrong = calm.not_cut + busy.not_cut + calm.uncommitted + busy.uncommitted + not_returned
    return wrong == 0 and all(r.verdict != "MISS" for r in rows)


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "abort_click_close")
    p.add_argument("--trials", type=int, default=200, help="quiet trials")
    p.add_argument("--runs", type=int, default=200, help="streaming runs in the loaded part")
    p.add_argument("--chunk-ms", type=int, default=50, help="llmock delay between chunks")
    p.add_argument("--interval-ms", type=float, default=25.0, help="time between clicks")
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials, args.runs, args.chunk_ms, args.interval_ms))


if __name__ == "__main__":
    main()
