"""The OpenAI Chat Completions adapter of :class:`agent_core.ports.ChatModel`.

Works with any OpenAI-compatible endpoint (``OPENAI_BASE_URL``). One call is one streamed
turn: text deltas go to the caller as they arrive, tool-call fragments are reassembled,
and usage is read from the final chunk.

The SDK makes the request (and maps a refused one to its errors), but the streamed body
is read here: its server-sent events are decoded by :mod:`agent_core.sse` and each chunk
is parsed with ``json.loads`` into plain dicts. Building the SDK's typed chunk objects
cost several times more CPU than everything else a streamed chunk does. The SDK's HTTP
client is its aiohttp one: per read, httpcore and anyio cost about as much again
(a cancel scope and an epoll registration each time).

The SDK's own retries are off (``max_retries=0``): the loop retries, because only the loop
can make a retry wait interruptible by Stop. Every failure leaves here as a
:class:`agent_core.errors.ModelError`.

Closing: the response is entered with ``async with``, so whatever ends the call (the last
chunk, an error, an idle timeout or an Abort's cancellation) closes the HTTP response
before the exception propagates. The server sees the connection go at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import openai

from agent_core.errors import (
    ContextOverflow,
    FatalModelError,
    ModelError,
    RateLimited,
    RetryableModelError,
)
from agent_core.outcomes import Usage
from agent_core.ports import ModelRequest, ModelResponse, TextSink, ToolCall
from agent_core.sse import SSEDecoder

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Mapping

__all__ = ["OpenAIChatModel"]

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_TRANSPORT_ERRORS = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
"""What reading the body raises when the connection fails (timeouts included)."""
_DRAIN_S = 0.1
"""After ``[DONE]``, how long the rest of the body is read for (so the connection can be
reused) before the response is simply closed."""


class OpenAIChatModel:
    """Streams chat completions from an OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        idle_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.model = model
        self.idle_timeout_s = idle_timeout_s
        # The read timeout is a backstop; the idle timeout below is the real limit.
        timeout = openai.Timeout(idle_timeout_s * 2, connect=connect_timeout_s)
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            # aiohttp under the SDK's httpx interface: its C parser and asyncio protocol
            # read a streamed chunk for a fraction of httpcore/anyio's CPU per read.
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = [t.to_openai() for t in request.tools]
            if request.tool_choice:
                kwargs["tool_choice"] = request.tool_choice
        turn = _Turn(on_text)
        try:
            async with self._client.chat.completions.with_streaming_response.create(
                **kwargs
            ) as raw:
                await _read(raw.http_response, turn, self.idle_timeout_s)
        except openai.APIError as exc:
            raise _translate(exc) from exc
        return turn.response()


async def _read(response: httpx2.Response, turn: _Turn, idle_s: float) -> None:
    """Feed the streamed body's chunks to ``turn`` until ``[DONE]`` or the body ends."""
    loop = asyncio.get_running_loop()
    decoder = SSEDecoder()
    try:
        async with contextlib.aclosing(_body(response)) as body, asyncio.timeout(None) as limit:
            idle = _IdleWatch(loop, limit, idle_s)
            try:
                async for piece in body:
                    idle.last = loop.time()
                    for event in decoder.feed(piece):
                        if event.data[:6] == b"[DONE]":
                            await _drain(response, body)
                            return
                        turn.absorb(_chunk(event.data))
            finally:
                idle.cancel()
    except TimeoutError as exc:
        if not limit.expired():
            raise
        raise RetryableModelError(f"the model stream stalled: no data for {idle_s:g}s") from exc
    except _TRANSPORT_ERRORS as exc:
        raise RetryableModelError(f"could not reach the model endpoint: {exc!r}") from exc


