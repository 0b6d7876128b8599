"""The OpenAI Chat Completions adapter of :class:`agent_core.ports.ChatModel`.

Works with any OpenAI-compatible endpoint (``OPENAI_BASE_URL``). One call is one streamed
turn: text deltas go to the caller as they arrive, tool-call fragments are reassembled,
and usage is read from the final chunk.

The request is ours: one aiohttp ``POST {base_url}/chat/completions`` (bearer key, JSON
body, ``stream: true`` with usage), on one session per model, so connections are pooled
and reused across turns. The streamed body is read with ``readany`` (one await per network
read, no generator layers), its server-sent events are decoded by :mod:`agent_core.sse`
and each chunk is parsed with ``orjson.loads`` into plain dicts. The OpenAI SDK cost more
CPU per streamed chunk than everything else a chunk does: first its typed chunk objects,
then, once those were gone, the layers between its HTTP client and the socket.

Reads are paced when many streams are open (:class:`_ReadPacer`). A model sends one
event per token, tens a second per stream, and each network read costs the process
about the same whatever it carries: hundreds of streams read piece by piece keep a core
busy. So a model makes at most about ``reads_per_s`` reads a second across its open
streams: with ``n`` open, a stream that has been read is left unread until the pacer's
next tick, one every ``n / reads_per_s`` seconds (at most ``_GATHER_MAX_S``), and what
arrives meanwhile waits in the socket and comes in with the next read. The streams
resume together, on one timer, so the event loop takes their reads in one pass. A few
streams are read as their pieces arrive (a period under ``_GATHER_MIN_S`` is not worth
a pause); 200 streams at the default are read every 200 ms, five times as often as
Slack's answer stream is refreshed. An answer's first text is never held back, nor its
end once the finish reason has come; an Abort's cancellation ends a pause at once.

Nothing retries here: the loop does, because only the loop can make a retry wait
interruptible by Stop. Every failure leaves here as a :class:`agent_core.errors.ModelError`
(the mapping is in :func:`_refused` for answers with an error status, and in :func:`_read`
for what happens on the wire).

Closing: whatever ends the call other than a complete answer (an error, an idle timeout,
an Abort's cancellation) hangs up at once, before the exception propagates: the socket is
shut down (the FIN leaves then) and the connection closed (:func:`_hang_up`); the server
sees it go at that moment. A complete answer leaves the connection in the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import math
import os
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

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
    from collections.abc import Awaitable, Callable, Mapping

__all__ = ["OpenAIChatModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, ssl.SSLError)
"""What sending the request or reading the body raises when the connection fails."""
_DRAIN_S = 0.1
"""After ``[DONE]``, how long the rest of the body is read for (so the connection can be
reused) before the response is simply closed."""
_ERROR_BODY_MAX = 64 * 1024
"""How much of an error answer's body is read for its message."""
READS_PER_S = 1000.0
"""The default pace of a model's reads across its open streams (see the module doc)."""
_GATHER_MIN_S = 0.01
"""A pacing period shorter than this is not kept: pausing would cost more than the reads
it saves."""
_GATHER_MAX_S = 0.5
"""However many streams are open, each is read at least this often."""


class OpenAIChatModel:
    """Streams chat completions from an OpenAI-compatible endpoint.

    ``base_url`` defaults to ``OPENAI_BASE_URL`` from the environment, then to OpenAI's.
    The HTTP session is made on first use (it belongs to the running event loop) and
    closed by :meth:`aclose`.

    ``reads_per_s`` paces the reads of many open streams (0: every piece is read as it
    arrives, however many are open); see the module doc.

    The proxy comes from the environment (``HTTP(S)_PROXY``, ``NO_PROXY``, as aiohttp's
    ``trust_env`` reads them), looked up once here. With ``trust_env`` itself, aiohttp
    would look it up, and ``~/.netrc`` too, in a worker thread for every request, and
    a ``.netrc`` entry for the endpoint would clash with the bearer key.
    """

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        idle_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        reads_per_s: float = READS_PER_S,
    ) -> None:
        self.model = model
        self.idle_timeout_s = idle_timeout_s
        self._pacer = _ReadPacer(reads_per_s)
        self.connect_timeout_s = connect_timeout_s
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.url = base.rstrip("/") + "/chat/completions"
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            # Compressing a stream of small events saves little and costs CPU per read.
            "Accept-Encoding": "identity",
            "User-Agent": "threadpilot",
        }
        self._proxy, self._proxy_auth = _env_proxy(self.url)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # Hundreds of runs stream at once, all to one host: no pool limit.
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
                # Only connecting has a timeout of its own; once the request is sent,
                # the idle watch in _read is the limit (a per-read timer costs CPU).
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.connect_timeout_s, sock_connect=self.connect_timeout_s
                ),
                raise_for_status=False,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [t.to_openai() for t in request.tools]
            if request.tool_choice:
                body["tool_choice"] = request.tool_choice
        turn = _Turn(on_text)
        send = functools.partial(
            self._http().post,
            self.url,
            data=json.dumps(body).encode(),
            headers=self._headers,
            proxy=self._proxy,
            proxy_auth=self._proxy_auth,
        )
        await _read(send, turn, self.idle_timeout_s, self._pacer)
        return turn.response()


