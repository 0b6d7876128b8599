"""A per-tool approval rule naming a tool its server does not offer is a settings error
(docs/tools.md, Approvals): ``"tools": {"git_comit": {"approval": "always"}}`` used to be
accepted, match nothing, and leave ``git_commit`` running unasked.

The real ``mcp-server-git`` over stdio: its tools are what it lists.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from agent_core.tools.mcp import McpManager
from agent_core.values.approvals import ApprovalRule
from agent_core.values.errors import ConfigError
from tests.agent_core.mcp_helpers import children_of, git_server, make_repository, until_gone
from tests.agent_core.test_cli import Cli
from tests.agent_core.test_cli_tools import write_config

if TYPE_CHECKING:
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

TYPO = (
    "server 'git': tools['git_comit'] names no tool the server offers (did you mean 'git_commit'?)"
)


async def test_a_rule_for_a_tool_the_server_does_not_offer_stops_start_up(tmp_path: Path) -> None:
    git = git_server(make_repository(tmp_path))
    rules = {"git_comit": ApprovalRule.ALWAYS, "git_status": ApprovalRule.NEVER}
    server = type(git)(git.name, git.command, git.args, tool_approvals=rules)
    before = children_of(os.getpid())

    with pytest.raises(ConfigError) as raised:
        async with McpManager([server]):
            pytest.fail("started with a rule that matches nothing")

    assert str(raised.value) == f"MCP_CONFIG: {TYPO}"
    started = children_of(os.getpid()) - before
    await until_gone(started)  # the server it had started is ended


async def test_rules_naming_offered_tools_start_as_usual(tmp_path: Path) -> None:
    git = git_server(make_repository(tmp_path))
    rules = {"git_commit": ApprovalRule.ALWAYS}
    server = type(git)(git.name, git.command, git.args, tool_approvals=rules)

    async with McpManager([server]) as manager:
        asks = {t.name: t.needs_approval for t in manager.tools}

    assert asks["git__git_commit"] is True
    assert asks["git__git_status"] is False


async def test_the_terminal_runner_says_so_in_one_line_and_asks_no_model(
    llm: LLMock, tmp_path: Path
) -> None:
    git = git_server(make_repository(tmp_path))
    entry = {
        "command": git.command,
        "args": list(git.args),
        "tools": {"git_comit": {"approval": "always"}},
    }
    config = write_config(tmp_path, {"git": entry})

    cli = await Cli.start(llm, "commit it", env={"MCP_CONFIG": config})
    status, stdout = await cli.finish()

    assert status == 2
    assert stdout == ""
    assert cli.stderr.strip().splitlines() == [f"threadpilot: MCP_CONFIG: {TYPO}"]
    assert llm.requests == []
