"""The limits every model adapter puts on one reply, whatever its stream sends.

A stream that only sends keep-alive comments never goes idle, so only the reply's own
deadline (``MODEL_REPLY_TIMEOUT``) ends it, and with it the run and a Stop waiting for
the step to end. An event, or a tool call's arguments, that grows without end is refused
before it takes more memory than the limit. Against a real aiohttp server on loopback
that writes such a stream until the client hangs up.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from agent_core.models.api import ModelAPI, build_model
from agent_core.models.http_exchange import MAX_ARGUMENT_CHARS, MAX_EVENT_BYTES
from agent_core.models.retry import RetryPolicy
from agent_core.models.sse import SSEDecoder
from agent_core.run.agent import Agent
from agent_core.run.config import AgentConfig
from agent_core.values.chat import ModelRequest
from agent_core.values.errors import RetryableModelError
from agent_core.values.outcomes import ExitCode
from agent_core.values.stop import StopReason
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from agent_core.models.api import HTTPChatModel

EVERY_API = pytest.mark.parametrize("api", list(ModelAPI))
REQUEST = ModelRequest(messages=({"role": "user", "content": "go"},))
WAIT_S = 20.0
FAST_RETRY = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.02)
KEEP_ALIVE = b": keep-alive\n\n"
PIECE = 64 * 1024


@dataclass
class EndlessServer:
    """Answers every POST with ``head``, then ``repeat`` over and over (``pause_s``
    apart) until the client hangs up."""

    head: bytes = b""
    repeat: bytes = KEEP_ALIVE
    pause_s: float = 0.0
    requests: int = 0
    closed: int = 0
    changes: Changes = field(default_factory=Changes)
    base_url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.requests += 1
        self.changes.notify()
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        try:
            await reply.write(self.head)
            while True:
                await reply.write(self.repeat)
                if self.pause_s:
                    await asyncio.sleep(self.pause_s)  # wait-ok: a keep-alive's period
        except (ConnectionError, asyncio.CancelledError):
            self.closed += 1
            self.changes.notify()
            raise

    async def all_closed(self) -> None:
        await self.changes.until(
            lambda: self.requests and self.closed == self.requests,
            timeout=WAIT_S,
            describe=lambda: f"{self.closed} of {self.requests} connections closed",
        )


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[EndlessServer]]]:
    """``await serve(head=..., repeat=...)``: an :class:`EndlessServer` on loopback."""
    runners: list[web.AppRunner] = []

    async def start(**kwargs: Any) -> EndlessServer:
        server = EndlessServer(**kwargs)
        app = web.Application()
        app.router.add_post("/{tail:.*}", server.handle)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        server.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        return server

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def models() -> AsyncIterator[list[HTTPChatModel]]:
    made: list[HTTPChatModel] = []
    yield made
    for model in made:
        await model.aclose()


def model_at(
    models: list[HTTPChatModel], api: ModelAPI, server: EndlessServer, reply_timeout_s: float
) -> HTTPChatModel:
    model = build_model(
        api,
        model="test-model",
        api_key="test-key",
        base_url=server.base_url,
        idle_timeout_s=10.0,  # keep-alives come every 50 ms: never idle
        reply_timeout_s=reply_timeout_s,
    )
    models.append(model)
    return model


# -- the reply's deadline --------------------------------------------------------------


@EVERY_API
async def test_a_stream_of_keep_alives_ends_the_run_at_the_reply_deadline(
    serve: Any, models: list[HTTPChatModel], api: ModelAPI
) -> None:
    """Every attempt (the retry and the forced final turn included) is cut off at the
    deadline and its connection closed; the run ends saying why."""
    server = await serve(repeat=KEEP_ALIVE, pause_s=0.05)
    agent = Agent(model_at(models, api, server, 0.5), config=AgentConfig(retry=FAST_RETRY))
    async with asyncio.timeout(WAIT_S):
        result = await agent.new_run("answer slowly").run()

    assert result.exit_code is not ExitCode.FINAL_ANSWER
    assert result.error is not None
    assert "did not end within 0.5s (MODEL_REPLY_TIMEOUT)" in result.error
    assert server.requests == 3  # two attempts, then the final turn's one
    await server.all_closed()


@EVERY_API
async def test_a_stop_waiting_on_a_stream_of_keep_alives_ends_at_the_deadline(
    serve: Any, models: list[HTTPChatModel], api: ModelAPI
) -> None:
    server = await serve(repeat=KEEP_ALIVE, pause_s=0.05)
    agent = Agent(model_at(models, api, server, 0.5), config=AgentConfig(retry=FAST_RETRY))
    run = agent.new_run("answer slowly")
    async with asyncio.timeout(WAIT_S):
        task = asyncio.create_task(run.run())
        await server.changes.until(lambda: server.requests, timeout=WAIT_S, describe=str)
        assert run.request_stop(StopReason.STOP, "U1")
        result = await task

    assert result.stop_reason is StopReason.STOP
    assert result.exit_code is ExitCode.USER_STOP
    await server.all_closed()


# -- what a reply may hold -------------------------------------------------------------


@EVERY_API
async def test_an_event_that_never_ends_is_refused(
    serve: Any, models: list[HTTPChatModel], api: ModelAPI
) -> None:
    server = await serve(head=b"data: ", repeat=b"x" * PIECE)
    model = model_at(models, api, server, 60.0)
    with pytest.raises(RetryableModelError, match=f"an event over {MAX_EVENT_BYTES} bytes"):
        await model.complete(REQUEST, lambda _: None)
    await server.all_closed()


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


ENDLESS_ARGUMENTS = {
    ModelAPI.OPENAI_CHAT: (
        b"",
        sse(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "id": "c1", "function": {"arguments": "x" * PIECE}}
                            ]
                        },
                    }
                ]
            }
        ),
    ),
    ModelAPI.OPENAI_RESPONSES: (
        sse(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {"type": "function_call", "call_id": "c1", "name": "write"},
            }
        ),
        sse(
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 0,
                "delta": "x" * PIECE,
            }
        ),
    ),
    ModelAPI.ANTHROPIC: (
        sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "c1", "name": "write", "input": {}},
            }
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "x" * PIECE},
            }
        ),
    ),
}
"""Per API: a tool call's start, then an argument fragment to send again and again."""


