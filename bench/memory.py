"""Memory per live streaming run: < 200 KB, 1,000 runs in one process (bench/README.md).

Three kinds of run, each measured in fresh child processes so one cannot inherit
another's freed heap:

- core, scripted: ``--runs`` (1,000) core runs on :class:`ScriptedChatModel`, each held
  after its first streamed word. No HTTP: the loop's own cost (run, tasks, events,
  conversation). The scripted answer is three words: the fake splits its whole answer up
  front, which a real stream does not, so a long one would bill the fake to the run.
- core, llmock: ``--http-runs`` (1,000) core runs on the real :class:`OpenAIChatModel`,
  each with a real HTTP stream open to llmock, which runs in *another* process and stalls
  every answer after the first word. This adds the SDK's and httpx's per-stream cost.
- Slack app: ``--app-runs`` (1,000) runs of the real ThreadpilotApp, started by signed
  @mentions, streaming from llmock; the fake Slack and llmock run in processes of their
  own (``bench/_memory_app.py``). This is what a worker process holds per run.

Per kind: warm up (a few runs held and aborted), then start N runs at once and wait
until every one has streamed its first text. Memory is read as RSS (``VmRSS`` in
/proc/self/status) with tracemalloc off, and separately as Python heap with tracemalloc
on (which costs RSS itself). Each figure is (after - before) / N. Then every run is
aborted, and the benchmark checks that each one ended as an abort.

Usage: ``.venv/bin/python -m bench.memory [--runs N] [--http-runs N] [--app-runs N]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tracemalloc
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agent_core import Agent, ExitCode, StopReason, TextDelta
from agent_core.testing import ScriptedChatModel, ScriptedTurn
from bench._llmock import llmock_process, openai_model
from bench._memory_app import measure_app
from bench._probes import rss_kb
from bench._setup import bench_main, parser
from bench._stats import Figure, machine_line, print_figures, revision_line

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from agent_core import ChatModel, RunEvent, RunResult

Child = Literal["scripted", "llmock", "app-rss", "app-heap"]
LIMIT_KB = 200.0
WARMUP = 10
TOP_SITES = 6
HELD_TEXT = "Working on it"


@dataclass(frozen=True)
class Measured:
    """What a child process reports (as one JSON line) for one kind of run."""

    runs: int
    rss_kb: float
    heap_kb: float
    leftover_kb: float | None
    """Python heap still held per run after all were aborted (a leak if large)."""
    aborted: int
    top: list[tuple[str, float]]
    """Files that allocated the most per run (KB), from tracemalloc."""


class _FirstText:
    """Counts runs that have streamed their first text; one shared listener for all."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.seen: set[str] = set()
        self.all_streaming = asyncio.Event()

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta) and event.run_id not in self.seen:
            self.seen.add(event.run_id)
            if len(self.seen) >= self.expected:
                self.all_streaming.set()


@dataclass
class _Ended:
    aborted: int = 0


@asynccontextmanager
async def held_runs(agent: Agent, n: int) -> AsyncIterator[_Ended]:
    """Start ``n`` runs, yield once all are mid-stream, then abort them all and count."""
    ended = _Ended()
    watch = _FirstText(n)
    runs = [agent.new_run(f"task {i}: write a long answer") for i in range(n)]
    for run in runs:
        run.events.add_listener(watch)
    tasks = [asyncio.create_task(run.run(), name=f"bench-run-{i}") for i, run in enumerate(runs)]
    try:
        async with asyncio.timeout(60):
            await watch.all_streaming.wait()
        yield ended
    finally:
        for run in runs:
            run.request_stop(StopReason.ABORT, "bench")
        results: list[RunResult] = await asyncio.gather(*tasks)
        ended.aborted = sum(r.exit_code is ExitCode.USER_ABORT for r in results)


async def measure_core(model: ChatModel, n: int) -> Measured:
    agent = Agent(model)
    for _ in range(WARMUP):
        _script(model, 1)
        async with held_runs(agent, 1):
            pass
    # Pass 1: RSS, tracemalloc off.
    await _settle(model, n)
    before = rss_kb()
    async with held_runs(agent, n) as first:
        gc.collect()
        rss = (rss_kb() - before) / n
    # Pass 2: the Python heap, with tracemalloc on.
    await _settle(model, n)
    tracemalloc.start()
    start = tracemalloc.take_snapshot()
    base = tracemalloc.get_traced_memory()[0]
    async with held_runs(agent, n) as second:
        gc.collect()
        traced = (tracemalloc.get_traced_memory()[0] - base) / 1024 / n
        top = [
            (str(stat.traceback[0].filename), stat.size_diff / 1024 / n)
            for stat in tracemalloc.take_snapshot().compare_to(start, "filename")[:TOP_SITES]
        ]
    await _settle(model, 0)
    leftover = (tracemalloc.get_traced_memory()[0] - base) / 1024 / n
    tracemalloc.stop()
    return Measured(
        runs=n,
        rss_kb=rss,
        heap_kb=traced,
        leftover_kb=leftover,
        aborted=min(first.aborted, second.aborted),
        top=top,
    )


