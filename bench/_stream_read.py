"""Micro-benchmark: CPU per streamed chunk of the model's read path alone, by transport.

Not one of the judged benchmarks. A local aiohttp server (a process of its own, so its
CPU is not counted) streams chat-completion chunks, one ``data:`` event per write,
paced, to ``--clients`` concurrent streams. This process reads them with one of:

- ``model``: :class:`agent_core.OpenAIChatModel` as it is (its reads paced, so with 200
  streams each is read every 200 ms);
- ``model_eager``: the same with ``reads_per_s=0``: every piece read as it arrives;
- ``iter_any``: aiohttp directly, ``resp.content.iter_any()``, then the same SSE decoder,
  ``json.loads`` and turn assembly the model uses;
- ``readany``: as ``iter_any`` but ``await resp.content.readany()`` in a loop (one
  async-generator level fewer).

CPU (``time.process_time``) per chunk over a window, after a warm-up. The text sink only
counts. Usage: ``.venv/bin/python -m bench._stream_read [--clients N] [--chunk-ms MS]
[--window S] [--kinds model,iter_any,readany]``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import aiohttp
from aiohttp import web

from agent_core import OpenAIChatModel
from agent_core.models.openai_chat import READS_PER_S, _chunk, _Turn
from agent_core.models.sse import SSEDecoder
from agent_core.values.chat import ModelRequest

REQUEST = ModelRequest(messages=({"role": "user", "content": "go"},))


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _serve(port: int, chunks: int, chunk_ms: int) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        try:
            await resp.write(_event({"role": "assistant", "content": ""}))
            for i in range(chunks):
                await asyncio.sleep(chunk_ms / 1000)
                await resp.write(_event({"content": f"word{i} "}))
            await resp.write(_event({}, "stop"))
            await resp.write(b"data: [DONE]\n\n")
        except ConnectionError:
            pass  # the client went (the measurement ended)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


class Counter:
    chunks = 0

    def sink(self, _text: str) -> None:
        self.chunks += 1


async def _via_model(base: str, counter: Counter, model: OpenAIChatModel) -> None:
    while True:
        await model.complete(REQUEST, counter.sink)


async def _via_aiohttp(base: str, counter: Counter, http: aiohttp.ClientSession, kind: str) -> None:
    body = {"model": "m", "messages": REQUEST.messages, "stream": True}
    while True:
        turn = _Turn(counter.sink)
        decoder = SSEDecoder()
        async with http.post(f"{base}/chat/completions", json=body) as resp:
            if kind == "iter_any":
                async for piece in resp.content.iter_any():
                    for event in decoder.feed(piece):
                        if event.data[:6] != b"[DONE]":
                            turn.absorb(_chunk(event.data))
            else:
                read = resp.content.readany
                while piece := await read():
                    for event in decoder.feed(piece):
                        if event.data[:6] != b"[DONE]":
                            turn.absorb(_chunk(event.data))
        turn.response()


async def _measure(kind: str, base: str, clients: int, warmup: float, window: float) -> float:
    counter = Counter()
    pace = {"model_eager": 0.0}.get(kind, READS_PER_S)
    model = OpenAIChatModel(model="m", api_key="k", base_url=base, reads_per_s=pace)
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    if kind.startswith("model"):
        tasks = [asyncio.create_task(_via_model(base, counter, model)) for _ in range(clients)]
    else:
        tasks = [
            asyncio.create_task(_via_aiohttp(base, counter, http, kind)) for _ in range(clients)
        ]
    await asyncio.sleep(warmup)
    cpu, n, t, times = time.process_time(), counter.chunks, time.monotonic(), os.times()
    await asyncio.sleep(window)
    cpu, n, t = time.process_time() - cpu, counter.chunks - n, time.monotonic() - t
    system = os.times().system - times.system
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await model.aclose()
    await http.close()
    print(
        f"{kind:10} {cpu / n * 1e6:7.1f} µs/chunk, of which system {system / n * 1e6:.1f}"
        f"  ({n / t:.0f} chunks/s, {cpu / t:.0%} CPU)"
    )
    return cpu / n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--serve", type=int, default=0)
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--chunk-ms", type=int, default=50)
    p.add_argument("--chunks", type=int, default=100000)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--kinds", default="model,model_eager,iter_any,readany")
    p.add_argument("--uvloop", action="store_true", help="run the clients on uvloop")
    args = p.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.chunks, args.chunk_ms))
        return
    port = 18000 + (int(time.time()) % 1000)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench._stream_read",
            "--serve",
            str(port),
            "--chunk-ms",
            str(args.chunk_ms),
            "--chunks",
            str(args.chunks),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        base = f"http://127.0.0.1:{port}/v1"
        for kind in args.kinds.split(","):
            work = _measure(kind, base, args.clients, args.warmup, args.window)
            if args.uvloop:
                # Optional, not a dependency: pip install uvloop to try it.
                importlib.import_module("uvloop").run(work)
            else:
                asyncio.run(work)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
