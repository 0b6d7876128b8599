"""A click (Stop) → the status message shows its effect: p99 < 100 ms on a quiet worker,
< 250 ms with 200 runs streaming in the workspace (bench/README.md).

The real ThreadpilotApp over HTTP, the fake Slack on the same event loop, and llmock:
in a thread of this process for the quiet part, in a process of its own for the loaded
part. ``t0`` is taken just before the signed ``block_actions`` POST of a Stop pressed on
a streaming run's status message (the click carries a ``response_url`` the fake minted
for that message); the effect is the first version of the message, as the fake stored
it, that shows the stopping state: Stop gone, only Abort left. That version's time is the
fake's ``time.monotonic()``, the benchmark's clock. Two settings:

- quiet: one run at a time (``--trials``, 200), its answer stalled mid-stream, so
  nothing else competes with the click; the run is aborted after each trial (not timed);
- loaded: ``--runs`` (200) runs streaming, paced at one chunk per ``--chunk-ms`` (as in
  click_ack), all in one workspace; each gets a Stop, open loop every ``--interval-ms``.

Also shown: the click's HTTP ack, and which way each effect reached the message (the
click's ``response_url`` or ``chat.update``).

Usage: ``.venv/bin/python -m bench.click_effect [--trials N] [--runs N] [--chunk-ms MS]
[--interval-ms MS]``
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench._llmock import answers_that_stall, llmock_server, paced_llmock
from bench._probes import LoopLag
from bench._setup import bench_main, parser
from bench._slack_app import ACTION_ABORT, ACTION_STOP, LoadedApp
from bench._stats import Row, machine_line, percentile, print_table, revision_line
from tests.bot.harness import buttons_in

if TYPE_CHECKING:
    from llmock.testing import LLMockServer

    from bench._slack_app import Target
    from tests.fakes.slack_messages import Revision

QUIET_TARGET_MS = 100.0
LOADED_TARGET_MS = 250.0
WORDS = 5000
SETTLE_S = 20.0
"""How long the loaded part waits, after its last click, for every effect to show."""


@dataclass
class Clicks:
    t0: dict[Target, float] = field(default_factory=dict)
    ack_ms: list[float] = field(default_factory=list)
    effect_ms: list[float] = field(default_factory=list)
    ways: Counter[str] = field(default_factory=Counter)
    """How each effect reached the message: ``response_url`` or ``chat.update``."""
    not_shown: int = 0
    """Clicks whose effect never showed (within SETTLE_S, loaded)."""
    lag_ms: list[float] = field(default_factory=list)

    def settle(self, app: LoadedApp) -> int:
        """Read each clicked message's versions; how many effects are still missing."""
        missing = 0
        for target, t0 in self.t0.items():
            if _effect(app, target, t0) is None:
                missing += 1
        return missing

    def record(self, app: LoadedApp) -> None:
        for target, t0 in self.t0.items():
            shown = _effect(app, target, t0)
            if shown is None:
                self.not_shown += 1
                continue
            self.effect_ms.append((shown.at - t0) * 1000)
            self.ways[shown.method] += 1


def _effect(app: LoadedApp, target: Target, t0: float) -> Revision | None:
    """The first version of the target's message, stored after ``t0``, that shows the
    Stop's effect (only Abort left)."""
    message = app.slack.message(target.channel, target.status_ts)
    for revision in message.history:
        if revision.at >= t0 and buttons_in(revision.blocks) == [ACTION_ABORT]:
            return revision
    return None


async def stop(app: LoadedApp, clicks: Clicks, target: Target) -> None:
    payload = app.click_payload(target, ACTION_STOP)
    clicks.t0[target] = time.monotonic()
    clicks.ack_ms.append(await app.click_http(payload) * 1000)


async def quiet(llm: LLMockServer, trials: int) -> Clicks:
    answers_that_stall(llm)
    clicks = Clicks()
    app = LoadedApp(llm.base_url(), "http")
    await app.start()
    try:
        for _ in range(trials):
            target = await app.wait_streaming_thread(await app.mention())
            await stop(app, clicks, target)
            t0 = clicks.t0[target]
            await app.slack.wait_until(lambda _: _effect(app, target, t0), timeout=10.0)  # noqa: B023
            # Not timed: end the run, so the next trial is the only one streaming.
            await app.click_http(app.click_payload(target, ACTION_ABORT))
            await app.watch.changes.until(
                lambda: target.run_id not in app.watch.streaming or None,  # noqa: B023
                timeout=10.0,
                describe=lambda: "the aborted run still streaming",
            )
        clicks.record(app)
    finally:
        await app.close()
        llm.state.reset()
    return clicks


