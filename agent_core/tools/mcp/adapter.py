"""An MCP server's tools as :class:`~agent_core.tools.toolbox.Tool` objects the loop can offer.

Each tool is offered under its ``SERVER__TOOL`` name with the server's own JSON schema
as its parameters, and goes through the same :class:`~agent_core.tools.toolbox.Toolbox` path as
a Python tool (timeout, error results, cut of long results). A call's progress
notifications become the call's progress in the run. A result the server flags
``isError`` reaches the model as an error with the server's words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core.tools.mcp.content import result_text
from agent_core.tools.progress import current_progress
from agent_core.tools.toolbox import Tool, ToolError, remote_tool

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mcp_types import Tool as McpTool

    from agent_core.tools.mcp.connection import ServerConnection

__all__ = ["MAX_DESCRIPTION_CHARS", "mcp_tool"]

MAX_DESCRIPTION_CHARS = 1_000
"""A server's tool description is sent with every model request: longer ones are cut."""


def mcp_tool(connection: ServerConnection, listed: McpTool, name: str) -> Tool:
    """``listed`` (a tool of ``connection``'s server) offered to the model as ``name``."""
    remote = listed.name

    async def call(arguments: dict[str, Any]) -> str:
        result = await connection.call(remote, arguments, current_progress())
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"{remote} reported an error without saying why")
        return text

    read_only = listed.annotations is not None and listed.annotations.read_only_hint is True
    return remote_tool(
        name,
        _description(connection.name, listed),
        _parameters(listed),
        call,
        needs_approval=connection.config.approval_for(remote).asks(read_only=read_only),
    )


def _description(server: str, listed: McpTool) -> str:
    text = (listed.description or listed.title or listed.name).strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return f"{text} (tool {listed.name!r} of the MCP server {server!r})"


def _parameters(listed: McpTool) -> Mapping[str, Any]:
    schema: dict[str, Any] = dict(listed.input_schema)
    # Function calling wants an object schema with properties, even when there are none.
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema
