"""What goes wrong with an MCP server, as the model and the admin read it.

    ToolError (agent_core.tools.toolbox)       the model reads "error: <tool>: <message>"
    └── McpServerError                  an MCP server failed a call
        ├── ServerUnavailable           it could not be started (or restarted)
        └── ServerStopped               it stopped during the call; restarted on next use

A server's own refusal (an error response, or a result flagged ``isError``) is a plain
:class:`~agent_core.tools.toolbox.ToolError` with the server's words. Configuration problems are
:class:`~agent_core.values.errors.ConfigError` (see :mod:`agent_core.tools.mcp.config`).
"""

from __future__ import annotations

from agent_core.tools.toolbox import ToolError

__all__ = ["McpServerError", "ServerStopped", "ServerUnavailable"]


class McpServerError(ToolError):
    """An MCP server failed a call."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server


class ServerUnavailable(McpServerError):
    """The server could not be started or restarted; the message says why."""


class ServerStopped(McpServerError):
    """The server stopped (crashed, exited, dropped the connection) during the call."""
