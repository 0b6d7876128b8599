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
        """Monotonic times at which a socket connected to ``port`` was shut down or
        closed (whichever came first for it), in order."""
        self._originals: dict[str, Any] = {}
        self._thread = threading.get_ident()
        self._hung_up: set[int] = set()

    def __enter__(self) -> SocketCloseProbe:
        for name in ("close", "shutdown"):
            self._originals[name] = getattr(socket.socket, name)
            setattr(socket.socket, name, self._wrap(name, self._originals[name]))
        return self

    def _wrap(self, name: str, original: Any) -> Any:
        probe = self

        def wrapped(sock: Any, *args: Any) -> Any:
            # Only the benchmark's own thread: the llmock server thread closes sockets too.
            # A shutdown is the FIN; the close that follows it is not counted again. The
            # time is taken before the call: the call lets go of the GIL, and llmock's
            # thread may run first.
            watched = (
                threading.get_ident() == probe._thread
                and id(sock) not in probe._hung_up
                and probe._connected_to_port(sock)
            )
            at = time.monotonic()
            result = original(sock, *args)
            if watched:
                probe.closed_at.append(at)
            if name == "shutdown" and watched:
                probe._hung_up.add(id(sock))
            elif name == "close":
                probe._hung_up.discard(id(sock))  # closed: its id may be a new socket's
            return result

        return wrapped

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for name, original in self._originals.items():
            setattr(socket.socket, name, original)

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
