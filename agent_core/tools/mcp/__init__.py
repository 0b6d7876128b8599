"""MCP tools: the servers an admin lists in ``MCP_CONFIG``, offered to the agent as tools.

- :mod:`~agent_core.tools.mcp.config`: the ``{"mcpServers": {...}}`` file (stdio and HTTP).
- :mod:`~agent_core.tools.mcp.naming`: ``SERVER__TOOL`` names, collisions settled stably.
- :mod:`~agent_core.tools.mcp.connection`: one server: start, call, cancel, restart, close.
- :mod:`~agent_core.tools.mcp.transport`: the SDK transport, watched for the server's end.
- :mod:`~agent_core.tools.mcp.adapter`: a server's tool as a
  :class:`~agent_core.tools.toolbox.Tool`.
- :mod:`~agent_core.tools.mcp.content`: what the model reads of a tool's result.
- :mod:`~agent_core.tools.mcp.manager`: every server of the process, owned by the app.
- :mod:`~agent_core.tools.mcp.errors`: what goes wrong with a server, as the model reads it.

Built on the official ``mcp`` SDK (2.x).
"""

from agent_core.tools.mcp.config import (
    SETTING,
    HttpServer,
    ServerConfig,
    StdioServer,
    load_mcp_config,
    parse_mcp_config,
)
from agent_core.tools.mcp.connection import ServerConnection
from agent_core.tools.mcp.errors import McpServerError, ServerStopped, ServerUnavailable
from agent_core.tools.mcp.manager import McpManager, ServerStatus
from agent_core.tools.mcp.naming import MAX_TOOL_NAME, assign_tool_names, tool_name

__all__ = [
    "MAX_TOOL_NAME",
    "SETTING",
    "HttpServer",
    "McpManager",
    "McpServerError",
    "ServerConfig",
    "ServerConnection",
    "ServerStatus",
    "ServerStopped",
    "ServerUnavailable",
    "StdioServer",
    "assign_tool_names",
    "load_mcp_config",
    "parse_mcp_config",
    "tool_name",
]
