"""Percentiles and the results table every benchmark prints.

Percentiles use the nearest-rank method on the raw samples (no interpolation): the p99
of 200 samples is the 198th smallest, a value that was actually observed.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench._report import report

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "Figure",
    "Row",
    "machine_line",
    "percentile",
    "print_figures",
    "print_table",
    "revision_line",
]


def percentile(samples: list[float], pct: float) -> float:
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Row:
    """One measured figure beside its target (``limit`` in the unit of the samples)."""

    what: str
    samples: list[float]
    unit: str
    """``ms`` or ``KB``; samples are already in this unit."""
    limit: float | None = None
    """Target for the judged statistic; None prints the row for information only."""
    judged: str = "p99"
    """Which statistic the target applies to: ``p99`` or ``max`` or ``mean``."""
    target_id: str | None = None
    """The target this row judges (a key of ``bench._report.TARGETS``): printing reports it."""
    target_text: str | None = None
    """How to show the target, when ``judged < limit`` does not say it (e.g. a ratio)."""

    def stat(self, name: str) -> float:
        if name == "mean":
            return sum(self.samples) / len(self.samples) if self.samples else math.nan
        if name == "max":
            return max(self.samples) if self.samples else math.nan
        return percentile(self.samples, float(name.removeprefix("p")))

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return "info"
        value = self.stat(self.judged)
        return "PASS" if value < self.limit else "MISS"


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def print_table(title: str, rows: Sequence[Row], notes: Sequence[str] = ()) -> None:
    """Print ``rows`` as an aligned table, then ``notes`` (one per line)."""
    header = ("measure", "n", "p50", "p90", "p99", "max", "target", "verdict")
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        target = "-" if row.limit is None else f"{row.judged} < {row.limit:g} {row.unit}"
        target = row.target_text or target
        if row.target_id is not None and row.verdict != "info":
            value = f"{_fmt(row.stat(row.judged))} {row.unit} ({row.judged}, n={len(row.samples)})"
            report(row.target_id, row.what, value, "PASS" if row.verdict == "PASS" else "MISS")
        lines.append(
            (
                f"{row.what} [{row.unit}]",
                str(len(row.samples)),
                _fmt(row.stat("p50")),
                _fmt(row.stat("p90")),
                _fmt(row.stat("p99")),
                _fmt(row.stat("max")),
                target,
                row.verdict,
            )
        )
    _print_lines(title, lines, notes)


def _print_lines(title: str, lines: list[tuple[str, ...]], notes: Sequence[str]) -> None:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    print(f"\n== {title} ==")
    for index, line in enumerate(lines):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))
    for note in notes:
        print(f"note: {note}")
    sys.stdout.flush()


def machine_line() -> str:
    """What the figures were measured on, and how busy it was (the load average over
    the last 1, 5 and 15 minutes, at the end): they mean little without it."""
    load = " / ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"{os.cpu_count()} CPUs, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.system()} {platform.release()}; "
        f"load average {load}"
    )


def revision_line() -> str:
    """Which code was measured: the commit, and whether the product code had local edits."""
    repo = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    edited = git("status", "--porcelain", "--", "agent_core", "bot")
    return f"code: {commit}" + (" + uncommitted edits in agent_core/ or bot/" if edited else "")


@dataclass(frozen=True)
class Figure:
    """A single measured value (not a distribution) beside its target."""

    what: str
    value: float
    unit: str
    runs: int
    limit: float | None = None
    target_id: str | None = None
    """The target this figure judges (a key of ``bench._report.TARGETS``)."""
    target_text: str | None = None
    """How to show the target, when ``< limit`` does not say it."""

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return "info"
        return "PASS" if self.value < self.limit else "MISS"


def print_figures(title: str, figures: Sequence[Figure], notes: Sequence[str] = ()) -> None:
    header = ("measure", "runs", "value", "target", "verdict")
    lines: list[tuple[str, ...]] = [header]
    for f in figures:
        target = f.target_text or ("-" if f.limit is None else f"< {f.limit:g} {f.unit}")
        if f.target_id is not None and f.verdict != "info":
            value = f"{f.value:.1f} {f.unit} ({f.runs} runs)"
            report(f.target_id, f.what, value, "PASS" if f.verdict == "PASS" else "MISS")
        lines.append((f.what, str(f.runs), f"{f.value:.1f} {f.unit}", target, f.verdict))
    _print_lines(title, lines, notes)
