"""Where a stdio MCP server starts (docs/security.md): in its entry's ``cwd``, or else in an
empty directory of its own, removed when it stops; never in threadpilot's working
directory, where a ``.env`` holds the app's secrets. Real server: our hostile one,
:mod:`tests.fakes.mcp_snoop`, which reports what it could read.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import TYPE_CHECKING, Any

from mcp_types import TextContent
from structlog.testing import capture_logs

from agent_core.tools.mcp import McpManager, StdioServer, parse_mcp_config
from tests.agent_core.mcp_helpers import PY, ROOT

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

SECRET = "sk-tpsecret-4Fq9Lw2Zr7Xc"


def snoop_server(cwd: str | None = None) -> StdioServer:
    env = {"PYTHONPATH": str(ROOT)}
    return StdioServer("snoop", PY, ("-m", "tests.fakes.mcp_snoop"), env=env, cwd=cwd)


async def snooped(manager: McpManager, name: str = "snoop") -> dict[str, Any]:
    """What the server could read, as its ``snoop`` tool reports it."""
    result = await manager.connection(name).call("snoop", {"needle": "tpsecret"}, lambda *_: None)
    (content,) = result.content
    assert isinstance(content, TextContent)
    report: dict[str, Any] = json.loads(content.text)
    return report


async def test_a_server_without_cwd_starts_in_an_empty_directory_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # threadpilot's working directory, with its .env
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")

    async with McpManager([snoop_server()]) as manager:
        report = await snooped(manager)
        assert await asyncio.to_thread(os.path.isdir, report["cwd"])

    # Through its working directory (the test's process is its parent here, and can be
    # read through /proc: tests/system/test_secrets.py runs the app as the app runs).
    assert SECRET not in json.dumps([report["cwd_env"], report["parent_dir_env"]])
    assert report["cwd"] != str(tmp_path)
    assert report["cwd_entries"] == []
    assert "FileNotFoundError" in report["cwd_env"]["error"]
    assert not await asyncio.to_thread(os.path.exists, report["cwd"])  # removed when it stopped


async def test_a_server_with_cwd_starts_there(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the server's own files\n")

    async with McpManager([snoop_server(cwd=str(tmp_path))]) as manager:
        report = await snooped(manager)

    assert report["cwd"] == str(tmp_path)
    assert report["cwd_entries"] == ["notes.txt"]
    assert await asyncio.to_thread(tmp_path.exists)  # its own directory is left alone


def snoops_with_secrets(*secrets: str | None) -> list[StdioServer]:
    """Snoop servers as ``MCP_CONFIG`` lists them, each given its own ``${VAR}`` secret
    (None: a server with no secret)."""
    entries: dict[str, Any] = {}
    environ: dict[str, str] = {}
    for n, secret in enumerate(secrets):
        env = {"PYTHONPATH": str(ROOT)}
        if secret is not None:
            env["SERVICE_TOKEN"] = f"${{TOKEN_{n}}}"
            environ[f"TOKEN_{n}"] = secret
        entries[f"snoop{n}"] = {"command": PY, "args": ["-m", "tests.fakes.mcp_snoop"], "env": env}
    servers = parse_mcp_config({"mcpServers": entries}, environ)
    return [s for s in servers if isinstance(s, StdioServer)]


async def test_stdio_servers_read_each_others_secrets_and_start_up_warns_of_it() -> None:
    """What docs/security.md says: one stdio server reads another's ``env`` through
    /proc, so two servers with secrets get a start-up warning pointing elsewhere."""
    theirs, mine = "tpsecret-of-the-git-server", "tpsecret-of-the-wiki-server"
    servers = snoops_with_secrets(theirs, mine)
    assert all(s.carries_secrets for s in servers)

    with capture_logs() as logs:
        async with McpManager(servers) as manager:
            victim = await snooped(manager, "snoop0")
            result = await manager.connection("snoop1").call(
                "environ_of", {"pid": victim["pid"]}, lambda *_: None
            )

    (content,) = result.content
    assert isinstance(content, TextContent)
    assert theirs in json.loads(content.text)["read"]  # the other server's secret
    (warning,) = [e for e in logs if e["event"] == "secrets.shared_between_tool_servers"]
    assert warning["log_level"] == "warning"
    assert warning["servers"] == ["snoop0", "snoop1"]
    assert "streamable HTTP" in warning["fix"] and "container" in warning["fix"]
    assert theirs not in json.dumps(logs, default=str)


async def test_one_stdio_server_with_secrets_starts_without_the_warning() -> None:
    servers = snoops_with_secrets("tpsecret-of-the-git-server", None)
    assert [s.carries_secrets for s in servers] == [True, False]

    with capture_logs() as logs:
        async with McpManager(servers):
            pass

    assert not [e for e in logs if e["event"] == "secrets.shared_between_tool_servers"]
