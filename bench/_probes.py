"""Instrumentation that only benchmarks install: socket closes and event-loop lag.

llmock's journal says when the server noticed a connection go, which is later than the
moment the client closed it (the server thread must be scheduled and take the GIL first).
To tell "the run reported its end before closing" apart from "the server noticed late",
:class:`SocketCloseProbe` wraps ``socket.socket.close`` for the duration of a benchmark
and records when a socket connected to one port is closed. asyncio's selector transports
close their ``socket.socket`` through that method (``_call_connection_lost``), which is
the moment the kernel sends the FIN.

:class:`LoopLag` samples how late the event loop runs a timer, to show how busy it was
while latencies were measured; :func:`rss_kb` reads this process's resident memory.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["LoopLag", "SocketCloseProbe", "rss_kb"]


class SocketCloseProbe:
    def __init__(self, port: int) -> None:
        self.port = port
        self.closed_at: list[float] = []
        """Monotonic times at which a socket connected to ``port`` was closed, in order."""
        self._original: Any = None
        self._thread = threading.get_ident()

    def __enter__(self) -> SocketCloseProbe:
        original = socket.socket.close
        probe = self

        def close(sock: Any) -> None:
            # Only the benchmark's own thread: the llmock server thread closes sockets too.
            watched = threading.get_ident() == probe._thread and probe._connected_to_port(sock)
            original(sock)
            if watched:
                probe.closed_at.append(time.monotonic())

        self._original = original
        setattr(socket.socket, "close", close)  # noqa: B010 - patching a method on purpose
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        setattr(socket.socket, "close", self._original)  # noqa: B010

    def _connected_to_port(self, sock: socket.socket) -> bool:
        try:
            peer = sock.getpeername()
        except OSError:
            return False
        return isinstance(peer, tuple) and len(peer) >= 2 and peer[1] == self.port


class LoopLag:
    """How late the event loop runs a timer: a direct reading of how busy the loop is.

    A tick every ``period_s``; each sample is how much later than asked it woke. This is
    the one deliberate polling loop in the benchmarks: it measures the loop by being a
    timer on it.
    """

    def __init__(self, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.samples: list[float] = []
        """Lateness of each tick, in ms."""

    async def run(self, until: asyncio.Event) -> None:
        while not until.is_set():
            asked = time.monotonic() + self.period_s
            await asyncio.sleep(self.period_s)
            self.samples.append((time.monotonic() - asked) * 1000)


def rss_kb() -> float:
    """This process's resident set size in KB (``VmRSS`` in /proc/self/status)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return float(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")
