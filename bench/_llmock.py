"""llmock, the test model server (Chat Completions, Responses and Anthropic's Messages
API): in a thread of this process, or in its own.

In a thread (:func:`llmock_server`), its journal times (``RequestRecord.started_at`` /
``ended_at``) come from ``time.monotonic()`` in the server thread: the same clock as the
benchmark's own ``time.monotonic()``, so server-observed moments can be subtracted from
client ones. The price is that the server shares this process's GIL.

In a process of its own (:func:`llmock_process`, ``bench/_llmock_serve.py``), it neither
shares the GIL nor counts towards this process's memory, but its journal is out of reach.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from contextlib import asynccontextmanager, contextmanager
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
from llmock.journal import RequestRecord
from llmock.scenarios import Reply, StreamFault
from llmock.simulation import MockResponseSettings
from llmock.testing import LLMockServer
from yarl import URL

from agent_core import HTTPChatModel, ModelAPI, OpenAIChatModel, build_model
from agent_core.models.http_exchange import READS_PER_S
from tests.agent_core.helpers import FIRST_TEXT_CHUNK

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

__all__ = [
    "LONG_TEXT",
    "Placement",
    "ProcessUpstream",
    "ThreadUpstream",
    "api_model",
    "journal_of",
    "llmock_process",
    "llmock_server",
    "openai_model",
    "paced_llmock",
    "serving_process",
    "settled_records",
    "stall_point",
]

LONG_TEXT = " ".join(f"word{i}" for i in range(400))
"""An answer long enough to stream for a while (one chunk per word)."""

Placement = Literal["thread", "process"]


@contextmanager
def llmock_server() -> Iterator[LLMockServer]:
    # tool_mode "off": unscripted requests get plain text; scripts decide tool calls.
    with LLMockServer(responses=MockResponseSettings(tool_mode="off")) as server:
        yield server


def openai_model(base_url: str) -> OpenAIChatModel:
    """The real model client, pointed at the llmock serving ``base_url``."""
    return OpenAIChatModel(model="bench-model", api_key="bench-key", base_url=base_url)


def api_model(api: ModelAPI, base_url: str, reads_per_s: float = READS_PER_S) -> HTTPChatModel:
    """The real adapter of ``api``, pointed at the llmock whose OpenAI base URL is
    ``base_url`` (llmock serves Anthropic's API under ``/anthropic``)."""
    if api is ModelAPI.ANTHROPIC:
        base_url = base_url.removesuffix("/").removesuffix("/v1") + "/anthropic"
    return build_model(
        api, model="bench-model", api_key="bench-key", base_url=base_url, reads_per_s=reads_per_s
    )


def answers_that_stall(server: LLMockServer) -> None:
    """Script every request to stream a little of a long answer, then stall for 30 s:
    a run that stays streaming until it is stopped or aborted."""
    server.state.scenarios.add(
        Reply(text="A long answer " * 100, times=None),
        StreamFault("stall", after_chunks=2, stall_seconds=30.0, times=None),
    )


def stall_point(api: ModelAPI | None = None) -> int:
    """After how many chunks a stalled answer stalls: once one piece of text has come
    (on every API when ``api`` is None: the latest of them)."""
    if api is None:
        return max(FIRST_TEXT_CHUNK.values()) + 1
    return FIRST_TEXT_CHUNK[api] + 1


async def settled_records(server: LLMockServer, *, wait_s: float = 5.0) -> list[RequestRecord]:
    """The journal once no request is in flight (waited for in a thread, not on the loop)."""
    return await asyncio.to_thread(server.state.journal.records, wait=wait_s)


async def journal_of(base_url: str) -> list[RequestRecord]:
    """The journal of an llmock in another process (``GET /_llmock/requests``). Its times
    are that process's ``time.monotonic()``: on Linux the same clock as this one's."""
    async with aiohttp.ClientSession() as http, http.get(_journal_url(base_url)) as answer:
        answer.raise_for_status()
        listed = await answer.json()
    return [_record(item) for item in listed["requests"]]


def _journal_url(base_url: str) -> str:
    """Where the llmock serving the OpenAI ``base_url`` lists (GET) and clears (DELETE)
    its journal."""
    return f"{base_url.removesuffix('/').removesuffix('/v1')}/_llmock/requests"


def _record(item: dict[str, Any]) -> RequestRecord:
    """A journal entry as ``GET /_llmock/requests`` lists it."""
    fields = {f.name for f in dataclass_fields(RequestRecord)}
    return RequestRecord(**{k: v for k, v in item.items() if k in fields})


@asynccontextmanager
async def llmock_process(*options: str, cpus: set[int] | None = None) -> AsyncIterator[str]:
    """Start ``bench._llmock_serve`` with ``options`` (on ``cpus`` only, if given);
    yields its OpenAI base URL."""
    async with serving_process("bench._llmock_serve", *options, cpus=cpus) as port:
        yield f"http://127.0.0.1:{port}/v1"


@asynccontextmanager
async def serving_process(
    module: str, *options: str, cpus: set[int] | None = None
) -> AsyncIterator[str]:
    """Run ``python -m module`` (on ``cpus`` only, if given); yield the first line it
    prints; stop it by closing stdin."""
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *options, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None
    if cpus is not None:
        os.sched_setaffinity(server.pid, cpus)
    try:
        async with asyncio.timeout(30):
            line = (await server.stdout.readline()).decode().strip()
        if not line:
            raise RuntimeError(f"{module} exited before it was ready")
        yield line
    finally:
        server.stdin.close()
        async with asyncio.timeout(15):
            await server.wait()


@asynccontextmanager
async def paced_llmock(
    placement: Placement,
    *,
    chunk_ms: int,
    words: int,
    stall_s: float = 0.0,
    cpus: set[int] | None = None,
    stall_after: int = 2,
) -> AsyncIterator[str]:
    """llmock answering every request with ``words`` words, one chunk every ``chunk_ms``;
    with ``stall_s``, every answer stalls that long after ``stall_after`` chunks (the
    first word, on Chat Completions) instead. In a process, on ``cpus`` only if given."""
    if placement == "process":
        options = (
            *("--chunk-ms", str(chunk_ms), "--words", str(words)),
            *("--stall", str(stall_s), "--stall-after", str(stall_after)),
        )
        async with llmock_process(*options, cpus=cpus) as base_url:
            yield base_url
        return
    with llmock_server() as server:
        text = " ".join(f"word{i}" for i in range(words))
        server.state.scenarios.add(Reply(text=text, times=None))
        if stall_s:
            stall = StreamFault(
                "stall", after_chunks=stall_after, stall_seconds=stall_s, times=None
            )
            server.state.scenarios.add(stall)
        chaos = server.state.stream_chaos
        server.state.stream_chaos = replace(chaos, chunk_delay_ms=chunk_ms).validated()
        yield server.base_url()


class ThreadUpstream:
    """An abort trial's upstream: llmock in a thread here, scripted per request to stream
    two chunks and stall. Its journal is read directly, but its thread shares this
    process's GIL: what the client does after closing delays what llmock notices."""

    def __init__(self, server: LLMockServer, stall_s: float, stall_after: int = 2) -> None:
        self.server, self.port, self.base_url = server, server.port, server.base_url()
        self._stall_s = stall_s
        self._stall_after = stall_after

    def script(self) -> None:
        stall = StreamFault("stall", after_chunks=self._stall_after, stall_seconds=self._stall_s)
        self.server.state.scenarios.add(Reply(text=LONG_TEXT), stall)

    async def ended(self, *, wait_s: float = 5.0) -> RequestRecord | None:
        """The trial's request once llmock has seen it end (None if it did not in time);
        the journal is cleared for the next trial."""
        records = await settled_records(self.server, wait_s=wait_s)
        self.server.state.journal.clear()  # a request still stalled stays out of later trials
        return records[0] if records else None


class ProcessUpstream:
    """The same, with llmock in a process of its own (``paced_llmock("process", ...,
    stall_s=...)``: every answer stalls): it notices a close as soon as the kernel hands
    it the FIN, whatever this process does next. Its journal is read, and cleared after
    each trial, over HTTP (``/_llmock/requests``) on a session of its own: ``async with``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        port = URL(base_url).port
        assert port is not None
        self.port = port
        self._journal = _journal_url(base_url)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ProcessUpstream:
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    def script(self) -> None:
        pass  # the process answers every request so

    async def ended(self, *, wait_s: float = 5.0) -> RequestRecord | None:
        """The trial's request once llmock has seen it end (None if it did not in time);
        the journal is cleared for the next trial."""
        assert self._http is not None, "use ProcessUpstream in `async with`"
        try:
            async with asyncio.timeout(wait_s):
                while True:
                    async with self._http.get(self._journal) as answer:
                        listed = (await answer.json())["requests"]
                    if listed:
                        break
                    await asyncio.sleep(0.005)  # the journal is in another process: polled
        except TimeoutError:
            listed = []
        async with self._http.delete(self._journal) as answer:
            answer.raise_for_status()
        if not listed:
            return None
        return _record(listed[0])
