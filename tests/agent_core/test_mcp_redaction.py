"""Secrets in ``MCP_CONFIG`` stay out of what describes a server (docs/security.md).

A ``${VAR}`` expanded into a server's ``command``, ``args``, ``url`` or ``headers``, and a
URL's user info and query, never appear in the logs, in the errors a server's failure
raises (which the model and ``--check`` read) or in the status lines of ``--check``.
Real servers: our fake over stdio, a port nobody listens on, and a local HTTP endpoint
that refuses every request with a 401.
"""

from __future__ import annotations

import contextlib
import io
import socket
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from agent_core.process.logs import configure_logging
from agent_core.tools.mcp import McpManager, ServerConfig, parse_mcp_config
from agent_core.values.errors import ConfigError
from tests.agent_core.mcp_helpers import PY, ROOT
from tests.agent_core.test_logs import restore_logging  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

TOKEN = "tok-9f3Kq7Zx2Lw8Vb5N"
"""The value of ``${MCP_TOKEN}``: the secret the config names."""
PASSWORD = "pw-Hk4mR8sT1yQ6"
"""Written into a URL's user info."""
QUERY_SECRET = "qs-Jn5cW2vB7xE3"
"""Written into a URL's query."""
SECRETS = (TOKEN, PASSWORD, QUERY_SECRET)
ENV = {"MCP_TOKEN": TOKEN}


def servers(**entries: dict[str, Any]) -> tuple[ServerConfig, ...]:
    return parse_mcp_config({"mcpServers": entries}, ENV)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_entry(port: int) -> dict[str, Any]:
    return {
        "url": f"http://admin:{PASSWORD}@127.0.0.1:{port}/mcp/${{MCP_TOKEN}}"
        f"?token={QUERY_SECRET}&key=${{MCP_TOKEN}}",
        "headers": {"Authorization": "Bearer ${MCP_TOKEN}", "X-Api-Key": "${MCP_TOKEN}"},
    }


@contextlib.asynccontextmanager
async def refusing_endpoint() -> AsyncIterator[int]:
    """A local HTTP endpoint that answers every request 401 Unauthorized; its port."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=401, text="unauthorized")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


async def started(configs: tuple[ServerConfig, ...]) -> tuple[str, McpManager]:
    """Start and close the servers; everything the manager said about them, as text."""
    with capture_logs() as logs:
        manager = McpManager(configs, start_timeout_s=10)
        await manager.start()
        await manager.close()
    said = [repr(logs), *manager.check_lines(), *(repr(s) for s in manager.status())]
    said += [repr(c) for c in configs]
    return "\n".join(said), manager


def assert_no_secret_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


async def test_an_unreachable_http_server_is_described_without_its_secrets() -> None:
    said, manager = await started(servers(wiki=http_entry(closed_port())))

    assert_no_secret_in(said)
    (status,) = manager.status()
    assert not status.ok
    # Still says which server, where, and which part came from the environment.
    assert "127.0.0.1" in status.error and "${MCP_TOKEN}" in status.error  # type: ignore[operator]


async def test_a_refusing_http_server_is_described_without_its_secrets() -> None:
    async with refusing_endpoint() as port:
        said, manager = await started(servers(wiki=http_entry(port)))

    assert_no_secret_in(said)
    (status,) = manager.status()
    assert not status.ok


async def test_a_stdio_server_is_described_without_the_secrets_in_its_command_line() -> None:
    said, manager = await started(
        servers(
            fake={
                "command": PY,
                "args": ["-m", "tests.fakes.mcp_server", "--token=${MCP_TOKEN}"],
                "env": {"PYTHONPATH": str(ROOT), "MCP_TOKEN": "${MCP_TOKEN}"},
            },
            missing={"command": "/nonexistent/${MCP_TOKEN}/server", "args": ["${MCP_TOKEN}"]},
        )
    )

    assert_no_secret_in(said)
    fake, missing = manager.status()
    assert fake.ok and "--token=${MCP_TOKEN}" in fake.line()
    assert not missing.ok and "/nonexistent/${MCP_TOKEN}/server" in (missing.error or "")


def test_a_bad_url_is_refused_without_its_secret() -> None:
    with pytest.raises(ConfigError) as refused:
        servers(wiki={"url": "${MCP_TOKEN}"})

    assert TOKEN not in str(refused.value)
    assert "url must start with http:// or https://" in str(refused.value)


@pytest.mark.usefixtures("restore_logging")
async def test_at_debug_the_http_clients_own_lines_show_no_url_secrets() -> None:
    out = io.StringIO()
    configure_logging("json", "DEBUG", out)  # the SDK and its HTTP client log every request
    key = "sk-tpsecret-Wq4Er7Ty2Ui9Op3As6"
    entry = {"url": f"http://ops:{PASSWORD}@127.0.0.1:{{port}}/mcp/{key}?token={QUERY_SECRET}"}

    async with refusing_endpoint() as port:
        entry["url"] = entry["url"].format(port=port)
        await started(servers(wiki=entry))

    logged = out.getvalue()
    assert "HTTP Request" in logged  # the client's own line is there, only masked
    for secret in (PASSWORD, QUERY_SECRET, key):
        assert secret not in logged
