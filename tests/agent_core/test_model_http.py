"""OpenAIChatModel's own HTTP client: what it sends, pooling, proxies, closing, refusals.

Against loopback servers that answer with exactly the bytes a test gives (or never
answer), and an aiohttp server for connection reuse. The streamed body's decoding and
llmock's faults are in test_model_stream.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from agent_core.models.anthropic_messages import AnthropicModel
from agent_core.models.http_exchange import ReadPacer
from agent_core.models.openai_chat import OpenAIChatModel
from agent_core.values.chat import ModelRequest
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    ModelUnreachable,
    RateLimited,
    RetryableModelError,
)
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

REQUEST = ModelRequest(messages=({"role": "user", "content": "go"},))
WAIT_S = 5.0


def sse(*payloads: Any) -> bytes:
    return b"".join(
        b"data: " + (p if isinstance(p, str) else json.dumps(p)).encode() + b"\n\n"
        for p in payloads
    )


def text_chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


ANSWER = sse(text_chunk("hello"), text_chunk("", "stop"), "[DONE]")


@dataclass
class Exchange:
    """One request as the raw server saw it."""

    head: bytes
    body: bytes
    closed_by_client: bool = False


@dataclass
class RawServer:
    """Answers each connection's request with the next given bytes, then closes. Given
    None, it answers with a stream head and one chunk, given b"" with nothing at all, and
    then waits for the client to go."""

    answers: list[bytes | None] = field(default_factory=list)
    seen: list[Exchange] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    port: int = 0
    pieces: list[bytes] = field(default_factory=list)
    """What the answer ``b"pieces"`` writes, one write each."""

    def url(self, *answers: bytes | None, host: str = "127.0.0.1") -> str:
        self.answers.extend(answers)
        return f"http://{host}:{self.port}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        exchange = Exchange(head, await reader.readexactly(length))
        self.seen.append(exchange)
        self.changes.notify()
        answer = self.answers.pop(0)
        if not answer:
            if answer is None:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"connection: close\r\n\r\n" + sse(text_chunk("first"))
                )
                await writer.drain()
            await reader.read()  # returns at EOF: the client closed the connection
            exchange.closed_by_client = True
            self.changes.notify()
        elif answer == b"pieces":  # the answer in separate writes, a pause between
            for piece in self.pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.05)  # wait-ok: so the client reads them apart
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    state = RawServer()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state


@pytest.fixture
async def model_at() -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    models: list[OpenAIChatModel] = []

    def make(base_url: str, idle_timeout_s: float = 10.0) -> OpenAIChatModel:
        model = OpenAIChatModel(
            model="test-model", api_key="sk-test", base_url=base_url, idle_timeout_s=idle_timeout_s
        )
        models.append(model)
        return model

    yield make
    for model in models:
        await model.aclose()


def http_answer(status: str, body: bytes, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"content-length: {len(body)}", *headers, "", ""]
    return "\r\n".join(lines).encode() + body


async def test_the_request_is_an_authorised_streamed_chat_completion(
    raw: RawServer, model_at: Any
) -> None:
    ok = http_answer("200 OK", ANSWER, "content-type: text/event-stream")
    response = await model_at(raw.url(ok)).complete(REQUEST, lambda _: None)

    assert response.text == "hello"
    head = raw.seen[0].head.decode().lower()
    assert head.startswith("post /v1/chat/completions http/1.1")
    assert "authorization: bearer sk-test" in head
    assert "content-type: application/json" in head
    assert json.loads(raw.seen[0].body) == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_refusals_whatever_their_body_map_to_the_taxonomy(
    raw: RawServer, model_at: Any
) -> None:
    async def refusal(answer: bytes) -> BaseException:
        with pytest.raises(Exception) as caught:
            await model_at(raw.url(answer)).complete(REQUEST, lambda _: None)
        return caught.value

    limited = await refusal(http_answer("429 Too Many Requests", b"{}", "retry-after-ms: 1500"))
    assert isinstance(limited, RateLimited) and limited.retry_after == 1.5

    gateway = await refusal(http_answer("502 Bad Gateway", b"<html>bad gateway</html>"))
    assert isinstance(gateway, RetryableModelError) and gateway.status == 502
    assert "bad gateway" in str(gateway)

    bad = await refusal(http_answer("400 Bad Request", b"not json at all"))
    assert isinstance(bad, FatalModelError) and bad.status == 400
    assert "not json at all" in str(bad)

    too_long = json.dumps(
        {"error": {"message": "This model's maximum context length is 8192 tokens", "code": None}}
    ).encode()
    overflow = await refusal(http_answer("400 Bad Request", too_long))
    assert isinstance(overflow, ContextOverflow)
    assert "maximum context length is 8192" in str(overflow)


async def test_a_refusal_whose_body_arrives_in_pieces_is_read_whole(
    raw: RawServer, model_at: Any
) -> None:
    error = {"error": {"message": "too long", "code": "context_length_exceeded"}}
    body = json.dumps(error).encode()
    head = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\r\n"
    raw.pieces = [head + body[:10], body[10:]]  # no length: the body ends when it closes
    with pytest.raises(ContextOverflow) as caught:
        await model_at(raw.url(b"pieces")).complete(REQUEST, lambda _: None)
    assert caught.value.code == "context_length_exceeded"


async def test_an_answer_that_never_starts_is_a_stall(raw: RawServer, model_at: Any) -> None:
    """The idle limit covers the wait for the answer's head, not only gaps in its body;
    the stalled connection is closed."""
    silent = model_at(raw.url(b""), idle_timeout_s=0.3)  # the request is read, never answered
    with pytest.raises(RetryableModelError, match="stalled"):
        await silent.complete(REQUEST, lambda _: None)
    await raw.changes.until(
        lambda: raw.seen[0].closed_by_client,
        timeout=WAIT_S,
        describe=lambda: "the server to see the connection closed",
    )


async def test_an_unreachable_endpoint_is_retryable(model_at: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(RetryableModelError, match="could not reach"):
        await model_at(f"http://127.0.0.1:{port}/v1").complete(REQUEST, lambda _: None)


async def test_an_unreachable_endpoint_names_its_url_and_setting_not_aiohttps_repr(
    model_at: Any,
) -> None:
    """What a person reads: where the request went (no key), which setting says so, and
    why in a few words."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = sock.getsockname()[1]
        model = model_at(f"http://127.0.0.1:{port}/v1?api-key=hunter2")
        with pytest.raises(ModelUnreachable) as raised:
            await model.complete(REQUEST, lambda _: None)

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    assert str(raised.value) == (
        f"could not reach the model at {url}?*** (OPENAI_BASE_URL): connection refused"
    )
    assert (raised.value.url, raised.value.setting) == (f"{url}?api-key=***", "OPENAI_BASE_URL")


