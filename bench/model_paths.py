"""Our HTTP path beside the providers' official SDKs, per model API: CPU per streamed
event, and Abort → the server sees the stream closed (bench/README.md).

Why the adapters (``agent_core/models/openai_chat*.py``) keep their own HTTP code: this is the
measurement their module docstrings cite. For each API (Chat Completions and the
Responses API with the ``openai`` SDK, Anthropic's Messages API with the ``anthropic``
SDK), two paths read the same llmock stream:

- ours: the adapter's ``complete()`` (aiohttp, our SSE decoder, plain dicts), its reads
  paced as in production, and once more unpaced (``reads_per_s=0``);
- the SDK: ``create(..., stream=True)`` in ``async with``, iterating its typed events and
  keeping the text, as an adapter built on it would.

CPU per event: ``--streams`` (20) answers of ``--words`` (1,000) words at once, one
event per word every ``--chunk-ms`` (5) ms, from llmock in a process of its own (its CPU
is not counted); this process's ``time.process_time()`` over the whole read, divided by
the events the server sent (words, plus each API's framing events).

Abort → close: ``--trials`` (150) streams that stall after their first text; once the
text is in, the task reading it is cancelled, and llmock (in a thread here, as in
``abort_close``) records when it saw the connection go. p50 / p99 per path.

Needs the ``bench`` extra (the ``anthropic`` SDK). Usage:
``.venv/bin/python -m bench.model_paths [--streams N] [--words N] [--trials N]``
"""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import TYPE_CHECKING, Any

import openai
from llmock.scenarios import Reply, StreamFault

from agent_core import ModelAPI
from agent_core.models.http_exchange import READS_PER_S
from agent_core.values.chat import ModelRequest
from bench._llmock import LONG_TEXT, api_model, llmock_process, llmock_server, stall_point
from bench._setup import NOT_RUN, bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from llmock.testing import LLMockServer

    Reader = Callable[[str, asyncio.Event], Coroutine[Any, Any, None]]
    """Reads one whole answer from a base URL, setting the event at its first text."""
    Path = Callable[[ModelAPI], tuple[Reader, Callable[[], Awaitable[None]]]]

REQUEST = ModelRequest(messages=({"role": "user", "content": "write"},))
WARMUP = 10
FRAMING = {ModelAPI.OPENAI_CHAT: 3, ModelAPI.OPENAI_RESPONSES: 10, ModelAPI.ANTHROPIC: 7}
"""The events of an llmock answer besides one per word (its start, usage, end...)."""


def _anthropic_url(base_url: str) -> str:
    return base_url.removesuffix("/v1") + "/anthropic"


def ours(api: ModelAPI, *, paced: bool) -> tuple[Reader, Callable[[], Awaitable[None]]]:
    models: dict[str, Any] = {}

    async def read(base_url: str, first: asyncio.Event) -> None:
        if base_url not in models:
            models[base_url] = api_model(api, base_url, READS_PER_S if paced else 0.0)
        await models[base_url].complete(REQUEST, lambda _: first.set())

    async def close() -> None:
        for model in models.values():
            await model.aclose()

    return read, close


def sdk(api: ModelAPI) -> tuple[Reader, Callable[[], Awaitable[None]]]:
    # Only in the bench extra: imported by name so the type check needs no stubs for it.
    anthropic: Any = importlib.import_module("anthropic")

    clients: dict[str, Any] = {}

    def client(base_url: str) -> Any:
        if base_url not in clients:
            if api is ModelAPI.ANTHROPIC:
                clients[base_url] = anthropic.AsyncAnthropic(
                    api_key="k", base_url=_anthropic_url(base_url), max_retries=0
                )
            else:
                clients[base_url] = openai.AsyncOpenAI(
                    api_key="k", base_url=base_url, max_retries=0
                )
        return clients[base_url]

    async def read(base_url: str, first: asyncio.Event) -> None:
        texts: list[str] = []
        c = client(base_url)
        if api is ModelAPI.ANTHROPIC:
            stream = await c.messages.create(
                model="m",
                max_tokens=8192,
                messages=[{"role": "user", "content": "write"}],
                stream=True,
            )
            async with stream:
                async for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "text_delta":
                        texts.append(event.delta.text)
                        first.set()
        elif api is ModelAPI.OPENAI_RESPONSES:
            stream = await c.responses.create(model="m", input="write", stream=True)
            async with stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        texts.append(event.delta)
                        first.set()
        else:
            stream = await c.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "write"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        texts.append(chunk.choices[0].delta.content)
                        first.set()

    async def close() -> None:
        for c in clients.values():
            await c.close()

    return read, close


