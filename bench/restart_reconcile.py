"""Restart → orphaned runs reconciled: all of them, within the lease TTL + 10 s.

Each trial starts a real ``python -m bot`` worker A (``bench/_workers.py``, ``LEASE_TTL``
3 s), starts ``--runs`` runs on it through @mentions and waits until each one's model
stream is open (llmock streams two chunks, then stalls for a minute). Then it kills A
with SIGKILL (``t0``) and at once starts a fresh worker B on the same database, as a
restart would. A run counts as reconciled when its status message in the fake Slack first
says the worker running it stopped (the fake's time of that update, on this process's
clock); the figure is the time from ``t0`` until the last run of the trial is reconciled,
B's start-up included. Also checked: afterwards every run is terminal in the database and
no longer owned by A. ``AUTO_RESUME=none``, so B does not resume the runs.

Usage: ``.venv/bin/python -m bench.restart_reconcile [--trials 3] [--runs 10]``
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault

from agent_core import RunState
from bench._llmock import LONG_TEXT
from bench._report import report
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line
from bench._workers import LEASE_TTL_S, mention, run_rows, workers
from bot import messages
from tests.system.workers import WorkerProcess, until

if TYPE_CHECKING:
    from bench._workers import Workers

BOUND_S = LEASE_TTL_S + 10.0
STALL_S = 60.0
SETTINGS = {"AUTO_RESUME": "none"}


@dataclass(frozen=True)
class Trial:
    last_s: float
    """t0 → the last run reconciled (inf if one never was within the wait)."""
    each_s: list[float]
    db_s: float
    """t0 → every run terminal in the database (reconciled, before Slack is told)."""
    reconciled_in_bound: int
    runs: int
    not_terminal: int


async def one_trial(w: Workers, index: int, runs: int) -> Trial:
    before = set(run_rows(w.database))
    journal = w.llm.state.journal
    journal.clear()
    (first,) = await w.cluster.start(f"a{index}", **SETTINGS)
    statuses = [
        await mention(w, first, f"trial {index} task {i}: a long answer", f"CR{index}X{i:03d}")
        for i in range(runs)
    ]
    await until(lambda: journal.in_flight >= runs, what=f"{runs} model streams open")
    assert first.process is not None
    t0 = time.monotonic()
    first.process.send_signal(signal.SIGKILL)
    await first.process.wait()
    second = await _start_unready(w, f"b{index}")
    in_db = asyncio.create_task(_reconciled_in_db(w, before, first.name, runs))
    said = await asyncio.gather(
        *(
            w.cluster.revision_saying(s, messages.WORKER_LOST, timeout=BOUND_S + 10.0)
            for s in statuses
        ),
        return_exceptions=True,
    )
    each = [at - t0 if isinstance(at, float) else float("inf") for at in said]
    db_s = (await in_db) - t0
    await second.wait_ready()
    await second.stop()
    rows = {k: v for k, v in run_rows(w.database).items() if k not in before}
    not_terminal = sum(
        not RunState(state).is_terminal or owner == first.name for state, owner in rows.values()
    )
    in_bound = sum(s <= BOUND_S for s in each)
    return Trial(max(each), each, db_s, in_bound, len(rows), not_terminal)


async def _reconciled_in_db(w: Workers, before: set[str], killed: str, runs: int) -> float:
    """When (this clock) every run of the trial was terminal and not owned by ``killed``:
    re-read every 50 ms with a connection of our own (inf if not within the wait)."""

    def done() -> bool:
        rows = [v for k, v in run_rows(w.database).items() if k not in before]
        return len(rows) == runs and all(
            RunState(state).is_terminal and owner != killed for state, owner in rows
        )

    try:
        await until(done, what="runs reconciled in the database", timeout=BOUND_S + 10.0)
    except TimeoutError:
        return float("inf")
    return time.monotonic()


async def _start_unready(w: Workers, name: str) -> WorkerProcess:
    """Start a worker without waiting for it to be ready: start-up is part of the figure."""
    settings = w.cluster.settings(name, **SETTINGS)
    worker = WorkerProcess(name, settings, w.cluster.cwd, w.cluster.http)
    w.cluster.workers[name] = worker
    await worker.start()
    return worker


async def measure(trials: int, runs: int) -> bool:
    async with workers() as w:
        w.llm.state.scenarios.add(
            Reply(text=LONG_TEXT, times=None),
            StreamFault("stall", after_chunks=2, stall_seconds=STALL_S, times=None),
        )
        results = [await one_trial(w, i, runs) for i in range(trials)]
    total = runs * trials
    in_bound = sum(t.reconciled_in_bound for t in results)
    wrong = sum(t.not_terminal + (t.runs != runs) for t in results)
    row = Row(
        f"kill -9 → last of {runs} runs' messages say so",
        [t.last_s for t in results],
        "s",
        BOUND_S,
        judged="max",
        target_id="restart_reconcile",
        target_text=f"max < TTL {LEASE_TTL_S:g} + 10 s",
    )
    each = Row("kill -9 → each run's message updated", [s for t in results for s in t.each_s], "s")
    db = Row(f"kill -9 → all {runs} runs terminal in the database", [t.db_s for t in results], "s")
    share = 100.0 * in_bound / total
    report(
        "restart_reconcile",
        "runs reconciled within the bound",
        f"{in_bound}/{total} ({share:.0f} %)",
        "PASS" if in_bound == total and wrong == 0 else "MISS",
    )
    print_table(
        "restart_reconcile: kill -9 a worker, start another → orphaned runs reconciled",
        [row, each, db],
        [
            f"runs reconciled within {BOUND_S:g} s: {in_bound}/{total} ({share:.0f} %); "
            f"runs not terminal or still owned by the killed worker afterwards: {wrong}",
            f"per trial: {runs} runs streaming (stalled) on worker A; SIGKILL; worker B "
            "started at once (its start-up, about 2 s of imports, is in the figure)",
            "workers: real python -m bot (HTTP, SQLite file, LEASE_TTL 3 s, AUTO_RESUME=none);"
            " fake Slack and llmock in this process",
            machine_line(),
            revision_line(),
        ],
    )
    return row.verdict == "PASS" and in_bound == total and wrong == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "restart_reconcile")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials, args.runs))


if __name__ == "__main__":
    main()