async def test_a_base_url_with_a_query_gets_the_path_before_it(raw: RawServer) -> None:
    """Azure-style ``...?api-version=``: the API's path goes on the URL's path, and the
    query is sent as it was set."""
    ok = http_answer("200 OK", ANSWER, "content-type: text/event-stream")
    model = OpenAIChatModel(
        model="test-model", api_key="sk-test", base_url=raw.url(ok) + "/?api-version=2025-01"
    )
    try:
        await model.complete(REQUEST, lambda _: None)
    finally:
        await model.aclose()
    anthropic = AnthropicModel(model="m", api_key="k", base_url="https://gw.example/a?team=7")

    head = raw.seen[0].head.decode().lower()
    assert head.startswith("post /v1/chat/completions?api-version=2025-01 http/1.1")
    assert anthropic.endpoint.url == "https://gw.example/a/v1/messages?team=7"


async def test_a_cancelled_turn_closes_its_connection(raw: RawServer, model_at: Any) -> None:
    model = model_at(raw.url(None))
    first = asyncio.Event()
    task = asyncio.create_task(model.complete(REQUEST, lambda _: first.set()))
    await asyncio.wait_for(first.wait(), WAIT_S)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await raw.changes.until(
        lambda: raw.seen[0].closed_by_client,
        timeout=WAIT_S,
        describe=lambda: "the server to see the connection closed",
    )


