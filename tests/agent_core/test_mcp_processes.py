"""MCP server processes: a crash mid-call, a restart on next use, and none left behind
(docs/stopping.md): after ``close()``, and after ``kill -9`` of the process holding them (their
stdin closes and they exit on their own). Real stdio servers: ``mcp-server-time``,
``mcp-server-git`` and our own fake.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from agent_core.tools.mcp import McpManager, StdioServer
from agent_core.tools.toolbox import Toolbox
from agent_core.values.chat import ToolCall
from agent_core.values.outcomes import ExitCode
from tests.agent_core.mcp_helpers import (
    ROOT,
    WAIT_S,
    children_of,
    fake_stdio_server,
    git_server,
    make_repository,
    running,
    time_server,
    until_gone,
)

if TYPE_CHECKING:
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory


def tool_messages(llm: LLMock, request: int) -> list[str]:
    body: dict[str, Any] = llm.requests[request].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_server_that_crashes_mid_call_gives_a_tool_error_and_restarts_on_next_use(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("fake__whoami")
    llm.call_tool("fake__crash")
    llm.call_tool("fake__whoami")
    llm.reply("The server crashed once and came back.")

    async with McpManager([fake_stdio_server()]) as manager:
        result = await make_agent(manager.tools).new_run("crash it").run()

    first_pid, second_pid = int(tool_messages(llm, 1)[0]), int(tool_messages(llm, 3)[2])
    assert tool_messages(llm, 2)[1] == (
        "error: fake__crash: the MCP server 'fake' stopped during the call (Connection closed); "
        "it is restarted on the next call"
    )
    assert second_pid != first_pid
    assert not running(first_pid)
    assert result.exit_code is ExitCode.FINAL_ANSWER


async def test_a_server_that_died_while_idle_is_restarted_before_the_next_call() -> None:
    async with McpManager([fake_stdio_server()]) as manager:
        box = Toolbox(manager.tools)
        first = await box.run(ToolCall("c1", "fake__whoami", "{}"))
        os.kill(int(first.output), signal.SIGKILL)
        async with asyncio.timeout(WAIT_S):
            await manager.connection("fake").ended()  # its stdout closed: noticed at once
        second = await box.run(ToolCall("c2", "fake__whoami", "{}"))

    assert second.ok, second.output
    assert int(second.output) != int(first.output)


async def test_close_ends_every_stdio_server(tmp_path: Path) -> None:
    before = children_of(os.getpid())
    repository = make_repository(tmp_path)
    manager = McpManager([time_server(), git_server(repository), fake_stdio_server()])
    await manager.start()
    servers = children_of(os.getpid()) - before
    assert len(servers) == 3

    await manager.close()

    assert not {pid for pid in servers if running(pid)}
    assert children_of(os.getpid()) - before == set()


NEVER_ANSWERS = "import time; time.sleep(60)"  # wait-ok: the server's code, not the test's wait


async def test_a_server_that_never_answers_is_reported_and_its_process_still_ends() -> None:
    before = children_of(os.getpid())
    mute = StdioServer("mute", sys.executable, ("-c", NEVER_ANSWERS))
    manager = McpManager([mute, time_server()], start_timeout_s=3.0)
    await manager.start()
    lines = manager.check_lines()
    await manager.close()

    assert lines[0] == (
        f"FAIL mute: the MCP server 'mute' ({sys.executable} -c {NEVER_ANSWERS}) "
        "could not start: it did not answer within 3 s"
    )
    assert lines[1].startswith("ok   time: ")
    assert children_of(os.getpid()) - before == set()  # the mute one was ended too


HOLDER = """
import asyncio, os, sys
from agent_core.tools.mcp import McpManager, StdioServer
from tests.agent_core.mcp_helpers import children_of, fake_stdio_server, git_server, time_server

async def main():
    manager = McpManager([time_server(), git_server(sys.argv[1]), fake_stdio_server()])
    await manager.start()
    print("servers:", *sorted(children_of(os.getpid())), flush=True)
    await asyncio.Event().wait()  # until killed

asyncio.run(main())
"""


async def test_after_kill_9_of_the_holding_process_the_servers_exit_on_their_own(
    tmp_path: Path,
) -> None:
    make_repository(tmp_path)
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        str(tmp_path),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert holder.stdout is not None
        async with asyncio.timeout(WAIT_S * 3):  # three servers start on a busy machine
            line = b""
            while not line.startswith(b"servers:"):  # its log lines come first
                line = await holder.stdout.readline()
                assert line, "the holder exited before its servers started"
        servers = {int(pid) for pid in line.split()[1:]}
        assert len(servers) == 3
        assert all(running(pid) for pid in servers)

        holder.kill()  # SIGKILL: no close(), no cleanup of any kind
        await holder.wait()

        await until_gone(servers)  # their stdin closed with the holder: they exit
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
