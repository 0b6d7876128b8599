"""Every model adapter reads the streamed body itself: chunks, tool calls, usage, failures.

Against llmock, once per API (Chat Completions, Responses, Anthropic Messages; its
tool-call arguments arrive in 12-character fragments), and, for what llmock never sends
(an event split across network reads, a provider's error event mid-stream), against a
raw loopback HTTP server that writes a Chat Completions body in awkward pieces.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llmock.scenarios import Reply, ToolCall

from agent_core.models.api import HTTPChatModel, ModelAPI, build_model
from agent_core.models.sse import SSEDecoder
from agent_core.values.chat import ModelRequest
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    RateLimited,
    RetryableModelError,
)
from tests.agent_core.helpers import base_url_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from llmock.pytest_plugin import LLMock

    from agent_core.values.chat import ModelResponse

REQUEST = ModelRequest(messages=({"role": "user", "content": "go"},))


EVERY_API = pytest.mark.parametrize("api", list(ModelAPI))


@pytest.fixture
async def model_for(llm: LLMock) -> AsyncIterator[Any]:
    """``make(api)``: that API's adapter at llmock; ``make(base_url=...)``: Chat
    Completions at ``base_url``."""
    models: list[HTTPChatModel] = []

    def make(
        api: ModelAPI = ModelAPI.OPENAI_CHAT,
        base_url: str | None = None,
        idle_timeout_s: float = 10.0,
    ) -> HTTPChatModel:
        model = build_model(
            api,
            model="test-model",
            api_key="test-key",
            base_url=base_url or base_url_for(llm, api),
            idle_timeout_s=idle_timeout_s,
        )
        models.append(model)
        return model

    yield make
    for model in models:
        await model.aclose()


async def complete(model: HTTPChatModel) -> tuple[ModelResponse, list[str]]:
    texts: list[str] = []
    response = await model.complete(REQUEST, texts.append)
    return response, texts


# -- llmock ----------------------------------------------------------------------------


@EVERY_API
async def test_text_streams_as_deltas_with_usage_and_finish_reason(
    llm: LLMock, model_for: Any, api: ModelAPI
) -> None:
    llm.reply("one two three four")
    response, texts = await complete(model_for(api))

    assert len(texts) > 1
    assert "".join(texts) == response.text == "one two three four"
    assert response.finish_reason == "stop"
    assert response.tool_calls == ()
    assert response.usage.completion_tokens > 0


@EVERY_API
async def test_tool_calls_are_assembled_from_their_fragments(
    llm: LLMock, model_for: Any, api: ModelAPI
) -> None:
    long_args = {"path": "/srv/data/reports/2026/november.csv", "limit": 250, "note": "x" * 40}
    llm.add(
        Reply(
            text="Checking.",
            tool_calls=(ToolCall("read_file", long_args), ToolCall("step", {})),
        )
    )
    response, texts = await complete(model_for(api))

    assert "".join(texts) == "Checking."
    assert [c.name for c in response.tool_calls] == ["read_file", "step"]
    assert json.loads(response.tool_calls[0].arguments) == long_args
    assert json.loads(response.tool_calls[1].arguments or "{}") == {}
    assert all(c.id for c in response.tool_calls)
    assert len({c.id for c in response.tool_calls}) == 2
    assert response.finish_reason == "tool_calls"


@EVERY_API
async def test_http_errors_map_to_the_core_taxonomy(
    llm: LLMock, model_for: Any, api: ModelAPI
) -> None:
    model = model_for(api)

    llm.rate_limit(retry_after=7)
    with pytest.raises(RateLimited) as limited:
        await complete(model)
    assert limited.value.retry_after == 7

    llm.fail(429, code="insufficient_quota", message="You exceeded your current quota.")
    with pytest.raises(RateLimited) as quota:
        await complete(model)
    assert quota.value.code == "insufficient_quota"

    llm.context_overflow()
    with pytest.raises(ContextOverflow) as overflow:
        await complete(model)
    assert overflow.value.code == "context_length_exceeded"

    llm.fail(503)
    with pytest.raises(RetryableModelError) as outage:
        await complete(model)
    assert outage.value.status == 503

    llm.fail(401, message="bad key")
    with pytest.raises(FatalModelError) as refused:
        await complete(model)
    assert refused.value.status == 401

    llm.reply("still works")
    response, _ = await complete(model)
    assert response.text == "still works"


@EVERY_API
async def test_each_providers_own_overflow_and_overload_answers(
    llm: LLMock, model_for: Any, api: ModelAPI
) -> None:
    """llmock words a prompt past the context window as each provider does (Anthropic:
    "prompt is too long"); 529 is Anthropic's "overloaded", worth a retry."""
    model = model_for(api)
    long = ModelRequest(messages=({"role": "user", "content": "word " * 200},))
    llm.limits(context_window=20)
    with pytest.raises(ContextOverflow) as overflow:
        await model.complete(long, lambda _: None)
    assert overflow.value.status == 400
    llm.limits()

    llm.fail(529)
    with pytest.raises(RetryableModelError) as overloaded:
        await complete(model)
    assert overloaded.value.status == 529