async def _settle(model: ChatModel, n: int) -> None:
    """Script the next ``n`` runs, and let the last batch's garbage go before measuring."""
    # Finished tasks are released a loop iteration or two after gather() returns.
    for _ in range(3):
        await asyncio.sleep(0)
    _script(model, n)
    gc.collect()


def _script(model: ChatModel, n: int) -> None:
    """Queue ``n`` held turns on a scripted model (a real model needs no script)."""
    if isinstance(model, ScriptedChatModel):
        hold = asyncio.Event()  # never set: every turn stays mid-stream until aborted
        model.script[:] = [ScriptedTurn(HELD_TEXT, hold=hold) for _ in range(n)]
        model.requests.clear()  # the fake keeps every request; a real model does not


async def child(kind: Child, n: int) -> bool:
    """Measure one kind of run in this (fresh) process; print the result as JSON."""
    if kind == "scripted":
        measured = await measure_core(ScriptedChatModel(), n)
    elif kind == "llmock":
        async with llmock_process("--stall", "120") as base_url:
            model = openai_model(base_url)
            try:
                measured = await measure_core(model, n)
            finally:
                await model.aclose()
    else:
        app = await measure_app(n, "rss" if kind == "app-rss" else "heap")
        value = app.kb_per_run
        measured = Measured(n, value, value, None, app.aborted, app.top)
    print(json.dumps(asdict(measured)))
    return True


def run_child(kind: Child, n: int, log_level: str) -> Measured:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.memory",
            "--child",
            kind,
            "--runs",
            str(n),
            "--log-level",
            log_level,
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"memory child {kind} failed:\n{completed.stderr}")
    data = json.loads(completed.stdout.strip().splitlines()[-1])
    data["top"] = [tuple(t) for t in data["top"]]
    return Measured(**data)


async def parent(runs: int, http_runs: int, app_runs: int, log_level: str) -> bool:
    def measure(kind: Child, n: int) -> Measured:
        return run_child(kind, n, log_level)

    def others() -> tuple[Measured, Measured, Measured]:
        return measure("scripted", runs), measure("llmock", http_runs), measure("app-rss", app_runs)

    # Two lanes at once: the slowest child (tracemalloc on a whole app) beside the rest.
    # Each figure is one process's own memory, so running side by side does not change it.
    (scripted, http, app_rss), app_heap = await asyncio.gather(
        asyncio.to_thread(others), asyncio.to_thread(measure, "app-heap", app_runs)
    )
    app = replace(app_heap, rss_kb=app_rss.rss_kb, aborted=min(app_rss.aborted, app_heap.aborted))
    kinds = (
        (scripted, "core, scripted model"),
        (http, "core, OpenAIChatModel"),
        (app, "Slack app, OpenAIChatModel"),
    )
    figures: list[Figure] = []
    notes: list[str] = []
    for m, label in kinds:
        target_id = "memory" if m.runs >= 1000 else None  # the target is for 1,000 runs
        figures += [
            Figure(f"{label}: RSS per live run", m.rss_kb, "KB", m.runs, LIMIT_KB, target_id),
            Figure(
                f"{label}: Python heap per live run", m.heap_kb, "KB", m.runs, LIMIT_KB, target_id
            ),
        ]
        if m.leftover_kb is not None:
            figures.append(
                Figure(f"{label}: heap left per run after abort", m.leftover_kb, "KB", m.runs)
            )
        sites = ", ".join(f"{_short(f)} {kb:.1f}" for f, kb in m.top)
        notes += [
            f"{label}: {m.aborted}/{m.runs} runs ended as EXIT-USER-ABORT after abort-all",
            f"{label}: heap per run by file (KB): {sites}",
        ]
    notes += [
        "llmock (and, for the Slack app, the fake Slack) run in processes of their own, so "
        "their memory is not counted; kernel socket buffers are not in RSS either",
        machine_line(),
        revision_line(),
    ]
    print_figures("memory: per live streaming run, runs held mid-stream at once", figures, notes)
    ended = all(m.aborted == m.runs for m, _ in kinds)
    return ended and all(f.verdict != "MISS" for f in figures)


def _short(path: str) -> str:
    """A file name as a reader would look for it: within the repo or the library."""
    repo = str(Path(__file__).resolve().parents[1]) + "/"
    if path.startswith(repo):
        return path.removeprefix(repo)
    for marker in ("site-packages/", f"python{sys.version_info.major}.{sys.version_info.minor}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "memory")
    p.add_argument("--runs", type=int, default=1000, help="runs on the scripted model")
    p.add_argument("--http-runs", type=int, default=1000, help="core runs streaming from llmock")
    p.add_argument("--app-runs", type=int, default=1000, help="Slack app runs")
    p.add_argument(
        "--child", choices=["scripted", "llmock", "app-rss", "app-heap"], help=argparse.SUPPRESS
    )
    args = p.parse_args()
    if args.child:
        bench_main(args, lambda: child(args.child, args.runs))
    else:
        bench_main(args, lambda: parent(args.runs, args.http_runs, args.app_runs, args.log_level))


if __name__ == "__main__":
    main()