@EVERY_API
async def test_tool_call_arguments_that_never_end_are_refused(
    serve: Any, models: list[HTTPChatModel], api: ModelAPI
) -> None:
    head, fragment = ENDLESS_ARGUMENTS[api]
    server = await serve(head=head, repeat=fragment)
    model = model_at(models, api, server, 60.0)
    with pytest.raises(RetryableModelError, match=f"arguments over {MAX_ARGUMENT_CHARS}"):
        await model.complete(REQUEST, lambda _: None)
    await server.all_closed()


def test_the_decoder_keeps_no_more_than_its_limit_of_an_unfinished_event() -> None:
    decoder = SSEDecoder(max_event_bytes=1000)
    assert decoder.feed(b"data: ") == []
    for _ in range(9):
        assert decoder.feed(b"x" * 100) == []  # 906 bytes kept: under the limit
    with pytest.raises(RetryableModelError, match="over 1000 bytes"):
        decoder.feed(b"x" * 100)

    many_lines = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(RetryableModelError, match="over 1000 bytes"):
        many_lines.feed(b"data: " + b"y" * 400 + b"\n" + b"data: " + b"y" * 400 + b"\n" * 1)
        many_lines.feed(b"data: " + b"y" * 400 + b"\n")

    lines_and_an_open_one = SSEDecoder(max_event_bytes=1000)
    assert lines_and_an_open_one.feed(b"data: " + b"w" * 600 + b"\n") == []
    with pytest.raises(RetryableModelError, match="over 1000 bytes"):
        lines_and_an_open_one.feed(b"data: " + b"w" * 500)  # 601 + 506 bytes of one event

    fine = SSEDecoder(max_event_bytes=1000)
    pieces = [b"data: " + b"z" * 900, b"\n\n"]
    assert [e.data for p in pieces for e in fine.feed(p)] == [b"z" * 900]