async def loaded(llm_url: str, runs: int, interval_s: float) -> Clicks:
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
            await asyncio.gather(
                *(_stop_at(app, clicks, t, start + k * interval_s) for k, t in enumerate(targets))
            )
            # Every effect shown, or SETTLE_S over (read every 50 ms: a waiter woken on
            # each of the fake's thousands of calls a second would be the load itself).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SETTLE_S):
                    while True:
                        if not clicks.settle(app):
                            break
                        await asyncio.sleep(0.05)
            done.set()
            await lag_task
        clicks.lag_ms = lag.samples
        clicks.record(app)
    finally:
        await app.close()
    return clicks


async def _stop_at(app: LoadedApp, clicks: Clicks, target: Target, at: float) -> None:
    await asyncio.sleep(max(0.0, at - asyncio.get_running_loop().time()))
    await stop(app, clicks, target)


def _ways(clicks: Clicks) -> str:
    return ", ".join(f"{way} {n}" for way, n in sorted(clicks.ways.items())) or "none"


async def measure(trials: int, runs: int, chunk_ms: int, interval_ms: float) -> bool:
    with llmock_server() as llm:
        calm = await quiet(llm, trials)
    # Loaded: llmock in a process of its own, or its 4,000 chunks/s would be this
    # process's CPU too.
    async with paced_llmock("process", chunk_ms=chunk_ms, words=WORDS) as llm_url:
        busy = await loaded(llm_url, runs, interval_ms / 1000)
    rows = [
        Row(
            "quiet: Stop click → message shows it",
            calm.effect_ms,
            "ms",
            QUIET_TARGET_MS,
            target_id="click_effect_quiet",
        ),
        Row("quiet: Stop click → HTTP ack", calm.ack_ms, "ms"),
        Row(
            f"{runs} streaming: Stop click → message shows it",
            busy.effect_ms,
            "ms",
            LOADED_TARGET_MS,
            target_id="click_effect_loaded" if runs >= 200 else None,
        ),
        Row(f"{runs} streaming: Stop click → HTTP ack", busy.ack_ms, "ms"),
    ]
    print_table(
        "click_effect: a click (Stop) → the status message shows its effect",
        rows,
        [
            "effect: the first version of the clicked message the fake stored after the "
            "click with Stop gone and Abort left; its time is the fake's monotonic clock, "
            "the benchmark's",
            f"how the effects arrived: quiet {_ways(calm)}; loaded {_ways(busy)}",
            f"clicks whose effect never showed: quiet {calm.not_shown}, loaded "
            f"{busy.not_shown} (waited {SETTLE_S:g} s after the last)",
            f"loaded: {runs} runs in one workspace paced at one chunk per {chunk_ms} ms "
            f"(~{runs * 1000 // chunk_ms} chunks/s), one Stop every {interval_ms:g} ms; "
            f"event-loop lag p50 {percentile(busy.lag_ms, 50):.1f} ms, "
            f"p99 {percentile(busy.lag_ms, 99):.1f} ms",
            "app + fake Slack on one event loop; llmock in a thread for the quiet part, in "
            "a process of its own for the loaded part",
            machine_line(),
            revision_line(),
        ],
    )
    missing = calm.not_shown + busy.not_shown
    return missing == 0 and all(r.verdict != "MISS" for r in rows)


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "click_effect")
    p.add_argument("--trials", type=int, default=200, help="quiet trials")
    p.add_argument("--runs", type=int, default=200, help="streaming runs in the loaded part")
    p.add_argument("--chunk-ms", type=int, default=50, help="llmock delay between chunks")
    p.add_argument("--interval-ms", type=float, default=25.0, help="time between clicks")
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials, args.runs, args.chunk_ms, args.interval_ms))


if __name__ == "__main__":
    main()
