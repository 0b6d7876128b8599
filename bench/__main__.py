"""Run every benchmark, one process each: ``.venv/bin/python -m bench [name ...]``.

Each prints its own table. At the end this prints one line per benchmark (time taken,
exit status) and then every performance target with the figures reported for it, its
goal and a verdict: PASS, MISS, "-" with the reason when there is no figure (the benchmark
was not selected, is not in this tree, could not run here, failed or gave up), or "part"
when only some of the benchmarks that judge the target reported (all of them passed).
Benchmarks report their figures through ``bench._report`` (a JSON-lines file named by
``BENCH_REPORT``, set here for each child). Exit status 0 only if every selected
benchmark ran and passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._report import ENV, TARGETS
from bench._setup import NOT_RUN

BENCHMARKS = (
    "abort_close",
    "abort_peer",
    "model_paths",
    "stop_final_turn",
    "child_stop_final_turn",
    "budget_final_turn",
    "fan_out",
    "abort_click_close",
    "click_effect",
    "click_ack",
    "chunk_cpu",
    "queue_share",
    "memory",
    "stop_propagation",
    "mcp_abort_cancel",
    "approval_call",
    "slack_429",
    "sigterm_exit",
    "restart_reconcile",
    "no_loss",
    "installation_lookup",
    "tracing_ab",
)
CHILD_LIMIT_S = 150.0
CHILD_LIMITS_S = {"queue_share": 420.0, "chunk_cpu": 220.0}
"""Benchmarks that need longer than :data:`CHILD_LIMIT_S` (``queue_share`` drains 1,000
runs six times: three rounds each with 2 and 4 workers; ``chunk_cpu`` has a phase per
model API)."""
OUTCOME = {
    0: "all targets met",
    1: "MISS (see its table)",
    2: "gave up (time limit)",
    NOT_RUN: "not run (see its message)",
}
HERE = Path(__file__).resolve().parent


@dataclass
class Outcome:
    name: str
    code: int | None
    """None: the script is not in this tree."""
    seconds: float = 0.0
    figures: list[dict[str, str]] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.code is None:
            return "not in this tree"
        return OUTCOME.get(self.code, f"failed (exit {self.code})")


def run_one(name: str) -> Outcome:
    if not (HERE / f"{name}.py").exists():
        return Outcome(name, None)
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", encoding="utf-8") as sink:
        started = time.monotonic()
        try:
            code = subprocess.run(
                [sys.executable, "-m", f"bench.{name}"],
                timeout=CHILD_LIMITS_S.get(name, CHILD_LIMIT_S),
                check=False,
                env={**os.environ, ENV: sink.name},
            ).returncode
        except subprocess.TimeoutExpired:
            code = 2
        figures = [json.loads(line) for line in sink.read().splitlines() if line.strip()]
    return Outcome(name, code, time.monotonic() - started, figures)


def target_lines(outcomes: list[Outcome]) -> list[tuple[str, str, str, str]]:
    """(verdict, target, goal, measured) rows; continuation rows leave the first three empty."""
    by_name = {o.name: o for o in outcomes}
    lines: list[tuple[str, str, str, str]] = []
    for key, target in TARGETS.items():
        figures = [f for o in outcomes for f in o.figures if f["target"] == key]
        measured = [
            f"{f['benchmark']}: {f['measure']}: {f['value']} {f['verdict']}" for f in figures
        ]
        # A target judged by several benchmarks (abort_close: absolute and against the
        # Agents SDK) is only passed when each of them reported.
        missing = [b for b in target.benchmarks if not any(f["benchmark"] == b for f in figures)]
        for name in missing:
            o = by_name.get(name)
            measured.append(f"{name}: {'not selected' if o is None else o.status}, no figure")
        if any(f["verdict"] != "PASS" for f in figures):
            verdict = "MISS"
        elif missing:
            verdict = "part" if figures else "-"
        else:
            verdict = "PASS"
        for i, text in enumerate(measured):
            head = (verdict, target.what, target.target) if i == 0 else ("", "", "")
            lines.append((*head, text))
    return lines


def print_summary(outcomes: list[Outcome]) -> None:
    print("\n== summary: benchmarks ==")
    for o in outcomes:
        print(f"{o.name:<18} {o.seconds:5.0f} s  {o.status}")
    print("\n== summary: targets ==")
    lines = [("verdict", "target", "goal", "measured"), *target_lines(outcomes)]
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    for index, line in enumerate(lines):
        cells = [c.ljust(w) for c, w in zip(line[:3], widths, strict=True)]
        print("  ".join([*cells, line[3]]).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in [*widths, len("measured")]))
    sys.stdout.flush()


def main() -> int:
    names = sys.argv[1:] or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    outcomes = [run_one(name) for name in names]
    print_summary(outcomes)
    return 0 if all(o.code == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
