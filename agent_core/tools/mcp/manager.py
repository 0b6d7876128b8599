"""The MCP servers of one threadpilot process: started together, offered as tools, closed.

The app owns one :class:`McpManager`::

    manager = McpManager(load_mcp_config(settings.MCP_CONFIG), reserved=builtin_names)
    await manager.start()            # each server started and listed, at the same time
    agent = Agent(model, [*builtin_tools, *manager.tools], ...)
    ...
    await manager.close()            # on shutdown, SIGTERM included: every server ends

A server that fails to start or to list its tools is reported once (one ``error`` log
line, and a line in :meth:`McpManager.check_lines` for a ``--check`` command); its tools
are not offered, and the other servers work as usual. A server that stops later is
restarted on the next call to one of its tools.

A per-tool approval rule (``"tools": {"TOOL": ...}``) naming a tool its server does not
offer is a settings error, never ignored: a typo (``git_comit``) would otherwise leave
``git_commit`` running unasked. :meth:`McpManager.start` raises
:class:`~agent_core.values.errors.ConfigError` naming ``MCP_CONFIG``, the server and the name,
with the nearest tool name it offers (a server that did not start cannot be checked; its
tools are not offered either).

stdio servers run in a session of their own, so a signal to threadpilot's process group
does not reach them: :meth:`McpManager.close` ends them (stdin closed, then SIGTERM, then
SIGKILL). If threadpilot dies without closing (``kill -9``), their stdin closes with it
and they exit on their own.

stdio servers run as the same user, so each can read the others' environment and
arguments through ``/proc``: :meth:`McpManager.start` warns
(``secrets.shared_between_tool_servers``) when two or more of them carry secrets
(:attr:`~agent_core.tools.mcp.config.StdioServer.carries_secrets`; docs/security.md).
"""

from __future__ import annotations

import asyncio
import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import structlog

from agent_core.tools.mcp.adapter import mcp_tool
from agent_core.tools.mcp.config import SETTING, StdioServer
from agent_core.tools.mcp.connection import DEFAULT_START_TIMEOUT_S, ServerConnection
from agent_core.tools.mcp.naming import assign_tool_names
from agent_core.tools.toolbox import ASK_USER, FINAL_REPORT, Tool
from agent_core.values.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from types import TracebackType

    from mcp_types import Tool as McpTool

    from agent_core.tools.mcp.config import ServerConfig

__all__ = ["McpManager", "ServerStatus"]

log = structlog.get_logger("agent_core.tools.mcp")


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """How one configured server started: its tools, or why it did not."""

    name: str
    where: str
    tools: tuple[str, ...] = ()
    """The names its tools are offered under."""
    protocol: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def line(self) -> str:
        """One line for ``--check``."""
        if self.error is not None:
            return f"FAIL {self.name}: {self.error}"
        return f"ok   {self.name}: {len(self.tools)} tools, protocol {self.protocol} ({self.where})"


class McpManager:
    """Starts the configured servers, offers their tools, and closes them."""

    def __init__(
        self,
        servers: Sequence[ServerConfig],
        *,
        reserved: Collection[str] = (),
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        errlog: TextIO | None = None,
        on_cancel: Callable[[str], None] | None = None,
    ) -> None:
        """``reserved``: names other tools already use (the built-in ones).
        ``on_cancel``: called with a server's name for each call to it that is cancelled."""
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise ValueError(f"server names must be unique: {names}")
        self._connections = [
            ServerConnection(s, start_timeout_s=start_timeout_s, errlog=errlog, on_cancel=on_cancel)
            for s in servers
        ]
        self._reserved = {*reserved, FINAL_REPORT.name, ASK_USER.name}
        self._statuses: list[ServerStatus] = []
        self.tools: tuple[Tool, ...] = ()
        """Every tool of every server that started, once :meth:`start` returned."""

    async def start(self) -> None:
        """Start every server at once and list its tools; a server's failure is reported,
        not raised. Raises :class:`~agent_core.values.errors.ConfigError` for an approval rule
        naming a tool its server does not offer (the servers are left for :meth:`close`)."""
        _warn_of_shared_secrets([c.config for c in self._connections])
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._start(c)) for c in self._connections]
        started = {c.name: t.result() for c, t in zip(self._connections, tasks, strict=True)}
        names = assign_tool_names(
            (
                (server, tool.name)
                for server, listed in started.items()
                if not isinstance(listed, str)
                for tool in listed
            ),
            taken=self._reserved,
        )
        tools: list[Tool] = []
        self._statuses = []
        for connection in self._connections:
            listed = started[connection.name]
            where = connection.config.where
            if isinstance(listed, str):
                self._statuses.append(ServerStatus(connection.name, where, error=listed))
                continue
            offered = [mcp_tool(connection, t, names[(connection.name, t.name)]) for t in listed]
            tools.extend(offered)
            offered_names = tuple(t.name for t in offered)
            self._statuses.append(
                ServerStatus(connection.name, where, offered_names, connection.protocol_version)
            )
        self.tools = tuple(tools)
        unknown = [
            problem
            for connection in self._connections
            if not isinstance(listed := started[connection.name], str)
            for problem in _unknown_rules(connection.config, [t.name for t in listed])
        ]
        if unknown:
            raise ConfigError(SETTING, "; ".join(unknown))

    def connection(self, name: str) -> ServerConnection:
        """The connection to the server named ``name`` in the config."""
        for connection in self._connections:
            if connection.name == name:
                return connection
        raise KeyError(name)

    def status(self) -> list[ServerStatus]:
        """One status per configured server, in the file's order (after :meth:`start`)."""
        return list(self._statuses)

    def check_lines(self) -> list[str]:
        """One line per configured server, for a ``--check`` command."""
        return [s.line() for s in self._statuses]

    async def close(self) -> None:
        """End every server (at the same time); calls still in flight are cancelled."""
        async with asyncio.TaskGroup() as group:
            for connection in self._connections:
                group.create_task(connection.close())

    async def __aenter__(self) -> McpManager:
        try:
            await self.start()
        except BaseException:
            await asyncio.shield(self.close())
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.close())

    async def _start(self, connection: ServerConnection) -> tuple[McpTool, ...] | str:
        """The server's tools, or why it could not start (logged here, once)."""
        try:
            return await connection.start()
        except Exception as exc:  # one broken server must not keep the others from working
            error = connection.config.redact(str(exc) or type(exc).__name__)
            log.error("mcp.server_unavailable", server=connection.name, error=error)
            return error


def _unknown_rules(config: ServerConfig, offered: Sequence[str]) -> list[str]:
    """A line for each per-tool rule of ``config`` naming none of ``offered``."""
    problems = []
    for name in config.tool_approvals:
        if name in offered:
            continue
        nearest = difflib.get_close_matches(name, offered, n=1)
        hint = f"did you mean {nearest[0]!r}?" if nearest else f"it offers {len(offered)} tools"
        problems.append(
            f"server {config.name!r}: tools[{name!r}] names no tool the server offers ({hint})"
        )
    return problems


def _warn_of_shared_secrets(servers: Sequence[ServerConfig]) -> None:
    """One warning when two or more stdio servers carry secrets: each can read the
    others' through ``/proc`` (same user; they are dumpable again after ``execve``)."""
    sharing = [s.name for s in servers if isinstance(s, StdioServer) and s.carries_secrets]
    if len(sharing) >= 2:
        log.warning(
            "secrets.shared_between_tool_servers",
            servers=sharing,
            why="stdio tool servers run as one user and can read each other's environment "
            "through /proc",
            fix="run servers that hold secrets as streamable HTTP servers, each in its own "
            "container (docs/security.md)",
        )
