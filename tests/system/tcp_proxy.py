"""A loopback TCP proxy that can stop taking new connections while old ones keep flowing.

Put in front of one worker's PostgreSQL, it keeps that worker's stop listener from
reconnecting after its connection was terminated, while the worker's pooled
connections (already open) go on working: the state "LISTEN is down, the table is
still readable" that the poll backstop exists for.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self

__all__ = ["TcpProxy"]

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> Self:
        await self.accept()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.refuse()
        pipes, self._pipes = list(self._pipes), set()
        for pipe in pipes:
            pipe.cancel()
        if pipes:
            await asyncio.wait(pipes, timeout=5)

    async def accept(self) -> None:
        """Listen (again, on the same port once one was chosen)."""
        assert self._server is None, "already accepting"
        self._server = await asyncio.start_server(
            self._connected, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    def refuse(self) -> None:
        """Close the listening socket: new connections are refused, open ones go on."""
        if self._server is not None:
            self._server.close()  # not wait_closed(): on 3.12+ it waits for the clients
            self._server = None

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            pipe = asyncio.create_task(_pump(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # One side ended: end the other, so a terminated backend looks terminated.
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            sink.close()
