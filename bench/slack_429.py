"""Slack 429s under 50 concurrent runs in one workspace: 0, because every call is budgeted.

The real ThreadpilotApp (HTTP) runs against the fake Slack with Slack's rate limits on
(``FakeSlack(rate_limits=SLACK_TIERS)``: each method's tier per workspace, counted over
any 60 s, and ``chat.postMessage`` about one a second per channel; a call over the limit
is answered 429 ``ratelimited`` with ``Retry-After``, as Slack does). ``--runs`` (50)
mentions arrive at once, spread over ``--channels`` (5) channels; agent sessions stay on
(Tier 3). llmock streams every answer at one word per ``--chunk-ms`` (200) for about a
minute, so the per-minute windows fill. The benchmark waits until every run has ended
(or ``--observe`` seconds: 50 runs queue for ``chat.startStream``'s Tier 2 budget, so most
are still live then), shuts the app down, and counts the 429s by method over the whole
time, shutdown included. Also shown: each method's calls and its busiest 60 s against its limit.

Usage: ``.venv/bin/python -m bench.slack_429 [--runs 50] [--channels 5] [--chunk-ms 200]``
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from bench._llmock import paced_llmock
from bench._setup import bench_main, parser
from bench._slack_app import LoadedApp
from bench._stats import Figure, machine_line, print_figures, revision_line
from tests.fakes.slack_api import PER_CHANNEL, RATE_WINDOW_S, SLACK_TIERS, ApiCall, FakeSlack

STREAM_S = 60.0
"""How long each answer streams."""


async def measure(runs: int, channels: int, chunk_ms: int, observe_s: float) -> bool:
    words = max(1, int(STREAM_S * 1000 / chunk_ms))
    slack = FakeSlack(rate_limits=SLACK_TIERS)
    started = time.monotonic()
    async with paced_llmock("thread", chunk_ms=chunk_ms, words=words) as llm_url:
        app = LoadedApp(llm_url, "http", slack=slack, agent_sessions=True)
        await app.start()
        try:
            await asyncio.gather(*(app.mention(f"CLIMIT{i % channels:03d}") for i in range(runs)))
            live = await _wait_until_ended(app, runs, observe_s)
            ended_s = time.monotonic() - started
        finally:
            await app.close()
    calls = slack.calls()
    limited = Counter(c.method for c in calls if c.status == 429)
    by_method = Counter(c.method for c in calls)
    figures = [
        Figure(
            f"429s, all methods ({len(calls)} calls)",
            float(sum(limited.values())),
            "calls",
            runs,
            limit=0.5,  # the count is an integer: < 0.5 means none
            target_id="slack_429",
            target_text="0",
        )
    ]
    figures += [
        Figure(f"429s, {method}", float(n), "calls", runs) for method, n in sorted(limited.items())
    ]
    busiest = ", ".join(
        f"{m} {n} calls (peak {_peak(calls, m)}/{SLACK_TIERS.get(m, '-')} per 60 s"
        f"{' per channel' if m in PER_CHANNEL else ''})"
        for m, n in sorted(by_method.items())
    )
    print_figures(
        "slack_429: Slack 429s under concurrent runs in one workspace, rate limits on",
        figures,
        [
            f"{runs} runs mentioned at once in {channels} channels of one workspace; answers "
            f"stream {words} words at one per {chunk_ms} ms (~{STREAM_S:g} s); "
            f"{runs - live}/{runs} runs ended within {ended_s:.0f} s "
            f"(observed at most {observe_s:g} s), then shut down",
            f"calls by method: {busiest}",
            "limits: Slack's tiers per method and workspace over any 60 s, chat.postMessage "
            "60 per 60 s per channel (tests/fakes/slack_api.py SLACK_TIERS)",
            "one process: app + fake Slack on one event loop, llmock in a thread",
            machine_line(),
            revision_line(),
        ],
    )
    # Runs still waiting on Slack's limits (chat.startStream is Tier 2) when observation
    # ends are not a failure here: the target is the 429 count, over the busiest part.
    return figures[0].verdict == "PASS"


async def _wait_until_ended(app: LoadedApp, runs: int, observe_s: float) -> int:
    """Runs not ended when every run's task is done or ``observe_s`` has passed."""
    deadline = time.monotonic() + observe_s

    def started() -> list[asyncio.Task[None]] | None:
        tasks = [live.task for live in app.ctx.supervisor.live_runs if live.task is not None]
        return tasks if len(tasks) >= runs else None

    # Every run posts its status message soon after it starts: each call re-checks.
    tasks = await app.slack.wait_until(lambda _: started(), timeout=60.0)
    assert tasks is not None
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    return len(pending)


def _peak(calls: list[ApiCall], method: str) -> int:
    """The most calls of ``method`` answered (any status) in one window of 60 s, in one
    channel for the methods limited per channel."""
    by_key: dict[str, list[float]] = {}
    for c in calls:
        if c.method == method:
            key = str(c.args.get("channel", "")) if method in PER_CHANNEL else ""
            by_key.setdefault(key, []).append(c.at)
    peak = 0
    for times in by_key.values():
        start = 0
        for end, at in enumerate(times):
            while times[start] <= at - RATE_WINDOW_S:
                start += 1
            peak = max(peak, end - start + 1)
    return peak


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "slack_429")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--channels", type=int, default=5)
    p.add_argument("--chunk-ms", type=int, default=200, help="llmock delay between chunks")
    p.add_argument("--observe", type=float, default=95.0, help="longest wait for runs to end")
    args = p.parse_args()
    bench_main(args, lambda: measure(args.runs, args.channels, args.chunk_ms, args.observe))


if __name__ == "__main__":
    main()