PATHS: dict[str, Path] = {
    "ours": lambda api: ours(api, paced=True),
    "ours, unpaced": lambda api: ours(api, paced=False),
    "SDK": sdk,
}


async def cpu_per_event(api: ModelAPI, path: str, streams: int, words: int, chunk_ms: int) -> float:
    options = ("--words", str(words), "--chunk-ms", str(chunk_ms))
    async with llmock_process(*options) as base_url:
        read, close = PATHS[path](api)
        try:
            await read(base_url, asyncio.Event())  # warm-up: imports, the connection
            started = time.process_time()
            await asyncio.gather(*(read(base_url, asyncio.Event()) for _ in range(streams)))
            used = time.process_time() - started
        finally:
            await close()
    return used / (streams * (words + FRAMING[api])) * 1e6


async def abort_close(server: LLMockServer, api: ModelAPI, path: str, trials: int) -> list[float]:
    read, close = PATHS[path](api)
    base_url = server.base_url()
    samples: list[float] = []
    try:
        for trial in range(WARMUP + trials):
            server.state.scenarios.add(
                Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=stall_point(api))
            )
            first = asyncio.Event()
            task = asyncio.create_task(read(base_url, first))
            async with asyncio.timeout(10):
                await first.wait()
            t0 = time.monotonic()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            records = await asyncio.to_thread(server.state.journal.records, wait=5.0)
            server.state.journal.clear()
            if trial >= WARMUP and records and records[0].ended_at is not None:
                samples.append((records[0].ended_at - t0) * 1000)
    finally:
        await close()
    return samples


async def measure(streams: int, words: int, chunk_ms: int, trials: int) -> bool:
    try:
        importlib.import_module("anthropic")
    except ImportError:
        print("model_paths needs the bench extra: .venv/bin/pip install -e '.[dev,bench]'")
        raise SystemExit(NOT_RUN) from None
    for api in ModelAPI:
        rows: list[Row] = []
        cpu: dict[str, float] = {}
        for path in PATHS:
            cpu[path] = await cpu_per_event(api, path, streams, words, chunk_ms)
        with llmock_server() as server:
            for path in PATHS:
                closes = await abort_close(server, api, path, trials)
                rows.append(Row(f"abort → server saw close, {path}", closes, "ms"))
        print_table(
            f"model_paths: MODEL_API={api.value}, our HTTP path beside the SDK",
            rows,
            [
                "CPU per streamed event [µs]: "
                + ", ".join(f"{path} {value:.1f}" for path, value in cpu.items()),
                f"CPU: {streams} streams of {words} words at once, one event per "
                f"{chunk_ms} ms each, llmock in its own process; abort: {trials} trials "
                f"after {WARMUP} warm-up, llmock in a thread here",
                machine_line(),
                revision_line(),
            ],
        )
    return True


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "model_paths")
    p.add_argument("--streams", type=int, default=20)
    p.add_argument("--words", type=int, default=1000)
    p.add_argument("--chunk-ms", type=int, default=5)
    p.add_argument("--trials", type=int, default=150)
    args = p.parse_args()
    bench_main(args, lambda: measure(args.streams, args.words, args.chunk_ms, args.trials))


if __name__ == "__main__":
    main()