def _body(response: httpx2.Response) -> AsyncGenerator[bytes, None]:
    """The body as it arrives: raw when it is not compressed (the usual case), which
    skips httpx's decoder layer; decompressed otherwise."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    return response.aiter_raw() if encoding in ("", "identity") else response.aiter_bytes()


async def _drain(response: httpx2.Response, body: AsyncIterator[bytes]) -> None:
    """Read what follows ``[DONE]`` (briefly), so HTTP/1.1 can reuse the connection."""
    if response.http_version != "HTTP/1.1":
        return
    try:
        async with asyncio.timeout(_DRAIN_S):
            async for _ in body:
                pass
    except (TimeoutError, *_TRANSPORT_ERRORS):
        pass  # the answer is complete; the response is closed on the way out


def _chunk(data: bytes) -> dict[str, Any]:
    """One event's JSON, or the ModelError it stands for."""
    try:
        chunk = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        # A chunk that is not JSON: the stream is corrupt, the answer unusable.
        raise RetryableModelError(f"the model stream sent a malformed chunk: {exc}") from exc
    if not isinstance(chunk, dict):
        raise RetryableModelError(
            f"the model stream sent a malformed chunk: {type(chunk).__name__}, not an object"
        )
    error = chunk.get("error")
    if error:
        # The provider gave up mid-stream (it can no longer change the HTTP status).
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = "An error occurred during streaming"
        raise RetryableModelError(f"the model endpoint failed: {message}")
    return chunk


class _IdleWatch:
    """Expires ``limit`` once no bytes arrived for ``idle_s``.

    The reader only stores the time of each arrival (``last``); one timer checks it every
    ``idle_s`` at most. A timer set and cancelled per chunk cost more than the check.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, limit: asyncio.Timeout, idle_s: float
    ) -> None:
        self.last = loop.time()
        self._loop = loop
        self._limit = limit
        self._idle_s = idle_s
        self._timer = loop.call_at(self.last + idle_s, self._check)

    def _check(self) -> None:
        due = self.last + self._idle_s
        now = self._loop.time()
        if now >= due:
            self._limit.reschedule(now)  # cancels the reader; TimeoutError at its exit
        else:
            self._timer = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        self._timer.cancel()


@dataclass
class _Turn:
    """Accumulates one streamed turn from its chunks (the JSON objects, as dicts)."""

    on_text: TextSink
    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def absorb(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta:
                content = delta.get("content")
                if content:
                    self.text.append(content)
                    self.on_text(content)
                fragments = delta.get("tool_calls")
                if fragments:
                    self._absorb_calls(fragments)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason

    def _absorb_calls(self, fragments: list[dict[str, Any]]) -> None:
        for fragment in fragments:
            call = self.calls.setdefault(
                fragment.get("index") or 0, {"id": "", "name": "", "args": ""}
            )
            if fragment.get("id"):
                call["id"] = fragment["id"]
            function = fragment.get("function")
            if function:
                call["name"] += function.get("name") or ""
                call["args"] += function.get("arguments") or ""

    def response(self) -> ModelResponse:
        if self.finish_reason is None:
            # The nasty failure: a stream that ends cleanly but early. Never accept it.
            raise RetryableModelError("the model stream ended without a finish reason")
        calls = tuple(
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["args"])
            for i, c in sorted(self.calls.items())
        )
        return ModelResponse("".join(self.text), calls, self.finish_reason, self.usage)


def _translate(exc: openai.APIError) -> ModelError:
    """Map an SDK error to the core's taxonomy: retryable, context, or fatal."""
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return RetryableModelError(f"could not reach the model endpoint: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _error_message(exc)
        code = _error_code(exc)
        if status == 429:
            return RateLimited(message, retry_after=retry_after_s(exc.response.headers), code=code)
        if status >= 500 or status in _RETRYABLE_STATUS:
            return RetryableModelError(message, status=status, code=code)
        if _is_context_overflow(exc):
            return ContextOverflow(message, status=status, code=code)
        return FatalModelError(message, status=status, code=code)
    return RetryableModelError(f"the model endpoint failed: {exc}")


def _error_message(exc: openai.APIStatusError) -> str:
    return f"model endpoint answered HTTP {exc.status_code}: {exc.message}"


def _error_code(exc: openai.APIStatusError) -> str | None:
    """The provider's error code (``body.code`` or ``body.error.code``), if any."""
    body = exc.body if isinstance(exc.body, dict) else {}
    nested = body.get("error")
    code = body.get("code") or (nested.get("code") if isinstance(nested, dict) else None)
    return str(code) if code else None


def _is_context_overflow(exc: openai.APIStatusError) -> bool:
    code = _error_code(exc)
    return code == "context_length_exceeded" or "context length" in str(exc.message).lower()


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())