async def test_the_proxy_in_the_environment_is_used(
    raw: RawServer, model_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = http_answer("200 OK", ANSWER, "content-type: text/event-stream")
    proxy = raw.url(ok).removesuffix("/v1")
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    response = await model_at("http://model.invalid/v1").complete(REQUEST, lambda _: None)

    assert response.text == "hello"
    request_line = raw.seen[0].head.split(b"\r\n")[0]
    assert request_line == b"POST http://model.invalid/v1/chat/completions HTTP/1.1"


async def test_no_proxy_in_the_environment_is_honoured(
    raw: RawServer, model_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = http_answer("200 OK", ANSWER, "content-type: text/event-stream")
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens: would fail
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1")

    response = await model_at(raw.url(ok)).complete(REQUEST, lambda _: None)

    assert response.text == "hello"
    assert raw.seen[0].head.startswith(b"POST /v1/chat/completions HTTP/1.1")


async def test_a_netrc_entry_for_the_endpoint_leaves_the_key_alone(
    raw: RawServer, model_at: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    ok = http_answer("200 OK", ANSWER, "content-type: text/event-stream")

    response = await model_at(raw.url(ok)).complete(REQUEST, lambda _: None)

    assert response.text == "hello"
    assert "authorization: bearer sk-test" in raw.seen[0].head.decode().lower()


@contextlib.asynccontextmanager
async def streaming_server(
    write: Callable[[web.StreamResponse], Awaitable[None]],
) -> AsyncIterator[tuple[str, list[Any]]]:
    """A real aiohttp server answering every chat completion as ``write`` streams it;
    yields its base URL and each request's peer (one peer: one connection, reused)."""
    peers: list[Any] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        await write(reply)
        await reply.write_eof()
        return reply

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", peers
    finally:
        await runner.cleanup()


async def test_a_finished_answer_leaves_its_connection_for_the_next_turn(model_at: Any) -> None:
    async def answer(reply: web.StreamResponse) -> None:
        await reply.write(ANSWER)

    async with streaming_server(answer) as (url, peers):
        model = model_at(url)
        for _ in range(3):
            assert (await model.complete(REQUEST, lambda _: None)).text == "hello"

    assert len(peers) == 3
    assert len(set(peers)) == 1  # one connection, reused


async def test_a_chunk_that_is_not_utf8_is_malformed(raw: RawServer, model_at: Any) -> None:
    body = sse(text_chunk("fine")) + b'data: {"choices": "\xff\xfe"}\n\n'
    answer = http_answer("200 OK", body, "content-type: text/event-stream")
    texts: list[str] = []
    with pytest.raises(RetryableModelError, match="malformed chunk"):
        await model_at(raw.url(answer)).complete(REQUEST, texts.append)
    assert texts == ["fine"]


async def test_an_answer_read_at_a_pace_is_whole_and_its_connection_serves_the_next_turn() -> None:
    """The answer's pieces arrive apart while the model leaves its stream unread for 50 ms
    after each read (20 reads a second, one stream open): every word arrives once and in
    order, and the connection, paused between reads, reads again when the next turn
    takes it from the pool."""
    words = [f"w{i} " for i in range(12)]

    async def answer(reply: web.StreamResponse) -> None:
        for word in words:
            await reply.write(sse(text_chunk(word)))
            await asyncio.sleep(0.02)  # wait-ok: pieces that arrive apart
        await reply.write(sse(text_chunk("", "stop"), "[DONE]"))

    async with streaming_server(answer) as (url, peers):
        model = OpenAIChatModel(model="test-model", api_key="sk-test", base_url=url, reads_per_s=20)
        try:
            for _ in range(2):
                deltas: list[str] = []
                response = await model.complete(REQUEST, deltas.append)
                assert deltas == words
                assert response.text == "".join(words)
                assert response.finish_reason == "stop"
        finally:
            await model.aclose()

    assert len(peers) == 2
    assert len(set(peers)) == 1  # the second turn reused the connection


def test_reads_are_paced_only_when_many_streams_are_open() -> None:
    """At 1,000 reads a second: one stream is read as it arrives, 200 every 200 ms, and
    however many are open each is read at least every 500 ms; 0 never paces."""
    pacer = ReadPacer(1000)
    for open_streams, gap in ((1, 0.0), (5, 0.0), (200, 0.2), (5000, 0.5)):
        pacer.open = open_streams
        assert pacer.period_s() == pytest.approx(gap)
    unpaced = ReadPacer(0)
    unpaced.open = 1000
    assert unpaced.period_s() == 0.0
