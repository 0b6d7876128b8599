"""The streamed HTTP exchange every model adapter makes, whatever its API.

An adapter (:mod:`agent_core.models.openai_chat` for Chat Completions,
:mod:`agent_core.models.openai_responses`, :mod:`agent_core.models.anthropic_messages`)
builds its API's request body and a *turn*: the object
that reads its API's server-sent events (:class:`StreamedTurn`). :class:`ModelEndpoint`
does the rest, the same way for all of them:

- one aiohttp ``POST`` with a JSON body, on one session per model, so connections are
  pooled and reused across turns; the proxy comes from the environment, looked up once;
- the streamed body is read with ``readany`` (one await per network read, no generator
  layers) and decoded by :mod:`agent_core.models.sse`;
- reads are paced when many streams are open (:class:`ReadPacer`);
- limits: no data for ``idle_timeout_s`` (the answer's head included) is a stall; a
  reply that has not ended ``reply_timeout_s`` after it was sent is cut off, whatever
  keep-alives kept it busy (``MODEL_REPLY_TIMEOUT``); an event or a tool call's arguments
  may not grow past :data:`MAX_EVENT_BYTES` / :data:`MAX_ARGUMENT_CHARS`;
- an answer with an error status becomes a :class:`agent_core.values.errors.ModelError`
  (:func:`refused`; an adapter may pass its own mapping), and so does what fails on the
  wire: no connection at all is :class:`~agent_core.values.errors.ModelUnreachable`, naming
  the URL (as :func:`~agent_core.values.redact.public_url` shows it) and its setting.

An adapter's URL is its base URL setting with the API's path appended
(:func:`endpoint_url`), before any query the setting carries (Azure's ``?api-version=``).

Why our own HTTP code rather than the providers' SDKs: measured on the same loopback
streams (bench/model_paths.py; figures in bench/README.md), the SDKs' typed events and
HTTP layers cost 100-150 µs of CPU per streamed event against 21-25 µs here, when a
chunk may cost 40 µs all the way from the model to Slack; and cancelled, an SDK's client
closes its socket later (p50 0.13 ms, p99 several ms, against 0.07 / 0.2 ms here).

Closing: whatever ends the call other than a complete answer (an error, a limit, an
Abort's cancellation) hangs up at once, before the exception propagates: the socket is
shut down (the FIN leaves then) and the connection closed (:func:`_hang_up`); the server
sees it go at that moment. A complete answer leaves the connection in the pool. While
the answer is read, its socket's shutdown is registered with the run
(:mod:`agent_core.values.hang_ups`), so an Abort sends the FIN itself, before the run's task is
even cancelled.

Pacing: a model sends one event per token, tens a second per stream, and each network
read costs the process about the same whatever it carries: hundreds of streams read piece
by piece keep a core busy. So a model makes at most about ``reads_per_s`` reads a second
across its open streams: with ``n`` open, a stream that has been read is left unread
until the pacer's next tick, one every ``n / reads_per_s`` seconds (at most
``_GATHER_MAX_S``), and what arrives meanwhile waits in the socket and comes in with the
next read. The streams resume together, on one timer, so the event loop takes their
reads in one pass. A few streams are read as their pieces arrive (a period under
``_GATHER_MIN_S`` is not worth a pause); 200 streams at the default are read every
200 ms, five times as often as Slack's answer stream is refreshed. An answer's first text
is never held back, nor its end once the finish reason has come; an Abort's cancellation
ends a pause at once.
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
from typing import TYPE_CHECKING, Any, ClassVar, Protocol
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from agent_core.models.sse import SSEDecoder
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    ModelError,
    ModelUnreachable,
    RateLimited,
    RetryableModelError,
)
from agent_core.values.hang_ups import registered
from agent_core.values.redact import public_url

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agent_core.models.sse import ServerSentEvent

    Refusal = Callable[[int, Mapping[str, str], str], ModelError]
    """Maps an answer with an error status (its headers and body text) to a ModelError."""

__all__ = [
    "DEFAULT_REPLY_TIMEOUT_S",
    "MAX_ARGUMENT_CHARS",
    "MAX_EVENT_BYTES",
    "READS_PER_S",
    "HttpModel",
    "ModelEndpoint",
    "ReadPacer",
    "StreamedTurn",
    "arguments_too_long",
    "endpoint_url",
    "event_object",
    "refused",
    "retry_after_s",
]

DEFAULT_REPLY_TIMEOUT_S = 600.0
"""How long one reply may take from its request to its end (``MODEL_REPLY_TIMEOUT``)."""
MAX_EVENT_BYTES = 8 * 1024 * 1024
"""The longest server-sent event (or unfinished line) a stream may send."""
MAX_ARGUMENT_CHARS = 8 * 1024 * 1024
"""The longest arguments one tool call may stream."""
READS_PER_S = 1000.0
"""The default pace of a model's reads across its open streams (see the module doc)."""
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, ssl.SSLError)
"""What sending the request or reading the body raises when the connection fails."""
_DRAIN_S = 0.1
"""After the answer's end, how long the rest of the body is read for (so the connection
can be reused) before the response is simply closed."""
_ERROR_BODY_MAX = 64 * 1024
"""How much of an error answer's body is read for its message."""
_GATHER_MIN_S = 0.01
"""A pacing period shorter than this is not kept: pausing would cost more than the reads
it saves."""
_GATHER_MAX_S = 0.5
"""However many streams are open, each is read at least this often."""
_OVERFLOW_MARKS = ("context length", "context_length", "prompt is too long", "context window")
"""How providers word "the prompt no longer fits" in an error answer."""


