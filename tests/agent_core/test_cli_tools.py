"""``python -m agent_core run`` with the MCP servers of ``MCP_CONFIG``, as the app has them.

Two real servers: ``mcp-server-time`` over stdio, and our own (:mod:`tests.fakes.mcp_server`)
over streamable HTTP in the test's loop, whose slow tool records its cancellation. Ctrl+C
reaches their calls as the buttons do in Slack: once lets a call finish, twice cancels it.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core.terminal.cli import STOPPING_NOTICE
from tests.agent_core.helpers import offered_tools
from tests.agent_core.mcp_helpers import PY, TIME_SERVER, WAIT_S, until_gone
from tests.agent_core.test_cli import Cli
from tests.fakes.mcp_server import FakeMcpServer, serve_http

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock


@pytest.fixture
async def fake_config(fake: FakeMcpServer, tmp_path: Path) -> AsyncIterator[str]:
    """An ``MCP_CONFIG`` file naming the fake server."""
    async with serve_http(fake) as url:
        yield write_config(tmp_path, {"fake": {"url": url}})


def write_config(directory: Path, servers: dict[str, Any]) -> str:
    path = directory / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def tool_messages(record: RequestRecord) -> list[str]:
    body: dict[str, Any] = record.body or {}
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_the_mcp_tools_named_in_dotenv_are_offered_and_called(
    llm: LLMock, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text(f"MCP_CONFIG={write_config(tmp_path, {'time': TIME_SERVER})}\n")
    llm.add(Reply(tool_calls=(ToolCall("time__get_current_time", {"timezone": "UTC"}),)))
    llm.reply("It is some time in UTC.")
    cli = await Cli.start(llm, "what time is it?", "--json", cwd=tmp_path)
    status, result = await cli.finish_json()

    assert status == 0, cli.stderr
    assert result["summary"] == "It is some time in UTC."
    first, second = llm.requests
    offered = offered_tools(first)
    for name in ("time__get_current_time", "current_time", "calculate", "delegate"):
        assert name in offered
    (answer,) = tool_messages(second)
    assert json.loads(answer)["timezone"] == "UTC"
    assert "<- time__get_current_time ok: " in cli.stderr


async def test_ctrl_c_once_lets_the_mcp_call_finish_then_prints_the_handoff(
    llm: LLMock, fake: FakeMcpServer, fake_config: str
) -> None:
    llm.call_tool("fake__slow", {"steps": 2})
    llm.reply("Stopped: the slow job finished both steps.")
    cli = await Cli.start(llm, "run the slow job", env={"MCP_CONFIG": fake_config})
    await fake.until(lambda: fake.calls, "the slow call to start")

    cli.signal(signal.SIGINT)
    await cli.wait_for_stderr(STOPPING_NOTICE)
    fake.release()
    status, stdout = await cli.finish()

    assert status == 0, cli.stderr
    assert "Outcome: User interlude: stopped by terminal [EXIT-USER-STOP]" in stdout
    assert "Stopped: the slow job finished both steps." in stdout
    final_turn = llm.requests[-1]
    assert offered_tools(final_turn) == ["final_report"]
    assert tool_messages(final_turn) == ["slow finished 2 steps"]  # it completed
    assert fake.cancelled == []


async def test_ctrl_c_twice_cancels_the_mcp_call(
    llm: LLMock, fake: FakeMcpServer, fake_config: str
) -> None:
    llm.call_tool("fake__slow", {"steps": 2})
    cli = await Cli.start(llm, "run the slow job", "--json", env={"MCP_CONFIG": fake_config})
    await fake.until(lambda: fake.calls, "the slow call to start")

    cli.signal(signal.SIGINT)
    await cli.wait_for_stderr(STOPPING_NOTICE)
    cli.signal(signal.SIGINT)
    status, result = await cli.finish_json()

    assert status == 130, cli.stderr
    assert result["stop_reason"] == "abort"
    await fake.until(lambda: fake.cancelled, "the server to see the call cancelled")
    assert [c.tool for c in fake.cancelled] == ["slow"]
    assert len(llm.requests) == 1  # no final turn


async def test_a_sub_agent_can_be_handed_an_mcp_tool(
    llm: LLMock, fake: FakeMcpServer, fake_config: str
) -> None:
    delegate = ToolCall("delegate", {"task": "Echo hello.", "tools": ["fake__echo"]})
    llm.add(Reply(tool_calls=(delegate,)))
    llm.add(Reply(tool_calls=(ToolCall("fake__echo", {"text": "hello"}),)))
    llm.reply("The server said hello.")
    llm.reply("The sub-agent heard hello.")
    cli = await Cli.start(llm, "delegate it", "--json", env={"MCP_CONFIG": fake_config})
    status, result = await cli.finish_json()

    assert status == 0, cli.stderr
    assert result["summary"] == "The sub-agent heard hello."
    assert offered_tools(llm.requests[1]) == ["fake__echo", "final_report", "ask_user"]
    assert "  <- fake__echo ok: hello" in cli.stderr.splitlines()


async def test_a_bad_mcp_config_is_one_line_and_status_2(llm: LLMock, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    cli = await Cli.start(llm, "hello", env={"MCP_CONFIG": str(missing)})
    status, stdout = await cli.finish()

    assert status == 2
    assert stdout == ""
    (line,) = cli.stderr.strip().splitlines()
    assert line.startswith(f"threadpilot: MCP_CONFIG: cannot read {missing}")
    assert llm.requests == []


async def test_sigterm_is_reported_in_terminal_words(
    llm: LLMock, fake: FakeMcpServer, fake_config: str
) -> None:
    """Nothing is stored or resumed in a terminal: its report says so, and the lines
    before it read as plain English."""
    llm.add(
        Reply(
            tool_calls=(
                ToolCall("calculate", {"expression": "1 / 0"}),
                ToolCall("fake__slow", {"steps": 2}),
            )
        )
    )
    cli = await Cli.start(llm, "divide, then wait", env={"MCP_CONFIG": fake_config})
    await fake.until(lambda: fake.calls, "the slow call to start")
    await cli.wait_for_stderr("<- calculate")

    cli.signal(signal.SIGTERM)
    status, stdout = await cli.finish()

    assert status == 143
    assert stdout[stdout.index("Outcome:") :].splitlines() == [
        "Outcome: Blocked: interrupted by a shutdown [EXIT-SHUTDOWN]",
        "Evidence: Interrupted by a shutdown during turn 1 while running the tool "
        "fake__slow; nothing was saved.",
        "Artifacts: none",
        "Handoff: Nothing is running. Run the command again to start again.",
    ]
    assert [line for line in cli.stderr.splitlines() if line.strip()] == [
        '-> calculate {"expression": "1 / 0"}',
        '-> fake__slow {"steps": 2}',
        "<- calculate error: calculate raised ZeroDivisionError: division by zero",
    ]


async def test_ctrl_c_while_the_mcp_servers_start_ends_them_and_exits_130(
    llm: LLMock, tmp_path: Path
) -> None:
    """A server that never answers holds the start for up to 30 s: Ctrl+C ends it now."""
    pids: asyncio.Queue[int] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pids.put_nowait(int(await reader.readline()))
        writer.close()

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    # It says who it is, then reads its stdin to the end without answering anything.
    script = (
        "import os, socket, sys; "
        f"socket.create_connection(('127.0.0.1', {port})).sendall(b'%d\\n' % os.getpid()); "
        "sys.stdin.read()"
    )
    config = write_config(tmp_path, {"silent": {"command": PY, "args": ["-c", script]}})
    async with listener:
        cli = await Cli.start(llm, "hello", env={"MCP_CONFIG": config})
        async with asyncio.timeout(WAIT_S):
            pid = await pids.get()
        cli.signal(signal.SIGINT)
        status, stdout = await cli.finish()

    assert status == 130, cli.stderr
    assert stdout == ""
    assert "Traceback" not in cli.stderr
    await until_gone({pid})
    assert llm.requests == []
