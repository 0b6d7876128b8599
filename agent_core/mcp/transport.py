"""The SDK transport for one configured server, watched for its end.

A stdio server that exits (crash, ``os._exit``, killed) closes its stdout; the SDK then
fails the calls in flight with "connection closed" but keeps the client open, so without
a watch the next call would fail too. :func:`open_transport` reports the end of the
server's message stream, so the connection restarts the server on the next use instead.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import httpx2
from mcp import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent_core.mcp.config import HttpServer, ServerConfig

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from types import TracebackType

    from mcp.client import Transport
    from mcp.client._transport import ReadStream, TransportStreams
    from mcp.shared.message import SessionMessage

__all__ = ["open_transport"]

HTTP_TIMEOUT_S = 30.0
SSE_READ_TIMEOUT_S = 300.0
"""A tool call's response stream may stay silent this long (TOOL_TIMEOUT ends it first)."""


def open_transport(config: ServerConfig, on_end: Callable[[], None], errlog: TextIO) -> Transport:
    """The transport for ``config``; ``on_end`` is called when the server's stream ends."""
    return _watched(config, on_end, errlog)


@contextlib.asynccontextmanager
async def _watched(
    config: ServerConfig, on_end: Callable[[], None], errlog: TextIO
) -> AsyncIterator[TransportStreams]:
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(config, HttpServer):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(config.headers),
                    timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=SSE_READ_TIMEOUT_S),
                )
            )
            transport = streamable_http_client(config.url, http_client=http)
        else:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env),
                cwd=config.cwd,
            )
            transport = stdio_client(params, errlog=errlog)
        read, write = await stack.enter_async_context(transport)
        yield _EndWatch(read, on_end), write


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