@EVERY_API
async def test_broken_streams_are_retryable_errors(
    llm: LLMock, model_for: Any, api: ModelAPI
) -> None:
    model = model_for(api, idle_timeout_s=0.3)
    text = "alpha beta gamma delta epsilon"

    llm.reply(text).disconnect(after_chunks=2)
    with pytest.raises(RetryableModelError, match=r"the connection to the model at .* failed"):
        await complete(model)

    llm.reply(text).truncate(after_chunks=2)
    with pytest.raises(RetryableModelError, match="without a finish reason"):
        await complete(model)

    llm.reply(text).corrupt(after_chunks=2)
    with pytest.raises(RetryableModelError, match="malformed chunk"):
        await complete(model)

    llm.reply(text).stall(after_chunks=2, seconds=5)
    with pytest.raises(RetryableModelError, match="stalled"):
        await complete(model)


@EVERY_API
async def test_a_slow_but_steady_stream_is_not_idle(
    llm: LLMock, model_for: Any, api: ModelAPI
) -> None:
    """The idle limit is per gap, not for the whole answer: 8 gaps of 0.1 s each pass
    a 0.3 s limit although the answer takes longer than that."""
    llm.pace(100).reply("a b c d e f g h")
    response, texts = await complete(model_for(api, idle_timeout_s=0.3))
    assert response.text == "a b c d e f g h"
    assert len(texts) >= 8


# -- a raw server: pieces llmock never sends -------------------------------------------


def sse_body(*payloads: Any, line_end: str = "\n") -> bytes:
    end = line_end.encode()
    out = b": a comment, ignored" + end
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        out += b"data: " + data.encode() + end + end
    return out


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.fixture
async def raw_server() -> AsyncIterator[Any]:
    """Serve one body per request, written in the given pieces, then close."""
    bodies: list[Sequence[bytes]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        for piece in bodies.pop(0):
            writer.write(piece)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    def serve(*pieces: bytes) -> str:
        bodies.append(pieces)
        return f"http://127.0.0.1:{port}/v1"

    async with server:
        yield serve


def split_everywhere(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"])
async def test_events_split_across_reads_are_reassembled(
    raw_server: Any, model_for: Any, line_end: str
) -> None:
    body = sse_body(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "héllo "}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "st"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "ep", "arguments": '{"n"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
        "[DONE]",
        line_end=line_end,
    )
    # 3-byte pieces: every event, the UTF-8 "é" and (for CRLF) line ends are split.
    model = model_for(base_url=raw_server(*split_everywhere(body, 3)))
    response, texts = await complete(model)

    assert texts == ["héllo "]
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "step", '{"n": 1}')
    ]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (5, 3)
    assert response.finish_reason == "tool_calls"


async def test_an_error_event_mid_stream_is_a_retryable_error(
    raw_server: Any, model_for: Any
) -> None:
    body = sse_body(chunk({"content": "partial"}), {"error": {"message": "server overloaded"}})
    texts: list[str] = []
    with pytest.raises(RetryableModelError, match="server overloaded"):
        await model_for(base_url=raw_server(body)).complete(REQUEST, texts.append)
    assert texts == ["partial"]


async def test_a_chunk_that_is_not_an_object_is_malformed(raw_server: Any, model_for: Any) -> None:
    body = sse_body(chunk({"content": "a"}), "[1, 2]")
    with pytest.raises(RetryableModelError, match="malformed chunk"):
        await complete(model_for(base_url=raw_server(body)))


# -- the decoder alone -----------------------------------------------------------------


def decode(pieces: Sequence[bytes]) -> list[tuple[str | None, bytes]]:
    decoder = SSEDecoder()
    return [(e.event, e.data) for piece in pieces for e in decoder.feed(piece)]


def test_decoder_fields_multiline_data_and_an_unfinished_event() -> None:
    body = b"event: delta\ndata:first\ndata: second\nid: 7\nretry: 10\n\n: ping\n\ndata: open"
    assert decode([body]) == [("delta", b"first\nsecond")]


@given(
    data=st.lists(st.text(alphabet="ab é{}:\"'", min_size=1), min_size=1, max_size=5),
    line_end=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_decoder_gives_the_same_events_however_the_body_is_split(
    data: list[str], line_end: str, cuts: list[int]
) -> None:
    body = b"".join(
        b": c" + line_end.encode() + f"data: {d}".encode() + line_end.encode() * 2 for d in data
    )
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert decode(pieces) == decode([body]) == [(None, d.encode()) for d in data]


@pytest.mark.parametrize(
    ("usage", "parts"),
    [
        (
            {
                "prompt_tokens": 50,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 32},
                "completion_tokens_details": {"reasoning_tokens": 12},
            },
            (32, 12),
        ),
        # A reply that does not have the documented shape counts no parts, and still works.
        (
            {
                "prompt_tokens": 50,
                "completion_tokens": 20,
                "prompt_tokens_details": ["cached_tokens"],
                "completion_tokens_details": {"reasoning_tokens": "many"},
            },
            (0, 0),
        ),
    ],
)
async def test_cached_and_reasoning_tokens_are_read_where_the_endpoint_says(
    raw_server: Any, model_for: Any, usage: dict[str, Any], parts: tuple[int, int]
) -> None:
    body = sse_body(
        chunk({"role": "assistant", "content": "hi"}),
        chunk({}, "stop"),
        {"choices": [], "usage": usage},
        "[DONE]",
    )
    response, _ = await complete(model_for(base_url=raw_server(body)))

    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (50, 20)
    assert (response.usage.cached_tokens, response.usage.reasoning_tokens) == parts
