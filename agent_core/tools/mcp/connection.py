"""One MCP server: started, listed, called, restarted on next use after it dies, closed.

Each live connection is a :class:`_Session`. Its *holder* task enters and leaves the SDK
client (anyio needs both in one task) and stays parked in between; a session ends when
the server's message stream ends (the server exited), when its transport fails, or when
threadpilot closes it. The next call after a session ended starts a new one.

Calls and cancellation. Each call runs in a task the session owns; the caller awaits it
through :func:`asyncio.shield`. When the caller is cancelled (Abort, shutdown, or
``TOOL_TIMEOUT``), it cancels the call's task and goes on at once, never waiting for the
server. The SDK then cancels the request from the call's own task, as the negotiated
protocol version says: ``notifications/cancelled`` (every handshake version up to
2025-11-25, and stdio under 2026-07-28), or, under 2026-07-28 over streamable HTTP,
closing the request's response stream. A Stop cancels nothing: the call completes.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

import structlog
from mcp import Client, Implementation, MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

from agent_core.tools.mcp.errors import ServerStopped, ServerUnavailable
from agent_core.tools.mcp.transport import open_transport
from agent_core.tools.toolbox import ToolError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcp_types import CallToolResult
    from mcp_types import Tool as McpTool

    from agent_core.tools.mcp.config import ServerConfig
    from agent_core.tools.progress import ProgressFn

__all__ = ["DEFAULT_START_TIMEOUT_S", "ServerConnection"]

DEFAULT_START_TIMEOUT_S = 30.0
"""How long a server may take to start and answer the handshake."""
CLOSE_TIMEOUT_S = 10.0
"""How long closing waits for a server to end (the SDK: stdin closed, 2 s, SIGTERM, 2 s,
SIGKILL) before it stops waiting."""
_CANCEL_FLUSH_S = 1.0
_MAX_LIST_PAGES = 50
_CLIENT = Implementation(name="threadpilot", version="1")

log = structlog.get_logger("agent_core.tools.mcp")


class ServerConnection:
    """One configured server. :meth:`start` once, then :meth:`call` from any task."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        errlog: TextIO | None = None,
        on_cancel: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self._on_cancel = on_cancel
        """Called with the server's name for each call cancelled before it answered."""
        self.start_timeout_s = start_timeout_s
        self.starts = 0
        """Sessions started so far (1 after :meth:`start`; more after restarts)."""
        self._errlog = errlog
        self._session: _Session | None = None
        self._lock = asyncio.Lock()
        self._holders: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def protocol_version(self) -> str | None:
        """The version agreed with the server by the current session, if one is live."""
        session = self._session
        return session.protocol_version if session is not None and not session.lost else None

    async def ended(self) -> None:
        """Wait until the current session ends: the server exited, or its connection broke
        (or it was closed). The next call then starts the server again."""
        session = self._session
        if session is not None:
            await session.ended()

    async def start(self) -> tuple[McpTool, ...]:
        """Start the server and list its tools. Raises :class:`ServerUnavailable`."""
        session = await self._live()
        try:
            async with asyncio.timeout(self.start_timeout_s):
                return await session.list_tools()
        except (MCPError, TimeoutError) as exc:
            session.end()
            why = self.config.redact(_why(exc))
            raise ServerUnavailable(
                self.name, f"the MCP server {self.name!r} did not list its tools: {why}"
            ) from exc

    async def call(
        self, tool: str, arguments: dict[str, Any], progress: ProgressFn
    ) -> CallToolResult:
        """Call ``tool``; a dead server is restarted first. Raises :class:`ToolError`."""
        session = await self._live()
        try:
            return await session.call(tool, arguments, progress)
        except asyncio.CancelledError:
            if self._on_cancel is not None:
                self._on_cancel(self.name)
            raise
        except MCPError as exc:
            why = self.config.redact(exc.message)
            if not _connection_lost(exc):
                raise ToolError(f"the MCP server {self.name!r} refused: {why}") from exc
            session.end()
            log.warning("mcp.server_stopped", server=self.name, tool=tool, error=why)
            raise ServerStopped(
                self.name,
                f"the MCP server {self.name!r} stopped during the call ({why}); "
                "it is restarted on the next call",
            ) from exc

    async def close(self) -> None:
        """End the server: calls in flight are cancelled, a stdio server's process ends."""
        self._closed = True
        if self._session is not None:
            await self._session.cancel_calls()
            self._session.end()
        await _drain(self._holders, CLOSE_TIMEOUT_S)

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise ServerUnavailable(self.name, "threadpilot is shutting down")

    def _own(self, holder: asyncio.Task[None]) -> None:
        # Every holder is awaited by close(), even one whose start was abandoned.
        self._holders.add(holder)
        holder.add_done_callback(self._holders.discard)

    async def _live(self) -> _Session:
        async with self._lock:
            self._refuse_if_closed()
            session = self._session
            if session is not None and not session.lost:
                return session
            if session is not None:
                session.end()  # its holder is owned by self._holders until close()
                log.info("mcp.server_restarting", server=self.name)
            session = _Session(self.config, self._errlog or sys.stderr)
            await session.open(self.start_timeout_s, owner=self._own)
            try:
                self._refuse_if_closed()  # closed while it started: close() waits for it
            except ServerUnavailable:
                session.end()
                raise
            self._session = session
            self.starts += 1
            log.info(
                "mcp.server_started",
                server=self.name,
                protocol=session.protocol_version,
                starts=self.starts,
            )
            return session


