"""A TCP relay between a store and PostgreSQL that loses one connection on cue.

Terminating backends (``pg_terminate_backend``) hits a statement at a random moment; a
store's retry logic also needs the two moments that matter, made to happen exactly:

- :meth:`PgProxy.cut_before_send`: the connection dies as the client sends the statement
  whose SQL contains a given text; the server never sees it.
- :meth:`PgProxy.cut_after_commit`: the server runs and commits that statement, and the
  connection dies before the client reads the answer. The client cannot tell this from
  the first case: only the database knows whether the write landed.
- :meth:`PgProxy.stall`: the server's answer to that statement is held back until
  :meth:`PgProxy.resume` (a slow or stuck server), for callers that give up on a deadline.
- :meth:`PgProxy.sever`: a fail-over. Every open connection is dead, but the client
  learns it only when it next uses one (as with a server or a network path that went
  away without a word): the server side is closed now, the client side is reset the
  moment the client sends anything.

The relay parses PostgreSQL's message framing (one type byte, a 4-byte length), so the
client must not negotiate TLS (``sslmode=disable``: the answer to an SSL request is one
unframed byte) and should not cache prepared statements (``statement_cache_size=0``),
so that every execution sends its SQL text in a Parse message the relay can recognise.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine

Cut = Literal["before_send", "after_commit", "stall"]


@dataclass
class _Armed:
    cut: Cut
    sql: bytes
    """A fragment of the SQL text of the statement to hit."""


class _Link:
    """One relayed client connection and its server connection."""

    def __init__(self, proxy: PgProxy, client: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client = client
        self.server: asyncio.StreamWriter | None = None
        self.targeted = False  # this link carries the statement the proxy waits for
        self.completed = False  # ... and the server has sent its CommandComplete
        self.severed = False
        self.held = asyncio.Event()  # set: answers flow; clear: held back (a stall)
        self.held.set()

    def close(self) -> None:
        for writer in (self.client, self.server):
            if writer is not None:
                writer.transport.abort()
        self.proxy.links.discard(self)

    def cut(self) -> None:
        self.close()
        self.proxy.cuts += 1
        self.proxy.cut_done.set()


class PgProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._upstream_url = upstream_url
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 5432
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.links: set[_Link] = set()
        self._armed: _Armed | None = None
        self.cuts = 0
        self.cut_done = asyncio.Event()

    @property
    def url(self) -> str:
        """The upstream URL, pointed at this relay, without TLS."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        parts = urlsplit(self._upstream_url)
        netloc = parts.netloc.rpartition("@")
        host = f"127.0.0.1:{port}"
        netloc_new = f"{netloc[0]}@{host}" if netloc[1] else host
        return urlunsplit(parts._replace(netloc=netloc_new, query="sslmode=disable"))

    def sever(self) -> None:
        for link in self.links:
            link.severed = True
            if link.server is not None:
                link.server.transport.abort()
        self.links.clear()

    def stall(self, sql: str) -> None:
        self._arm("stall", sql)

    def resume(self) -> None:
        for link in self.links:
            link.held.set()

    def cut_before_send(self, sql: str) -> None:
        self._arm("before_send", sql)

    def cut_after_commit(self, sql: str) -> None:
        self._arm("after_commit", sql)

    def _arm(self, cut: Cut, sql: str) -> None:
        self._armed = _Armed(cut, sql.encode())
        self.cut_done.clear()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _own(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(self, writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        except OSError:
            writer.transport.abort()
            return
        link.server = up_writer
        self.links.add(link)
        self._own(self._pump(link, reader, up_writer, from_client=True))
        self._own(self._pump(link, up_reader, writer, from_client=False))

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        from_client: bool,
    ) -> None:
        buffer = b""
        startup = from_client  # the client's first message has no type byte
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(65536):
                if link.severed:
                    break
                buffer += chunk
                out = b""
                while True:
                    if startup:
                        if len(buffer) < 4:
                            break
                        size = int.from_bytes(buffer[:4], "big")
                        message, startup = buffer[:size], False
                    else:
                        if len(buffer) < 5:
                            break
                        size = 1 + int.from_bytes(buffer[1:5], "big")
                        message = buffer[:size]
                    if len(message) < size:
                        break
                    buffer = buffer[size:]
                    if self._inspect(link, message, from_client=from_client):
                        return
                    out += message
                if out:
                    if not from_client:
                        await link.held.wait()
                    writer.write(out)
                    await writer.drain()
        if from_client or not link.severed:  # a severed link fails at the client's next word
            link.close()

    def _inspect(self, link: _Link, message: bytes, *, from_client: bool) -> bool:
        """True when the link was cut here and ``message`` must not be forwarded."""
        armed = self._armed
        if armed is None:
            return False
        kind = message[:1]
        if from_client and kind == b"P" and armed.sql in message:
            if armed.cut == "before_send":
                self._armed = None
                link.cut()
                return True
            if armed.cut == "stall":
                self._armed = None
                link.held.clear()
                self.cut_done.set()
                return False
            link.targeted = True
        elif not from_client and link.targeted:
            if kind in {b"C", b"s"}:  # CommandComplete, or PortalSuspended (a row limit)
                link.completed = True
            elif kind == b"Z" and link.completed:
                # ReadyForQuery: the implicit transaction has committed.
                self._armed = None
                link.cut()
                return True
        return False


@contextlib.asynccontextmanager
async def pg_proxy(upstream_url: str) -> AsyncIterator[PgProxy]:
    proxy = PgProxy(upstream_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
