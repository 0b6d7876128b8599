"""The SDK transport for one configured server, watched for its end, cancelling at once.

A stdio server starts in its entry's ``cwd``, or else in a fresh empty directory of its
own, removed when it stops: never in threadpilot's, where a ``.env`` may hold the app's
secrets.

A stdio server that exits (crash, ``os._exit``, killed) closes its stdout; the SDK then
fails the calls in flight with "connection closed" but keeps the client open, so without
a watch the next call would fail too. :func:`open_transport` reports the end of the
server's message stream, so the connection restarts the server on the next use instead.

Over streamable HTTP under a handshake version (up to 2025-11-25), the SDK POSTs each
``notifications/cancelled`` only after the previous notification's POST was answered, so
with N calls in flight the last cancellation leaves N round trips after the Abort. Here
each one is POSTed at once, in parallel, with the headers the SDK's own requests carry
(session id, protocol version). Under 2026-07-28 the SDK's own handling stays: it closes
the request's response stream, which is that version's cancellation.
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import httpx2
import structlog
from mcp import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import JSONRPCNotification
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from agent_core.tools.mcp.config import HttpServer, ServerConfig, StdioServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from types import TracebackType

    from anyio.abc import TaskGroup
    from mcp.client import Transport
    from mcp.client._transport import ReadStream, TransportStreams, WriteStream
    from mcp.shared.message import SessionMessage

__all__ = ["open_transport"]

HTTP_TIMEOUT_S = 30.0
SSE_READ_TIMEOUT_S = 300.0
"""A tool call's response stream may stay silent this long (TOOL_TIMEOUT ends it first)."""
CANCEL_POST_TIMEOUT_S = 5.0
"""A cancellation POST the server does not answer is given up after this (the run that
asked for it ended long before: nothing waits for it but closing)."""
_SESSION_ID = "mcp-session-id"
_PROTOCOL_VERSION = "mcp-protocol-version"

log = structlog.get_logger("agent_core.tools.mcp")


def open_transport(config: ServerConfig, on_end: Callable[[], None], errlog: TextIO) -> Transport:
    """The transport for ``config``; ``on_end`` is called when the server's stream ends."""
    if isinstance(config, HttpServer):
        return _http(config, on_end)
    return _stdio(config, on_end, errlog)


@contextlib.asynccontextmanager
async def _stdio(
    config: StdioServer, on_end: Callable[[], None], errlog: TextIO
) -> AsyncIterator[TransportStreams]:
    with _working_directory(config) as cwd:
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env), cwd=cwd
        )
        async with stdio_client(params, errlog=errlog) as (read, write):
            yield _EndWatch(read, on_end), write


@contextlib.contextmanager
def _working_directory(config: StdioServer) -> Iterator[str]:
    """Where a stdio server starts: its ``cwd``, or else an empty directory of its own
    (not threadpilot's, which may hold a ``.env``), removed once the server has ended."""
    if config.cwd is not None:
        yield config.cwd
        return
    # Made and removed on the event loop: once per server start, and nearly always empty.
    with tempfile.TemporaryDirectory(prefix="threadpilot-mcp-", ignore_cleanup_errors=True) as cwd:
        yield cwd


@contextlib.asynccontextmanager
async def _http(config: HttpServer, on_end: Callable[[], None]) -> AsyncIterator[TransportStreams]:
    sent = _SentHeaders()
    timeout = httpx2.Timeout(HTTP_TIMEOUT_S, read=SSE_READ_TIMEOUT_S)
    async with (
        httpx2.AsyncClient(
            headers=dict(config.headers), timeout=timeout, event_hooks={"request": [sent.record]}
        ) as http,
        # Cancellations have a pool of their own: the calls they cancel hold the connections
        # of the first one, and a connection kept from the last cancellation saves a connect.
        httpx2.AsyncClient(headers=dict(config.headers), timeout=timeout) as cancels,
        streamable_http_client(config.url, http_client=http) as (read, write),
        # Left first: cancellations still going out end before the transport closes.
        anyio.create_task_group() as posts,
    ):
        yield _EndWatch(read, on_end), _ParallelCancels(write, cancels, config, sent, posts)


class _EndWatch:
    """A read stream that calls ``on_end`` once the server's messages have ended."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]):
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # The SDK's dispatcher reads the sender's contextvars from here (HTTP transport).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _SentHeaders:
    """The session id and protocol version the SDK's last request carried."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}

    async def record(self, request: httpx2.Request) -> None:
        for name in (_SESSION_ID, _PROTOCOL_VERSION):
            if name in request.headers:
                self.headers[name] = request.headers[name]

    @property
    def handshake_era(self) -> bool:
        return self.headers.get(_PROTOCOL_VERSION) in HANDSHAKE_PROTOCOL_VERSIONS


class _ParallelCancels:
    """The SDK's write stream, except that a handshake-era cancellation is POSTed at once."""

    def __init__(
        self,
        inner: WriteStream[SessionMessage],
        http: httpx2.AsyncClient,
        config: HttpServer,
        sent: _SentHeaders,
        posts: TaskGroup,
    ) -> None:
        self._inner = inner
        self._http = http
        self._config = config
        self._sent = sent
        self._posts = posts

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if (
            isinstance(message, JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and self._sent.handshake_era
        ):
            body = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            self._posts.start_soon(self._post, body)
            return
        await self._inner.send(item)

    async def _post(self, body: dict[str, Any]) -> None:
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **self._sent.headers,
        }
        with anyio.move_on_after(CANCEL_POST_TIMEOUT_S):
            try:
                await self._http.post(self._config.url, json=body, headers=headers)
            except httpx2.HTTPError as exc:  # the server is gone: nothing left to cancel
                where, error = self._config.where, self._config.redact(str(exc))
                log.info("mcp.cancel_not_delivered", url=where, error=error)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _ParallelCancels:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()