class StreamedTurn(Protocol):
    """One reply being read: an adapter's reader of its API's events."""

    finish_reason: str | None
    """Set once the answer's end has come (its pieces are then read without a pause)."""

    def take(self, event: ServerSentEvent) -> bool:
        """Absorb one event; True when the answer is complete (nothing more to read)."""
        ...


class ModelEndpoint:
    """One model API's URL, headers and limits, and the HTTP session its turns stream on.

    The session is made on first use (it belongs to the running event loop) and closed
    by :meth:`aclose`. The proxy comes from the environment (``HTTP(S)_PROXY``,
    ``NO_PROXY``, as aiohttp's ``trust_env`` reads them), looked up once here. With
    ``trust_env`` itself, aiohttp would look it up, and ``~/.netrc`` too, in a worker
    thread for every request, and a ``.netrc`` entry for the endpoint would clash with
    the key.
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        setting: str,
        idle_timeout_s: float = 60.0,
        reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S,
        connect_timeout_s: float = 10.0,
        reads_per_s: float = READS_PER_S,
        refuse: Refusal | None = None,
    ) -> None:
        self.url = url
        self.setting = setting
        """The setting that names the endpoint (``OPENAI_BASE_URL``...), for errors."""
        self.idle_timeout_s = idle_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._headers = {
            "Content-Type": "application/json",
            # Compressing a stream of small events saves little and costs CPU per read.
            "Accept-Encoding": "identity",
            "User-Agent": "threadpilot",
            **headers,
        }
        self._refuse = refuse or refused
        self._pacer = ReadPacer(reads_per_s)
        self._proxy, self._proxy_auth = _env_proxy(url)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # Hundreds of runs stream at once, all to one host: no pool limit.
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
                # Only connecting has a timeout of its own; once the request is sent,
                # the limits in stream() apply (a per-read timer costs CPU).
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.connect_timeout_s, sock_connect=self.connect_timeout_s
                ),
                raise_for_status=False,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def stream(self, body: Mapping[str, Any], turn: StreamedTurn) -> None:
        """Send ``body`` and feed the streamed answer's events to ``turn`` until it says
        the answer is complete or the body ends. Every failure is a ModelError."""
        data = json.dumps(body).encode()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as limit:
                watch = _Watch(loop, limit, self.idle_timeout_s, self.reply_timeout_s)
                try:
                    response = await self._http().post(
                        self.url,
                        data=data,
                        headers=self._headers,
                        proxy=self._proxy,
                        proxy_auth=self._proxy_auth,
                    )
                    try:
                        with registered(functools.partial(_shut_down, response)):
                            if response.status >= 400:
                                text = await _text(response)
                                raise self._refuse(response.status, response.headers, text)
                            await _events(response, turn, watch, loop, self._pacer)
                    except BaseException:
                        _hang_up(response)  # at once: the server sees the connection go now
                        raise
                    response.release()
                finally:
                    watch.cancel()
        except TimeoutError as exc:
            if limit.expired():
                raise watch.error() from exc
            if isinstance(exc, aiohttp.ClientError):  # aiohttp's connect timeouts
                why = f"no connection within {self.connect_timeout_s:g} s"
                raise ModelUnreachable(public_url(self.url), self.setting, why) from exc
            raise
        except aiohttp.ClientConnectorError as exc:
            raise ModelUnreachable(public_url(self.url), self.setting, _why(exc)) from exc
        except _TRANSPORT_ERRORS as exc:
            raise RetryableModelError(
                f"the connection to the model at {public_url(self.url)} failed: "
                f"{str(exc) or type(exc).__name__}"
            ) from exc


class HttpModel:
    """What the three adapters share: one constructor (the model, its key, its base URL
    setting, its output limit and the endpoint's limits), the endpoint it makes, and
    closing it. An adapter names its API's path, the setting its base URL comes from and
    that setting's default, and, where its API differs, its key's header and its
    mapping of error answers."""

    path: ClassVar[str]
    """The API's path, appended to the base URL (``/chat/completions``...)."""
    base_setting: ClassVar[str]
    """The setting naming the base URL (``OPENAI_BASE_URL``...), read when none is given."""
    default_base_url: ClassVar[str]

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        max_output_tokens: int | None = None,
        idle_timeout_s: float = 60.0,
        reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S,
        connect_timeout_s: float = 10.0,
        reads_per_s: float = READS_PER_S,
    ) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens
        base = base_url or os.environ.get(self.base_setting) or self.default_base_url
        self.endpoint = ModelEndpoint(
            endpoint_url(base, self.path),
            self.key_headers(api_key),
            setting=self.base_setting,
            idle_timeout_s=idle_timeout_s,
            reply_timeout_s=reply_timeout_s,
            connect_timeout_s=connect_timeout_s,
            reads_per_s=reads_per_s,
            refuse=self.refusal(),
        )

    def key_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry the key (a bearer token unless the API says otherwise)."""
        return {"Authorization": f"Bearer {api_key}"}

    def refusal(self) -> Refusal | None:
        """This API's mapping of an error answer to the core's errors (None: :func:`refused`)."""
        return None

    async def aclose(self) -> None:
        await self.endpoint.aclose()


def endpoint_url(base: str, path: str) -> str:
    """``path`` appended to the path of ``base``, before its query, if it has one."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def _why(exc: aiohttp.ClientConnectorError) -> str:
    """Why no connection was made, in a few words (not aiohttp's ``ConnectionKey``)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"its TLS certificate was refused ({exc.certificate_error})"
    error = exc.os_error
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return f"no such host ({error.strerror})"
    return str(error.strerror or error) if isinstance(error, OSError) else str(error)


def _env_proxy(url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy the environment names for ``url`` (and its credentials), if any."""
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