def _env_proxy(url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy the environment names for ``url`` (and its credentials), if any."""
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


async def _read(
    send: Callable[[], Awaitable[aiohttp.ClientResponse]],
    turn: _Turn,
    idle_s: float,
    pacer: _ReadPacer,
) -> None:
    """Send the request and feed the streamed body's chunks to ``turn`` until ``[DONE]``
    or the body ends, its reads paced by ``pacer``. No data for ``idle_s`` (the answer's
    head included) is a stall."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(None) as limit:
            idle = _IdleWatch(loop, limit, idle_s)
            try:
                response = await send()
                try:
                    if response.status >= 400:
                        raise _refused(response.status, response.headers, await _text(response))
                    await _events(response, turn, idle, loop, pacer)
                except BaseException:
                    _hang_up(response)  # at once: the server sees the connection go now
                    raise
                response.release()
            finally:
                idle.cancel()
    except TimeoutError as exc:
        if limit.expired():
            raise RetryableModelError(f"the model stream stalled: no data for {idle_s:g}s") from exc
        if isinstance(exc, aiohttp.ClientError):  # aiohttp's connect timeouts
            raise RetryableModelError(f"could not reach the model endpoint: {exc!r}") from exc
        raise
    except _TRANSPORT_ERRORS as exc:
        raise RetryableModelError(f"could not reach the model endpoint: {exc!r}") from exc


def _hang_up(response: aiohttp.ClientResponse) -> None:
    """Close the answer's connection, its socket shut down first: the FIN leaves now, not
    on the loop's next turn after aiohttp's clean-up of the connection (``close()`` alone
    sends it from ``connection_lost``, some 0.3 ms later)."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    response.close()


async def _events(
    response: aiohttp.ClientResponse,
    turn: _Turn,
    idle: _IdleWatch,
    loop: asyncio.AbstractEventLoop,
    pacer: _ReadPacer,
) -> None:
    decoder = SSEDecoder()
    content = response.content
    read = content.readany
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    pacer.open += 1
    try:
        while piece := await read():
            idle.last = loop.time()
            for event in decoder.feed(piece):
                if event.data[:6] == b"[DONE]":
                    await _drain(response)
                    return
                turn.absorb(_chunk(event.data))
            if pacer.paces() and protocol is not None:
                if turn.finish_reason is None and not content.is_eof():
                    await _gather(protocol, pacer)
    finally:
        pacer.open -= 1


async def _gather(protocol: asyncio.BaseProtocol, pacer: _ReadPacer) -> None:
    """Leave the connection unread until the pacer's next tick: what arrives meanwhile
    waits in the socket and comes in with the next read. An Abort's cancellation ends the
    wait at once; the connection reads again before anything else is done with it."""
    protocol.pause_reading()  # type: ignore[attr-defined]
    try:
        await pacer.tick()
    finally:
        protocol.resume_reading()  # type: ignore[attr-defined]


class _ReadPacer:
    """The ticks on which a model's paused streams are read again (see the module doc).

    One timer for all of them, set only while a stream waits.
    """

    def __init__(self, reads_per_s: float) -> None:
        if reads_per_s < 0:
            raise ValueError(f"reads_per_s must be 0 or more, got {reads_per_s}")
        self._per_s = reads_per_s
        self.open = 0
        """The streams being read now."""
        self._next: asyncio.Event | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last = -math.inf

    def period_s(self) -> float:
        """The time between two ticks now; 0 when the streams are not paced."""
        if not self._per_s:
            return 0.0
        period = min(self.open / self._per_s, _GATHER_MAX_S)
        return period if period >= _GATHER_MIN_S else 0.0

    def paces(self) -> bool:
        return self.period_s() > 0

    async def tick(self) -> None:
        """Return at the next tick (cancellable: an Abort does not wait for it)."""
        if self._timer is None:  # nobody waits: a new event, on this loop
            self._next = asyncio.Event()
            loop = asyncio.get_running_loop()
            period = self.period_s()
            due = self._last + period
            if due <= loop.time():
                due = loop.time() + period
            self._timer = loop.call_at(due, self._ring)
        assert self._next is not None
        await self._next.wait()

    def _ring(self) -> None:
        self._timer = None
        self._last = asyncio.get_running_loop().time()
        assert self._next is not None
        self._next.set()


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read what follows ``[DONE]`` (briefly), so the connection can be reused."""
    try:
        async with asyncio.timeout(_DRAIN_S):
            while await response.content.readany():
                pass
    except (TimeoutError, *_TRANSPORT_ERRORS):
        response.close()  # the answer is complete; the connection is not worth keeping


async def _text(response: aiohttp.ClientResponse) -> str:
    """An error answer's body (its first ``_ERROR_BODY_MAX`` bytes), as text."""
    pieces: list[bytes] = []
    left = _ERROR_BODY_MAX
    while left > 0 and (piece := await response.content.read(left)):
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces).decode("utf-8", "replace")


def _chunk(data: bytes) -> dict[str, Any]:
    """One event's JSON, or the ModelError it stands for."""
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError as exc:  # invalid UTF-8 included
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


def _refused(status: int, headers: Mapping[str, str], text: str) -> ModelError:
    """Map an answer with an error status to the core's taxonomy: retryable, context,
    or fatal. The provider's JSON error (``{"error": {"message", "code"}}``) gives the
    message and code when it sent one."""
    message, code = _error_details(text)
    described = f"model endpoint answered HTTP {status}: {message}"
    if status == 429:
        return RateLimited(described, retry_after=retry_after_s(headers), code=code)
    if status >= 500 or status in _RETRYABLE_STATUS:
        return RetryableModelError(described, status=status, code=code)
    if code == "context_length_exceeded" or "context length" in text.lower():
        return ContextOverflow(described, status=status, code=code)
    return FatalModelError(described, status=status, code=code)


def _error_details(text: str) -> tuple[str, str | None]:
    """The error's message (the body itself when it is not the usual JSON) and code."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return text.strip() or "(no body)", None
    nested = body.get("error")
    error = nested if isinstance(nested, dict) else body
    message = error.get("message")
    code = error.get("code") or body.get("code")
    if not isinstance(message, str) or not message:
        message = text.strip()
    return message, (str(code) if code else None)


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
