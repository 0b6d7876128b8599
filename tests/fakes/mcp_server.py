"""A small MCP server of our own, built with the ``mcp`` SDK, for the MCP tests.

Its tools:

- ``slow(steps)``: reports progress ``0/steps``, then waits until the test calls
  :meth:`FakeMcpServer.release` (or a client calls the ``release`` tool), then reports
  each step and answers. If it is cancelled first, it records the cancellation.
- ``echo(text)``, ``big(chars)`` (a long answer), ``whoami()`` (the server's process id),
  ``crash()`` (the process exits in the middle of the call: stdio only).
- ``read_note()`` (annotated ``readOnlyHint``) and ``write_note(text)`` (no annotations):
  each call is recorded in :attr:`FakeMcpServer.notes` with its arguments, for the
  approval tests (the server must never see a call nobody approved).
- ``cancellations(at_least)``: the cancellations recorded so far, once there are at least
  that many (bounded wait), for a client that cannot see the server's memory (stdio).

Served two ways: :func:`serve_http` runs it over streamable HTTP on loopback in the
test's event loop, where the test reads what it recorded (calls, cancellations, and
every ``notifications/cancelled`` POSTed to it) and waits on :attr:`changes`; or
``python -m tests.fakes.mcp_server`` runs it over stdio. The SDK serves both protocol
eras at once; the client decides which one is spoken. (``--http-fd FD`` serves it over
HTTP in a process of its own, on a listening socket the parent hands over: the benchmark.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    App = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["Call", "FakeMcpServer", "serve_http"]

WAIT_S = 10.0
HOLD_S = 2.0


@dataclass(frozen=True, slots=True)
class Call:
    request_id: str
    tool: str
    protocol: str | None


@dataclass
class FakeMcpServer:
    """The server's tools and what they recorded."""

    calls: list[Call] = field(default_factory=list)
    cancelled: list[Call] = field(default_factory=list)
    """Tool calls whose handler was cancelled (by a notification or a closed stream)."""
    cancelled_at: list[float] = field(default_factory=list)
    """When each cancellation reached the tool (``time.monotonic()``, comparable across
    processes on one machine)."""
    cancel_notifications: list[str] = field(default_factory=list)
    """Request ids named by every ``notifications/cancelled`` POSTed over HTTP."""
    hold_cancellations: int = 0
    """If set, each ``notifications/cancelled`` POST is answered only once this many have
    arrived (or after :data:`HOLD_S`): a client that waits for one answer before sending
    the next is caught out."""
    held_together: list[bool] = field(default_factory=list)
    """For each held POST: answered because the others arrived (True) or after HOLD_S."""
    notes: list[tuple[str, str]] = field(default_factory=list)
    """Every ``read_note`` / ``write_note`` call received: (tool, text)."""
    written_at: dict[str, float] = field(default_factory=dict)
    """When each ``write_note`` text arrived (``time.monotonic()``: the benchmark)."""
    changes: Changes = field(default_factory=Changes)
    _release: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.mcp = _build(self)

    def release(self) -> None:
        """Let every ``slow`` call (now and later) finish."""
        self._release.set()

    def record(self, into: list[Any], item: Any) -> None:
        into.append(item)
        self.changes.notify()

    async def until(self, what: Callable[[], object], describe: str) -> None:
        await self.changes.until(
            lambda: bool(what()), timeout=WAIT_S, describe=lambda: f"{describe}: {self.summary()}"
        )

    def summary(self) -> str:
        return (
            f"calls={self.calls} cancelled={self.cancelled} "
            f"cancel_notifications={self.cancel_notifications}"
        )


def _build(fake: FakeMcpServer) -> MCPServer:
    mcp = MCPServer("threadpilot-fake", log_level="WARNING")

    def started(ctx: Context, tool: str) -> Call:
        call = Call(ctx.request_id, tool, ctx.protocol_version)
        fake.record(fake.calls, call)
        return call

    @mcp.tool()
    async def slow(steps: int, ctx: Context) -> str:
        """Work through some steps slowly, reporting progress."""
        call = started(ctx, "slow")
        try:
            await ctx.report_progress(0, steps, "waiting for the go-ahead")
            await fake._release.wait()
            for step in range(1, steps + 1):
                await ctx.report_progress(step, steps, f"step {step} of {steps}")
        except anyio.get_cancelled_exc_class():
            fake.cancelled_at.append(time.monotonic())
            fake.record(fake.cancelled, call)
            raise
        return f"slow finished {steps} steps"

    @mcp.tool()
    async def release() -> str:
        """Let every slow call finish."""
        fake.release()
        return "released"

    @mcp.tool()
    async def echo(text: str) -> str:
        """Say the text back."""
        return text

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def read_note() -> str:
        """Read the note (changes nothing)."""
        fake.record(fake.notes, ("read_note", ""))
        return "the note says hello"

    @mcp.tool()
    async def write_note(text: str) -> str:
        """Write the note."""
        fake.written_at[text] = time.monotonic()
        fake.record(fake.notes, ("write_note", text))
        return f"wrote {text!r}"

    @mcp.tool()
    async def big(chars: int) -> str:
        """A long answer."""
        return "x" * chars

    @mcp.tool()
    async def whoami() -> int:
        """The server's process id."""
        return os.getpid()

    @mcp.tool()
    async def crash() -> str:
        """Exit the server process in the middle of the call."""
        os._exit(3)

    @mcp.tool()
    async def cancellations(at_least: int) -> str:
        """When each cancelled call was cancelled (``time.monotonic()``), once there are at
        least this many."""
        await fake.until(lambda: len(fake.cancelled) >= at_least, f"{at_least} cancellations")
        return json.dumps(fake.cancelled_at)

    return mcp


# -- serving over streamable HTTP in the test's loop --------------------------------------


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the test process keeps its own signal handlers


@contextlib.asynccontextmanager
async def serve_http(fake: FakeMcpServer) -> AsyncIterator[str]:
    """Serve ``fake`` on a loopback port; yields the MCP endpoint's URL."""
    app = _recording_cancellations(fake, fake.mcp.streamable_http_app())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections queue from now on: no need to wait for uvicorn's start
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = _QuietServer(config)
    serving = asyncio.create_task(server.serve([sock]), name="fake-mcp-server")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        async with asyncio.timeout(WAIT_S):
            await serving


async def _hold(fake: FakeMcpServer) -> None:
    try:
        await fake.changes.until(
            lambda: len(fake.cancel_notifications) >= fake.hold_cancellations,
            timeout=HOLD_S,
            describe=lambda: "the other cancellations",
        )
    except TimeoutError:
        fake.record(fake.held_together, False)
    else:
        fake.record(fake.held_together, True)


def _recording_cancellations(fake: FakeMcpServer, app: App) -> App:
    """Record the request ids of ``notifications/cancelled`` POSTs, then serve them."""

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        with contextlib.suppress(ValueError):
            decoded = json.loads(body)
            if isinstance(decoded, dict) and decoded.get("method") == "notifications/cancelled":
                fake.record(fake.cancel_notifications, str(decoded["params"]["requestId"]))
                if fake.hold_cancellations:
                    await _hold(fake)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return recording


async def _serve_http_forever(fd: int) -> None:
    app = FakeMcpServer().mcp.streamable_http_app()
    await uvicorn.Server(uvicorn.Config(app, fd=fd, log_level="warning")).serve()


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--http-fd"]:  # on a listening socket handed over by the parent
        anyio.run(_serve_http_forever, int(sys.argv[2]))
    else:
        FakeMcpServer().mcp.run("stdio")
