"""Click → ack, HTTP and Socket Mode, 200 concurrent streaming runs: p99 < 100 ms (bench/README.md).

For each transport in turn, the real ThreadpilotApp is started against the fake Slack and
llmock (``bench/_slack_app.py``), and ``--runs`` (200) runs are started and kept streaming:
llmock paces every answer at one chunk (one word) per ``--chunk-ms`` (default 50 ms: 20
chunks a second per run, 4,000 a second in all). Then, open loop (one click every ``--interval-ms``
whatever the answers), each of the first ``--runs`` streaming runs gets a Stop click and,
one slot later, an Abort click: 2 x ``--runs`` clicks per transport. Each aborted run is
replaced by a new mention, so the app keeps about ``--runs`` runs streaming throughout.

- HTTP: a signed ``block_actions`` POST to ``/slack/events``; the latency is from sending
  the request to reading the app's response (the ack), measured by an aiohttp client.
- Socket Mode: an ``interactive`` envelope pushed by the fake's WebSocket server; the
  latency is the fake's ``Ack.latency`` (envelope sent → ack received).

Every click is also checked to have taken effect by the time it was acknowledged, and
(after the clicks) to have its stop request committed in the store: docs/architecture.md
says it is committed before the ack.
The app and the fake Slack share this process and its event loop, so the figures include
the fake's own work; the loop-lag and CPU lines say how loaded the process was. llmock
runs in a process of its own: streaming 4,000 chunks/s is a model server's work, not the
app's. ``--llmock thread`` puts it in this process instead (sharing the GIL), as earlier
measurements did.
``--stalled`` keeps the streams open but silent after their first word (no chunk load):
the floor the streaming load is compared with.

Usage: ``.venv/bin/python -m bench.click_ack [--runs N] [--chunk-ms MS] [--interval-ms MS]
[--llmock thread|process] [--stalled]``
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core import StopReason
from bench._llmock import paced_llmock
from bench._probes import LoopLag
from bench._report import report
from bench._setup import bench_main, parser
from bench._slack_app import ACTION_ABORT, ACTION_STOP, LoadedApp
from bench._stats import Row, machine_line, percentile, print_table, revision_line

if TYPE_CHECKING:
    from bench._llmock import Placement
    from bench._slack_app import Target, Transport

TARGET_MS = 100.0
WORDS = 5000
"""Long enough to keep every paced answer streaming for the whole benchmark."""
STALL_S = 120.0


@dataclass
class Phase:
    transport: Transport
    stop_ms: list[float] = field(default_factory=list)
    abort_ms: list[float] = field(default_factory=list)
    not_applied: int = 0
    """Clicks whose stop/abort was not in force when the ack arrived."""
    clicked: list[tuple[str, StopReason]] = field(default_factory=list)
    uncommitted: int = 0
    """Clicks acknowledged without their stop request committed (it must be, before the ack)."""
    streaming: list[int] = field(default_factory=list)
    """Runs streaming at each click."""
    lag_ms: list[float] = field(default_factory=list)
    cpu_share: float = 0.0
    """Process CPU time / wall time during the clicks (2.0 = both cores busy)."""
    seconds: float = 0.0


async def run_phase(llm_url: str, transport: Transport, runs: int, interval_s: float) -> Phase:
    app = LoadedApp(llm_url, transport)
    phase = Phase(transport)
    await app.start()
    try:
        await app.fill(runs)
        targets = app.streaming_targets()[:runs]
        done = asyncio.Event()
        lag = LoopLag()
        replacements: list[asyncio.Task[object]] = []
        async with asyncio.TaskGroup() as group:
            lag_task = group.create_task(lag.run(done))
            cpu0, wall0 = time.process_time(), time.monotonic()
            start = asyncio.get_running_loop().time() + 0.05
            clicks = [
                group.create_task(
                    click(
                        app,
                        phase,
                        target,
                        action,
                        start + (2 * k + offset) * interval_s,
                        replacements,
                    )
                )
                for k, target in enumerate(targets)
                for offset, action in ((0, ACTION_STOP), (1, ACTION_ABORT))
            ]
            await asyncio.gather(*clicks)
            phase.seconds = time.monotonic() - wall0
            phase.cpu_share = (time.process_time() - cpu0) / phase.seconds
            done.set()
            await lag_task
            await asyncio.gather(*replacements)
        phase.lag_ms = lag.samples
        phase.uncommitted = await app.uncommitted(phase.clicked)
    finally:
        await app.close()
    return phase


async def click(
    app: LoadedApp,
    phase: Phase,
    target: Target,
    action_id: str,
    at: float,
    replacements: list[asyncio.Task[object]],
) -> None:
    await asyncio.sleep(max(0.0, at - asyncio.get_running_loop().time()))
    phase.streaming.append(len(app.watch.streaming))
    payload = app.click_payload(target, action_id)
    if app.transport == "http":
        latency = await app.click_http(payload)
    else:
        latency = await app.click_socket(payload)
    run = app.run(target.run_id)
    kind = StopReason.STOP if action_id == ACTION_STOP else StopReason.ABORT
    phase.clicked.append((target.run_id, kind))
    if action_id == ACTION_STOP:
        phase.stop_ms.append(latency * 1000)
        applied = run is not None and run.control.reason in (StopReason.STOP, StopReason.ABORT)
    else:
        phase.abort_ms.append(latency * 1000)
        applied = run is None or run.control.reason is StopReason.ABORT
        # Keep the load up: a new streaming run for each one aborted (not timed).
        replacements.append(asyncio.create_task(app.mention()))
    phase.not_applied += not applied


def rows_for(phase: Phase, target_id: str | None) -> list[Row]:
    name = "HTTP" if phase.transport == "http" else "Socket Mode"
    all_ms = phase.stop_ms + phase.abort_ms
    return [
        Row(f"{name} click → ack, all", all_ms, "ms", TARGET_MS, target_id=target_id),
        Row(f"{name} click → ack, Stop", phase.stop_ms, "ms"),
        Row(f"{name} click → ack, Abort", phase.abort_ms, "ms"),
    ]


def notes_for(phase: Phase) -> list[str]:
    name = "HTTP" if phase.transport == "http" else "Socket Mode"
    return [
        f"{name}: runs streaming at each click: min {min(phase.streaming)}, median "
        f"{statistics.median(phase.streaming):g}; clicks not in force at ack: "
        f"{phase.not_applied}; clicks acked without their stop request committed: "
        f"{phase.uncommitted}; {len(phase.stop_ms) + len(phase.abort_ms)} clicks in "
        f"{phase.seconds:.1f} s; process CPU {phase.cpu_share * 100:.0f}% of one core; "
        f"event-loop lag p50 {percentile(phase.lag_ms, 50):.1f} ms, "
        f"p99 {percentile(phase.lag_ms, 99):.1f} ms, max {max(phase.lag_ms):.1f} ms",
    ]


async def measure(
    runs: int, chunk_ms: int, interval_ms: float, placement: Placement, stalled: bool
) -> bool:
    phases: list[Phase] = []
    stall_s = STALL_S if stalled else 0.0
    async with paced_llmock(placement, chunk_ms=chunk_ms, words=WORDS, stall_s=stall_s) as llm_url:
        for transport in ("http", "socket"):
            phases.append(await run_phase(llm_url, transport, runs, interval_ms / 1000))
    # Only the load the target names (200 runs, 4,000 chunks/s) reports to the summary.
    target_id = "click_ack" if runs >= 200 and chunk_ms <= 50 and not stalled else None
    rows = [row for phase in phases for row in rows_for(phase, target_id)]
    notes = [note for phase in phases for note in notes_for(phase)]
    load = (
        f"{runs} runs with a stream open but stalled after its first word (no chunk load)"
        if stalled
        else f"{runs} runs streaming from llmock at one chunk per {chunk_ms} ms "
        f"(~{runs * 1000 // max(chunk_ms, 1)} chunks/s)"
    )
    notes += [
        f"load: {load}; clicks open-loop every {interval_ms:g} ms",
        (
            "one process: app + fake Slack on one event loop, llmock in a thread (shares the "
            "GIL): the figures include the fakes' own work"
            if placement == "thread"
            else "app + fake Slack on one event loop; llmock in a process of its own"
        ),
        machine_line(),
        revision_line(),
    ]
    print_table("click_ack: click → ack under streaming load", rows, notes)
    wrong = sum(p.not_applied + p.uncommitted for p in phases)
    if target_id is not None:
        for p in phases:
            name = "HTTP" if p.transport == "http" else "Socket Mode"
            bad = p.not_applied + p.uncommitted
            what = f"{name} clicks not in force at ack or acked without their commit"
            report(target_id, what, f"{bad}", "PASS" if bad == 0 else "MISS")
    return wrong == 0 and all(r.verdict != "MISS" for r in rows)


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "click_ack")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--chunk-ms", type=int, default=50, help="llmock delay between chunks")
    p.add_argument("--interval-ms", type=float, default=25.0, help="time between clicks")
    p.add_argument("--llmock", choices=["thread", "process"], default="process")
    p.add_argument("--stalled", action="store_true", help="open but silent streams")
    args = p.parse_args()
    bench_main(
        args,
        lambda: measure(args.runs, args.chunk_ms, args.interval_ms, args.llmock, args.stalled),
    )


if __name__ == "__main__":
    main()
