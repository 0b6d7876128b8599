"""A per-tool approval rule naming a tool its server does not offer stops the app's
start-up with one line, and fails ``--check`` (docs/tools.md, Approvals). ``python -m bot`` as a
real process, with the real ``mcp-server-git`` over stdio."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.agent_core.mcp_helpers import git_server, make_repository
from tests.bot.process import test_startup_faults
from tests.bot.process.test_check import good_settings, run_bot
from tests.system.workers import free_port

if TYPE_CHECKING:
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.fakes.slack_api import FakeSlack

pytestmark = pytest.mark.slow

TYPO = (
    "MCP_CONFIG: server 'git': tools['git_comit'] names no tool the server offers "
    "(did you mean 'git_commit'?)"
)


def typo_config(tmp_path: Path) -> str:
    git = git_server(make_repository(tmp_path))
    entry = {
        "command": git.command,
        "args": list(git.args),
        "tools": {"git_comit": {"approval": "always"}},
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"git": entry}}))
    return str(path)


async def test_check_fails_on_the_rule_and_names_the_tool_meant(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> None:
    settings = good_settings(slack, llm.base_url(), tmp_path)
    ran = await run_bot(tmp_path, "--check", **settings, MCP_CONFIG=typo_config(tmp_path))

    assert ran.status == 2, ran.stdout + ran.stderr
    assert ran.line("MCP server git").startswith("ok  ")
    assert f"FAIL settings: {TYPO}" in ran.lines


async def test_start_up_stops_with_one_line(slack: FakeSlack, tmp_path: Path) -> None:
    result = await test_startup_faults.run_bot(
        slack, tmp_path, PORT=str(free_port()), MCP_CONFIG=typo_config(tmp_path)
    )

    assert result.status == 2, result.stderr
    assert result.lines[-1] == f"threadpilot: {TYPO}"
    # Before it, only the log line of the server that started (and is ended again).
    assert [line for line in result.lines if "mcp.server_started" not in line] == [
        f"threadpilot: {TYPO}"
    ]
