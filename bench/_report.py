"""How a benchmark tells ``python -m bench`` which performance target each figure judges.

The targets table (bench/README.md) is :data:`TARGETS`: one entry per target, keyed by a
short id. A benchmark reports a judged figure with :func:`report`, or by giving
``target=`` (the id) to a ``Row`` or ``Figure`` it prints: ``print_table`` and
``print_figures`` then report it. ``report`` appends one JSON object per line to the
file named by the ``BENCH_REPORT`` environment variable, which the runner sets for each
child; without the variable (a benchmark run on its own) it does nothing. One line is::

    {"target": "abort_close", "measure": "...", "value": "1.28 ms (p99)",
     "verdict": "PASS", "benchmark": "abort_close"}

A target may get several lines (one per transport, backend, ...); the runner shows each
and the target passes only if every line does.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["ENV", "TARGETS", "Target", "Verdict", "report"]

ENV = "BENCH_REPORT"
Verdict = Literal["PASS", "MISS"]


@dataclass(frozen=True)
class Target:
    what: str
    target: str
    benchmarks: tuple[str, ...]
    """The benchmarks that report it (for the "not run" line when none was selected)."""


TARGETS: dict[str, Target] = {
    "click_ack": Target(
        "click → ack (HTTP and Socket Mode), 200 runs streaming 4,000 chunks/s, one process",
        "p99 < 100 ms, 0 acked uncommitted",
        ("click_ack",),
    ),
    "chunk_cpu": Target(
        "CPU per streamed chunk, model stream to Slack surface, one process",
        "≤ 40 µs",
        ("chunk_cpu",),
    ),
    "overload_ack": Target(
        "above MAX_LIVE_RUNS (runs queue, visible, stoppable) at 2x overload",
        "click → ack p99 < 100 ms",
        ("queue_share",),
    ),
    "shared_queue": Target(
        "2, then 4 worker processes on PostgreSQL share a queue of 1,000 runs",
        "click → ack p99 < 100 ms, every click answered",
        ("queue_share",),
    ),
    "abort_close": Target(
        "Abort requested in-process → upstream LLM connection closed",
        "p99 ≤ the Agents SDK's cancel, < 5 ms",
        ("abort_close", "abort_peer"),
    ),
    "abort_click_close": Target(
        "Abort click over HTTP → upstream LLM connection closed, 200 runs streaming",
        "p99 < 50 ms",
        ("abort_click_close",),
    ),
    "click_effect_quiet": Target(
        "a click (Stop) → the status message shows its effect, quiet worker",
        "p99 < 100 ms",
        ("click_effect",),
    ),
    "click_effect_loaded": Target(
        "same, 200 runs streaming in the workspace",
        "p99 < 250 ms",
        ("click_effect",),
    ),
    "stop_seen_postgres": Target(
        "Abort / Stop committed in one worker → seen by the owner, PostgreSQL",
        "p99 < 100 ms",
        ("stop_propagation",),
    ),
    "stop_seen_sqlite": Target(
        "same, SQLite (250 ms poll)",
        "p99 < 350 ms",
        ("stop_propagation",),
    ),
    "stop_final_turn": Target(
        "Stop or guidance → next model request sent, once the current step ends",
        "p99 < 10 ms",
        ("stop_final_turn",),
    ),
    "child_stop_final_turn": Target(
        "Stop on a sub-agent → that child's forced final-turn request sent (after its step "
        "ends); the parent's next request carries the child's handoff",
        "p99 < 10 ms",
        ("child_stop_final_turn",),
    ),
    "budget_final_turn": Target(
        "budget spent → forced final turn request sent (after the step ends)",
        "p99 < 10 ms",
        ("budget_final_turn",),
    ),
    "fan_out": Target(
        "model request count for one mention whatever the model asks (fan-out attack)",
        "bounded by the budgets",
        ("fan_out",),
    ),
    "mcp_abort_cancel": Target(
        "Abort → MCP cancellation sent for every call in flight",
        "p99 < 20 ms",
        ("mcp_abort_cancel",),
    ),
    "approval_call_same": Target(
        "approval click → the approved call reaches the MCP server, same worker",
        "p99 < 50 ms",
        ("approval_call",),
    ),
    "approval_call_other": Target(
        "same, the click taken by another worker (PostgreSQL)",
        "p99 < 150 ms",
        ("approval_call",),
    ),
    "memory": Target(
        "memory per live streaming run, 1,000 runs in one process",
        "< 200 KB",
        ("memory",),
    ),
    "slack_429": Target(
        "Slack 429s under 50 concurrent runs in one workspace",
        "0 (budgeted)",
        ("slack_429",),
    ),
    "sigterm_exit": Target(
        "SIGTERM → exit, runs terminal or released, no MCP server orphaned",
        "< 20 s",
        ("sigterm_exit",),
    ),
    "restart_reconcile": Target(
        "restart → orphaned runs reconciled",
        "< lease TTL + 10 s, 100 %",
        ("restart_reconcile",),
    ),
    "tracing": Target(
        "tracing on (OTLP to a live receiver) vs off: CPU per streamed chunk, "
        "abort → close, Stop → final-turn request; CPU per turn",
        "within +2 % / unchanged p99 / unchanged p99; ≤ 50 µs per turn",
        ("tracing_ab",),
    ),
    "no_loss": Target(
        "stop requests, guidance and mentions lost to kill -9 or a database blip",
        "0",
        ("no_loss",),
    ),
    "installation_lookup": Target(
        "event, click or command → its installation found (OAuth mode, 1,000 installations)",
        "p99 < 1 ms from cache; no token refresh on a click's path",
        ("installation_lookup",),
    ),
}


def report(target: str, measure: str, value: str, verdict: Verdict) -> None:
    """Record one judged figure for ``target`` (a key of :data:`TARGETS`)."""
    if target not in TARGETS:
        raise KeyError(f"unknown target {target!r}; add it to bench._report.TARGETS")
    path = os.environ.get(ENV)
    if not path:
        return
    line = {
        "target": target,
        "measure": measure,
        "value": value,
        "verdict": verdict,
        "benchmark": Path(sys.argv[0]).stem,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