def _hang_up(response: aiohttp.ClientResponse) -> None:
    """Close the answer's connection, its socket shut down first: the FIN leaves now, not
    on the loop's next turn after aiohttp's clean-up of the connection (``close()`` alone
    sends it from ``connection_lost``, some 0.3 ms later)."""
    _shut_down(response)
    response.close()


def _shut_down(response: aiohttp.ClientResponse) -> None:
    """Shut the answer's socket down (the FIN leaves now), and only that: what an Abort
    calls from outside the reading (:mod:`agent_core.values.hang_ups`). The reader's state is
    left alone, so the cancellation that follows is what ends it, even when the Abort
    came from inside the reading itself; its unwinding then closes the connection."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


async def _events(
    response: aiohttp.ClientResponse,
    turn: StreamedTurn,
    watch: _Watch,
    loop: asyncio.AbstractEventLoop,
    pacer: ReadPacer,
) -> None:
    decoder = SSEDecoder(MAX_EVENT_BYTES)
    content = response.content
    read = content.readany
    take = turn.take
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    pacer.open += 1
    try:
        while piece := await read():
            watch.last = loop.time()
            for event in decoder.feed(piece):
                if take(event):
                    await _drain(response)
                    return
            if pacer.paces() and protocol is not None:
                if turn.finish_reason is None and not content.is_eof():
                    await _gather(protocol, pacer)
    finally:
        pacer.open -= 1


async def _gather(protocol: asyncio.BaseProtocol, pacer: ReadPacer) -> None:
    """Leave the connection unread until the pacer's next tick: what arrives meanwhile
    waits in the socket and comes in with the next read. An Abort's cancellation ends the
    wait at once; the connection reads again before anything else is done with it."""
    protocol.pause_reading()  # type: ignore[attr-defined]
    try:
        await pacer.tick()
    finally:
        protocol.resume_reading()  # type: ignore[attr-defined]


class ReadPacer:
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
    """Read what follows the answer's end (briefly), so the connection can be reused."""
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


