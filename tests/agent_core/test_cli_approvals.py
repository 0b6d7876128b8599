"""Approvals in the terminal runner: it asks y/N on its terminal, denies when stdin is not
a terminal, and ``--yes`` approves every call. Our own MCP server (over streamable HTTP,
in the test's loop) records every call: it must never see one that was not approved."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core.terminal.approvals import NOT_A_TERMINAL, TERMINAL_USER
from tests.agent_core.test_cli import Cli
from tests.agent_core.test_cli_tools import tool_messages, write_config
from tests.fakes.mcp_server import FakeMcpServer, serve_http

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock


@pytest.fixture
async def notes_config(fake: FakeMcpServer, tmp_path: Path) -> AsyncIterator[str]:
    """An ``MCP_CONFIG`` naming the fake server, every tool of which asks for approval
    but ``read_note`` (annotated read-only)."""
    async with serve_http(fake) as url:
        yield write_config(tmp_path, {"notes": {"url": url, "approval": "unless_read_only"}})


@contextlib.contextmanager
def terminal() -> Iterator[tuple[int, int]]:
    """A pseudo-terminal: (the side the test types into, the side the runner reads)."""
    typing_side, runner_side = pty.openpty()
    try:
        yield typing_side, runner_side
    finally:
        os.close(typing_side)
        os.close(runner_side)


def prompt(tool: str, arguments: str) -> str:
    return f"Approve {tool} with these arguments?\n{arguments}\n[y/N] "


def write_twice(llm: LLMock) -> None:
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": "first"}),)))
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": "second"}),)))
    llm.reply("Wrote what I was allowed to.")


async def test_the_terminal_asks_and_only_yes_runs_the_call(
    llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    write_twice(llm)
    with terminal() as (keyboard, tty):
        cli = await Cli.start(
            llm, "write the notes", "--json", env={"MCP_CONFIG": notes_config}, stdin=tty
        )
        await cli.wait_for_stderr(prompt("notes__write_note", '{\n  "text": "first"\n}'))
        assert fake.notes == []
        os.write(keyboard, b"y\n")
        await cli.wait_for_stderr(prompt("notes__write_note", '{\n  "text": "second"\n}'))
        os.write(keyboard, b"\n")  # Enter alone is No
        status, result = await cli.finish_json()

    assert status == 0, cli.stderr
    assert fake.notes == [("write_note", "first")]
    assert tool_messages(llm.requests[1]) == ["wrote 'first'"]
    assert tool_messages(llm.requests[2])[1] == (
        f"error: notes__write_note: denied by {TERMINAL_USER}"
    )
    assert result["summary"] == "Wrote what I was allowed to."


async def test_the_terminal_shows_every_character_the_call_will_get(
    llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    # Before: the prompt cut at 500 characters without saying so; the tail is what runs.
    text = "harmless " * 100 + "rm -rf ~ \u202e\u200b\x1b[2J"
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": text}),)))
    llm.reply("Done.")
    shown = "harmless " * 100 + "rm -rf ~ \\u202e\\u200b\\u001b[2J"
    with terminal() as (keyboard, tty):
        cli = await Cli.start(llm, "go", "--json", env={"MCP_CONFIG": notes_config}, stdin=tty)
        await cli.wait_for_stderr(prompt("notes__write_note", f'{{\n  "text": "{shown}"\n}}'))
        os.write(keyboard, b"y\n")
        status, _ = await cli.finish_json()

    assert status == 0, cli.stderr
    assert fake.notes == [("write_note", text)]


async def test_without_a_terminal_the_call_is_denied_and_never_reaches_the_server(
    llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    llm.add(
        Reply(
            tool_calls=(
                ToolCall("notes__read_note", {}),
                ToolCall("notes__write_note", {"text": "x"}),
            )
        )
    )
    llm.reply("Could only read.")
    cli = await Cli.start(
        llm, "go", "--json", env={"MCP_CONFIG": notes_config}, stdin=subprocess.DEVNULL
    )
    status, _ = await cli.finish_json()

    assert status == 0, cli.stderr
    assert fake.notes == [("read_note", "")]
    assert tool_messages(llm.requests[1]) == [
        "the note says hello",
        f"error: notes__write_note: denied by {NOT_A_TERMINAL}",
    ]
    assert "[y/N]" not in cli.stderr


async def test_yes_approves_every_call_without_asking(
    llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    write_twice(llm)
    cli = await Cli.start(
        llm, "go", "--yes", "--json", env={"MCP_CONFIG": notes_config}, stdin=subprocess.DEVNULL
    )
    status, _ = await cli.finish_json()

    assert status == 0, cli.stderr
    assert fake.notes == [("write_note", "first"), ("write_note", "second")]
    assert "[y/N]" not in cli.stderr


@pytest.mark.parametrize("raw", ["soon", "0s"])
async def test_a_bad_approval_timeout_is_a_one_line_error(llm: LLMock, raw: str) -> None:
    cli = await Cli.start(llm, "go", env={"APPROVAL_TIMEOUT": raw}, stdin=subprocess.DEVNULL)
    status, _ = await cli.finish()

    assert status == 2
    [line] = cli.stderr.strip().splitlines()
    assert line.startswith("threadpilot: APPROVAL_TIMEOUT: ")
