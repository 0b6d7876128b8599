"""MCP tools in real runs, against real servers written by others (``mcp-server-time`` and
``mcp-server-git`` from PyPI, over stdio) and our own (:mod:`tests.fakes.mcp_server`).

llmock streams the tool calls; the servers run as real subprocesses.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import structlog
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from agent_core.tools.mcp import McpManager, StdioServer
from agent_core.tools.mcp.content import result_text
from agent_core.tools.progress import report_progress
from agent_core.tools.toolbox import MAX_TOOL_RESULT_CHARS, Toolbox, tool
from agent_core.values.chat import ToolCall
from agent_core.values.events import ToolProgress
from agent_core.values.outcomes import ExitCode
from tests.agent_core.helpers import EventLog, offered_tools
from tests.agent_core.mcp_helpers import (
    fake_stdio_server,
    git_server,
    make_repository,
    time_server,
)

if TYPE_CHECKING:
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory


def tool_messages(llm: LLMock, request: int) -> list[str]:
    body: dict[str, Any] = llm.requests[request].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def offered_schema(llm: LLMock, request: int, name: str) -> dict[str, Any]:
    body: dict[str, Any] = llm.requests[request].body
    [found] = [t["function"] for t in body["tools"] if t["function"]["name"] == name]
    return dict(found["parameters"])


async def test_real_stdio_servers_tools_are_offered_and_called_in_a_run(
    llm: LLMock, make_agent: AgentFactory, tmp_path: Path
) -> None:
    repository = make_repository(tmp_path)
    llm.call_tool("time__get_current_time", {"timezone": "Europe/Paris"})
    llm.call_tool("git__git_log", {"repo_path": str(repository), "max_count": 1})
    llm.reply("Paris time noted; the last commit is 'First notes'.")

    async with McpManager([time_server(), git_server(repository)]) as manager:
        result = await make_agent(manager.tools).new_run("what time is it, what changed?").run()
        lines = manager.check_lines()

    offered = offered_tools(llm.requests[0])
    assert {"time__get_current_time", "time__convert_time", "git__git_log"} <= set(offered)
    assert offered_schema(llm, 0, "time__get_current_time")["required"] == ["timezone"]
    time_answer = json.loads(tool_messages(llm, 1)[0])
    assert time_answer["timezone"] == "Europe/Paris"
    assert "Message: First notes" in tool_messages(llm, 2)[1]
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert lines[0].startswith("ok   time: 2 tools, protocol 2026-07-28 (")
    assert lines[1].startswith("ok   git: 12 tools, protocol 2026-07-28 (")


async def test_a_servers_own_error_reaches_the_model_as_an_error(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("time__get_current_time", {"timezone": "Mars/Olympus_Mons"})
    llm.call_tool("time__get_current_time", {"zone": "UTC"})
    llm.reply("Mars has no time zone.")

    async with McpManager([time_server()]) as manager:
        await make_agent(manager.tools).new_run("time on Mars?").run()

    [unknown_zone] = tool_messages(llm, 1)
    assert unknown_zone.startswith("error: time__get_current_time: Error executing tool ")
    assert "Mars/Olympus_Mons" in unknown_zone
    assert tool_messages(llm, 2)[1].startswith("error: time__get_current_time: ")


async def test_a_server_that_cannot_start_is_reported_once_and_the_others_still_work(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    broken = StdioServer("broken", "/nonexistent/mcp-server")
    llm.call_tool("time__get_current_time", {"timezone": "UTC"})
    llm.reply("It is now.")

    with structlog.testing.capture_logs() as logs:
        async with McpManager([broken, time_server()]) as manager:
            result = await make_agent(manager.tools).new_run("what time is it?").run()
            lines = manager.check_lines()

    assert lines[0] == (
        "FAIL broken: the MCP server 'broken' (/nonexistent/mcp-server) could not start: "
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/mcp-server'"
    )
    assert lines[1].startswith("ok   time: 2 tools")
    reports = [e for e in logs if e["event"] == "mcp.server_unavailable"]
    assert [(e["server"], e["log_level"]) for e in reports] == [("broken", "error")]
    assert not any(t.startswith("broken__") for t in offered_tools(llm.requests[0]))
    assert json.loads(tool_messages(llm, 1)[0])["timezone"] == "UTC"
    assert result.exit_code is ExitCode.FINAL_ANSWER


async def test_a_long_result_is_cut_with_a_note(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.call_tool("fake__big", {"chars": 50_000})
    llm.reply("That was long.")

    async with McpManager([fake_stdio_server()]) as manager:
        await make_agent(manager.tools).new_run("say a lot").run()

    [cut] = tool_messages(llm, 1)
    assert cut.startswith("x" * MAX_TOOL_RESULT_CHARS + "\n\n[threadpilot cut this result:")
    assert "it had 50,000 characters and only the first 20,000 are shown" in cut
    assert len(cut) < MAX_TOOL_RESULT_CHARS + 200


async def test_any_tools_result_is_cut_to_the_toolbox_budget() -> None:
    @tool
    def shout() -> str:
        """Say a lot."""
        return "a" * 120

    box = Toolbox([shout], max_result_chars=100)
    outcome = await box.run(ToolCall("c1", "shout", "{}"))

    assert outcome.output == "a" * 100 + (
        "\n\n[threadpilot cut this result: it had 120 characters and only the first 100 are "
        "shown. If you need more, ask the tool for less at a time.]"
    )
    assert outcome.ok


async def test_a_python_tool_reports_progress_like_an_mcp_tool(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    @tool
    def count(to: int) -> str:
        """Count, reporting each number (from its thread)."""
        for n in range(1, to + 1):
            report_progress(n, to, f"at {n}")
        return "counted"

    llm.call_tool("count", {"to": 2})
    llm.reply("Counted.")
    run = make_agent([count]).new_run("count to two")
    events = EventLog(run)
    await run.run()

    assert [(p.name, p.progress, p.total, p.message) for p in events.of(ToolProgress)] == [
        ("count", 1, 2, "at 1"),
        ("count", 2, 2, "at 2"),
    ]


def test_text_is_used_and_other_content_is_described_briefly() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="hello"),
            ImageContent(data="A" * 400, mime_type="image/png"),
            ResourceLink(name="report", uri="https://example.com/r.pdf"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="inside")),
            EmbeddedResource(
                resource=BlobResourceContents(uri="file:///b.bin", blob="QUJD", mime_type=None)
            ),
        ]
    )
    assert result_text(result) == (
        "hello\n"
        "[image, image/png, 300 bytes: not shown]\n"
        "[resource link: report https://example.com/r.pdf]\n"
        "[resource file:///a.txt]\ninside\n"
        "[resource file:///b.bin, binary, 3 bytes: not shown]"
    )
    structured = CallToolResult(content=[], structured_content={"n": 1})
    assert result_text(structured) == '{"n": 1}'
