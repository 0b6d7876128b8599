"""Tools the model can call: the toolbox (typed callables and their schemas), the built-in
tools, a call's arguments and progress, the threads synchronous tools run in, and MCP servers
as tools (:mod:`agent_core.tools.mcp`).
"""