class _Session:
    """One live connection to the server (one stdio process, or one HTTP client)."""

    def __init__(self, config: ServerConfig, errlog: TextIO) -> None:
        self.config = config
        self.lost = False
        self._errlog = errlog
        self._end = asyncio.Event()
        self._client: Client | None = None
        self._calls: set[asyncio.Task[CallToolResult]] = set()

    @property
    def protocol_version(self) -> str | None:
        return self._client.protocol_version if self._client is not None else None

    async def open(self, timeout_s: float, owner: Callable[[asyncio.Task[None]], None]) -> None:
        """Start the holder (handed to ``owner``) and wait (bounded) for the handshake."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        holder = asyncio.create_task(self._hold(ready), name=f"mcp:{self.config.name}")
        owner(holder)
        try:
            async with asyncio.timeout(timeout_s):
                self._client = await asyncio.shield(ready)
        except TimeoutError as exc:
            holder.cancel()  # once: the SDK's shielded shutdown still ends the process
            raise self._unavailable(f"it did not answer within {timeout_s:g} s") from exc
        except asyncio.CancelledError:
            holder.cancel()
            raise

    async def list_tools(self) -> tuple[McpTool, ...]:
        assert self._client is not None
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            page = await self._client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tuple(tools)

    async def call(
        self, tool: str, arguments: dict[str, Any], progress: ProgressFn
    ) -> CallToolResult:
        assert self._client is not None

        report = progress

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            report(progress, total, message)

        task = asyncio.create_task(
            self._client.call_tool(tool, arguments, progress_callback=on_progress),
            name=f"mcp:{self.config.name}:{tool}",
        )
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # The SDK sends the cancellation from the call's task; we do not wait for it.
            task.cancel()
            raise

    async def cancel_calls(self) -> None:
        """Cancel every call in flight and give the cancellations a moment to go out."""
        for task in self._calls:
            task.cancel()
        await _drain(self._calls, _CANCEL_FLUSH_S)

    async def ended(self) -> None:
        await self._end.wait()

    def end(self) -> None:
        """Let the holder leave the client: the server's stdio process ends."""
        self.lost = True
        self._end.set()

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        transport = open_transport(self.config, self.end, self._errlog)
        try:
            async with Client(
                transport, mode=self.config.protocol, client_info=_CLIENT, cache=None
            ) as client:
                if not ready.done():
                    ready.set_result(client)
                await self._end.wait()
        except Exception as exc:
            why = self.config.redact(_why(exc))
            if not ready.done():
                ready.set_exception(self._unavailable(why))
            else:
                log.warning("mcp.server_lost", server=self.config.name, error=why)
        finally:
            self.end()
            if not ready.done():
                ready.set_exception(self._unavailable("it was closed while starting"))

    def _unavailable(self, why: str) -> ServerUnavailable:
        name = self.config.name
        return ServerUnavailable(
            name, f"the MCP server {name!r} ({self.config.where}) could not start: {why}"
        )


def _connection_lost(exc: MCPError) -> bool:
    # The SDK's words for an HTTP session the server no longer knows (it restarted).
    return exc.code == CONNECTION_CLOSED or (
        exc.code == INVALID_REQUEST and exc.message == "Session terminated"
    )


def _why(exc: BaseException) -> str:
    """One line for an error, looking inside the SDK's task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return "it timed out"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _drain(tasks: set[asyncio.Task[Any]], timeout_s: float) -> None:
    """Wait (bounded) for ``tasks``; cancel whatever is still running after that."""
    pending = set(tasks)
    if not pending:
        return
    _, late = await asyncio.wait(pending, timeout=timeout_s)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late, timeout=1.0)