class _Watch:
    """Expires ``limit`` once no bytes arrived for ``idle_s``, or ``reply_s`` after the
    request went out, whichever comes first.

    The reader only stores the time of each arrival (``last``); one timer checks it every
    ``idle_s`` at most. A timer set and cancelled per chunk cost more than the check.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limit: asyncio.Timeout,
        idle_s: float,
        reply_s: float,
    ) -> None:
        self.last = loop.time()
        self._loop = loop
        self._limit = limit
        self._idle_s = idle_s
        self._reply_s = reply_s
        self._deadline = self.last + reply_s
        self._overdue = False
        self._timer = loop.call_at(min(self.last + idle_s, self._deadline), self._check)

    def _check(self) -> None:
        now = self._loop.time()
        if now >= self._deadline:
            self._overdue = True
            self._limit.reschedule(now)  # cancels the reader; TimeoutError at its exit
            return
        due = self.last + self._idle_s
        if now >= due:
            self._limit.reschedule(now)
        else:
            self._timer = self._loop.call_at(min(due, self._deadline), self._check)

    def error(self) -> ModelError:
        """What the expired limit means for the caller."""
        if self._overdue:
            return RetryableModelError(
                f"the model's reply did not end within {self._reply_s:g}s "
                "(MODEL_REPLY_TIMEOUT): it was cut off"
            )
        return RetryableModelError(f"the model stream stalled: no data for {self._idle_s:g}s")

    def cancel(self) -> None:
        self._timer.cancel()


def arguments_too_long(name: str) -> ModelError:
    """The error for a tool call whose streamed arguments passed :data:`MAX_ARGUMENT_CHARS`."""
    return RetryableModelError(
        f"the model streamed arguments over {MAX_ARGUMENT_CHARS} characters for the tool "
        f"call {name or '(unnamed)'}: refused"
    )


def refused(status: int, headers: Mapping[str, str], text: str) -> ModelError:
    """Map an answer with an error status to the core's taxonomy: retryable, context,
    or fatal. The provider's JSON error (``{"error": {"message", "code"}}``, or
    Anthropic's ``{"error": {"type", "message"}}``) gives the message and code."""
    message, code = _error_details(text)
    described = f"model endpoint answered HTTP {status}: {message}"
    if status == 429:
        return RateLimited(described, retry_after=retry_after_s(headers), code=code)
    if status >= 500 or status in _RETRYABLE_STATUS:
        return RetryableModelError(described, status=status, code=code)
    if code == "context_length_exceeded" or any(m in text.lower() for m in _OVERFLOW_MARKS):
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


def event_object(data: bytes) -> dict[str, Any]:
    """One streamed event's JSON object, or the error a malformed one stands for: a chunk
    that is not a JSON object means the stream is corrupt and the reply unusable (retried)."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:  # invalid UTF-8 included
        raise RetryableModelError(f"the model stream sent a malformed chunk: {exc}") from exc
    if not isinstance(parsed, dict):
        raise RetryableModelError(
            f"the model stream sent a malformed chunk: {type(parsed).__name__}, not an object"
        )
    return parsed
