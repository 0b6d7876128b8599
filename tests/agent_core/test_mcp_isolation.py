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

from agent_core.mcp import McpManager, StdioServer
from tests.agent_core.mcp_helpers import PY, ROOT

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

SECRET = "sk-tpsecret-4Fq9Lw2Zr7Xc"


def snoop_server(cwd: str | None = None) -> StdioServer:
    env = {"PYTHONPATH": str(ROOT)}
    return StdioServer("snoop", PY, ("-m", "tests.fakes.mcp_snoop"), env=env, cwd=cwd)


async def snooped(manager: McpManager) -> dict[str, Any]:
    """What the server could read, as its ``snoop`` tool reports it."""
    result = await manager.connection("snoop").call(
        "snoop", {"needle": "tpsecret"}, lambda *_: None
    )
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
