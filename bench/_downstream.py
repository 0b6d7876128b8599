"""Micro-benchmark: CPU per streamed chunk downstream of the model, in the real app.

Not one of the judged benchmarks. The app is wired as ``bench/chunk_cpu.py`` wires it,
but its model is a paced fake in this process: each of ``--runs`` runs gets one text
chunk per ``--chunk-ms``, from a timer, with no network. Two phases, each with a fresh
app:

- silent: the fake counts each chunk but does not hand it to the run;
- delivered: the same, and the chunk goes to the run (``Run._on_text`` → events →
  session → answer stream).

Both phases pay the same timers and task wake-ups, so (delivered CPU/s - silent CPU/s) /
chunks/s is what the app does with a chunk once the model has it. Usage:
``.venv/bin/python -m bench._downstream [--runs N] [--chunk-ms MS] [--window S]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from agent_core.process.logs import configure_logging
from agent_core.values.chat import ModelResponse, Usage
from bench._llmock import serving_process
from bench._slack_app import app_settings
from bench.chunk_cpu import _mention
from bot.process.app import ThreadpilotApp
from bot.process.heap import freeze_start_up_heap
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from agent_core.ports import TextSink
    from agent_core.values.chat import ModelRequest


class PacedModel:
    """One chunk per ``chunk_s`` for as long as the run lives."""

    def __init__(self, chunk_s: float, deliver: bool) -> None:
        self.chunk_s = chunk_s
        self.deliver = deliver
        self.chunks = 0
        self.streaming = 0
        self.changes = Changes()

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        on_text("first ")
        self.streaming += 1
        self.changes.notify()
        deliver, sleep, chunk_s = self.deliver, asyncio.sleep, self.chunk_s
        try:
            for i in range(1_000_000):
                await sleep(chunk_s)
                self.chunks += 1
                if deliver:
                    on_text(f"word{i} ")
        finally:
            self.streaming -= 1
        return ModelResponse("", (), "stop", Usage(0, 0))


async def phase(
    runs: int, chunk_ms: int, deliver: bool, warmup: float, window: float
) -> tuple[float, float]:
    slack_options = ("--unknown", "agents.sessions.setStatus")
    async with (
        serving_process("bench._fake_slack_serve", *slack_options) as api_url,
        aiohttp.ClientSession() as http,
    ):
        files = tempfile.TemporaryDirectory(prefix="threadpilot-bench-")
        settings = app_settings(api_url, "http://127.0.0.1:9/v1", files.name, socket_mode=False)
        model = PacedModel(chunk_ms / 1000, deliver)
        app: Any = ThreadpilotApp(settings, model=model, listen_port=0, listen_host="127.0.0.1")
        await app.start()
        freeze_start_up_heap()
        try:
            url = f"http://127.0.0.1:{app.port}/slack/events"
            for index in range(1, runs + 1):
                await _mention(http, url, index)
                if index == 1:
                    await model.changes.until(
                        lambda: model.streaming >= 1, timeout=60, describe=lambda: "first run"
                    )
            await model.changes.until(
                lambda: model.streaming >= runs, timeout=60, describe=lambda: "all runs"
            )
            await asyncio.sleep(warmup)
            gc.collect()
            cpu, n, t = time.process_time(), model.chunks, time.monotonic()
            await asyncio.sleep(window)
            cpu, n, t = time.process_time() - cpu, model.chunks - n, time.monotonic() - t
        finally:
            await app.shutdown(timeout_s=3.0)
            files.cleanup()
    kind = "delivered" if deliver else "silent"
    print(f"{kind:9} {cpu / n * 1e6:6.1f} µs/chunk gross ({n / t:.0f}/s, {cpu / t:.0%} CPU)")
    return cpu / t, n / t


async def main(args: argparse.Namespace) -> None:
    silent_cpu, _ = await phase(args.runs, args.chunk_ms, False, args.warmup, args.window)
    cpu, rate = await phase(args.runs, args.chunk_ms, True, args.warmup, args.window)
    print(f"downstream per chunk: {(cpu - silent_cpu) / rate * 1e6:.1f} µs")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--chunk-ms", type=int, default=50)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--window", type=float, default=10.0)
    with open(os.devnull, "w") as sink:
        configure_logging("console", "INFO", stream=sink)  # as the judged benchmarks do
        asyncio.run(main(p.parse_args()))
