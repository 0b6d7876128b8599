"""The memory benchmark's third kind of run: a whole Slack app run (see bench/memory.py).

The real ThreadpilotApp in this process, with everything it keeps per run (supervisor
entry, run session, answer-stream task, status renders queued in the Slack budget, the
model's HTTP stream). The fake Slack and llmock each run in a process of their own, so
neither their memory nor their records of every call are counted. Runs are started by
signed @mentions over HTTP, each in a channel of its own (``bench/_slack_app.py`` says
why); llmock stalls every answer after the first word, so each run is held mid-stream.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import tracemalloc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import aiohttp

from agent_core import ExitCode, RunFinished, StopReason
from bench._llmock import llmock_process, openai_model, serving_process
from bench._probes import rss_kb
from bench._slack_app import SECRET, StreamWatch, app_settings, mention_envelope
from bot.process.app import ThreadpilotApp
from tests.fakes import slack_requests

if TYPE_CHECKING:
    from agent_core import Run, RunEvent

__all__ = ["AppMemory", "measure_app"]

Metric = Literal["rss", "heap"]
WARMUP = 10
TOP_SITES = 6


@dataclass(frozen=True)
class AppMemory:
    kb_per_run: float
    aborted: int
    top: list[tuple[str, float]]


class _Finished:
    """Counts RunFinished events of the runs it listens to."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.results: list[ExitCode] = []
        self.all_done = asyncio.Event()

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunFinished):
            self.results.append(event.result.exit_code)
            if len(self.results) >= self.expected:
                self.all_done.set()


class _Driver:
    def __init__(self, app: ThreadpilotApp, watch: StreamWatch, http: aiohttp.ClientSession):
        self.app, self.watch, self.http = app, watch, http
        self.mentions = 0

    async def start_runs(self, n: int) -> list[Run]:
        """Mention the app ``n`` times; return the runs once all are mid-stream."""
        assert self.app.ctx is not None
        before = {live.run.id for live in self.app.ctx.supervisor.live_runs}
        expected = len(self.watch.streaming) + n
        for _ in range(n):
            self.mentions += 1
            envelope, _thread = mention_envelope(self.mentions)
            request = slack_requests.event_request(envelope, SECRET)
            url = f"http://127.0.0.1:{self.app.port}/slack/events"
            async with self.http.post(url, data=request.body, headers=request.headers) as reply:
                await reply.read()
        await self.watch.changes.until(
            lambda: len(self.watch.streaming) >= expected or None,
            timeout=60,
            describe=lambda: f"{len(self.watch.streaming)} of {expected} runs streaming",
        )
        lives = self.app.ctx.supervisor.live_runs
        return [live.run for live in lives if live.run.id not in before]

    async def abort(self, runs: list[Run]) -> int:
        """Abort ``runs``; how many ended as EXIT-USER-ABORT (waited for, bounded)."""
        finished = _Finished(len(runs))
        for run in runs:
            run.events.add_listener(finished)
        for run in runs:
            run.request_stop(StopReason.ABORT, "bench")
        async with asyncio.timeout(30):
            await finished.all_done.wait()
        return sum(code is ExitCode.USER_ABORT for code in finished.results)


async def measure_app(n: int, metric: Metric) -> AppMemory:
    slack_options = ("--unknown", "agents.sessions.setStatus")
    async with (
        llmock_process("--stall", "120") as llm_url,
        serving_process("bench._fake_slack_serve", *slack_options) as api_url,
        aiohttp.ClientSession() as http,
    ):
        files = tempfile.TemporaryDirectory(prefix="threadpilot-bench-")
        # Every run live at once: none may wait in the queue.
        settings = app_settings(api_url, llm_url, files.name, socket_mode=False, max_live_runs=n)
        model = openai_model(llm_url)
        watch = StreamWatch(model)
        app = ThreadpilotApp(settings, model=watch, listen_port=0, listen_host="127.0.0.1")
        await app.start()
        try:
            return await _measure(_Driver(app, watch, http), n, metric)
        finally:
            await app.shutdown(timeout_s=3.0)
            await model.aclose()
            files.cleanup()


async def _measure(driver: _Driver, n: int, metric: Metric) -> AppMemory:
    # The first run alone: its refused agents.sessions.setStatus switches the feature off.
    await driver.abort(await driver.start_runs(1))
    await driver.abort(await driver.start_runs(WARMUP))
    gc.collect()
    if metric == "heap":
        tracemalloc.start()
        start = tracemalloc.take_snapshot()
    base_kb = _heap_kb() if metric == "heap" else rss_kb()
    runs = await driver.start_runs(n)
    gc.collect()
    top: list[tuple[str, float]] = []
    if metric == "heap":
        used_kb = _heap_kb() - base_kb
        stats = tracemalloc.take_snapshot().compare_to(start, "filename")[:TOP_SITES]
        top = [(str(s.traceback[0].filename), s.size_diff / 1024 / n) for s in stats]
        tracemalloc.stop()
    else:
        used_kb = rss_kb() - base_kb
    aborted = await driver.abort(runs)
    return AppMemory(used_kb / n, aborted, top)


def _heap_kb() -> float:
    return tracemalloc.get_traced_memory()[0] / 1024
