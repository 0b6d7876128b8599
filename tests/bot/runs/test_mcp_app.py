"""MCP tools, ``slack_read_thread`` and sub-agents in the Slack app (docs/stopping.md).

The app runs for real (tests/bot harness) with ``MCP_CONFIG`` naming two real MCP
servers: our own (:mod:`tests.fakes.mcp_server`, over streamable HTTP in the test's loop,
with a slow tool that reports progress and records its cancellation) and
``mcp-server-time`` (written by others, over stdio). llmock streams the tool calls.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core import ConfigError
from bot.config.settings import load_settings
from tests.agent_core.helpers import offered_tools
from tests.agent_core.mcp_helpers import TIME_SERVER, children_of, until_gone
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, block_text, buttons
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot


@pytest.fixture
async def fake_url(fake: FakeMcpServer) -> AsyncIterator[str]:
    async with serve_http(fake) as url:
        yield url


def write_config(tmp_path: Path, servers: dict[str, Any]) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


@pytest.fixture
async def bot(make_bot: BotFactory, tmp_path: Path, fake_url: str) -> Bot:
    config = write_config(tmp_path, {"fake": {"url": fake_url}, "time": TIME_SERVER})
    return await make_bot(MCP_CONFIG=config)


def tool_messages(record: RequestRecord) -> list[str]:
    body: dict[str, Any] = record.body or {}
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_mcp_tools_over_http_and_stdio_answer_the_model(bot: Bot, llm: LLMock) -> None:
    llm.add(
        Reply(
            tool_calls=(
                ToolCall("time__get_current_time", {"timezone": "UTC"}),
                ToolCall("fake__echo", {"text": "hello from the fake"}),
            )
        )
    )
    llm.reply("It is a fine time, and the fake said hello.")
    _, status = await bot.mention("what time is it?")

    final = await bot.final(status)

    assert "It is a fine time" in block_text(final)
    first, second = llm.requests
    offered = offered_tools(first)
    for name in ("time__get_current_time", "fake__echo", "slack_read_thread", "delegate"):
        assert name in offered
    time_result, echo_result = tool_messages(second)
    assert json.loads(time_result)["timezone"] == "UTC"
    assert echo_result == "hello from the fake"


async def test_the_status_shows_the_mcp_progress_and_stop_lets_the_call_finish(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("fake__slow", {"steps": 2})
    llm.reply("Stopped: the slow job finished both steps.")
    _, status = await bot.mention("run the slow job")
    await bot.until(status, lambda m: "waiting for the go-ahead (0/2)" in block_text(m))

    assert await bot.click(status, ACTION_STOP) == 200
    stopping = await bot.until(status, lambda m: buttons(m) == [ACTION_ABORT])
    # Stopping, and still showing the call it waits for.
    assert "`fake__slow`: waiting for the go-ahead" in block_text(stopping)
    fake.release()
    final = await bot.final(status)

    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "Stopped: the slow job finished both steps." in text
    final_turn = llm.requests[-1]
    assert offered_tools(final_turn) == ["final_report"]
    assert tool_messages(final_turn) == ["slow finished 2 steps"]  # it completed
    assert fake.cancelled == []


async def test_abort_cancels_the_mcp_call_and_ends_the_run_at_once(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("fake__slow", {"steps": 2})
    _, status = await bot.mention("run the slow job")
    await bot.until(status, lambda m: "waiting for the go-ahead" in block_text(m))

    assert await bot.click(status, ACTION_ABORT) == 200
    final = await bot.final(status)  # the call was never let finish

    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    await fake.until(lambda: fake.cancelled, "the server to see the call cancelled")
    assert [c.tool for c in fake.cancelled] == ["slow"]
    assert len(llm.requests) == 1  # no final turn


async def test_the_status_shows_sub_agents_as_tasks(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("delegate", {"task": "Count the files in src/", "tools": ["fake__slow"]})
    llm.call_tool("fake__slow", {"steps": 1})  # the sub-agent's first turn
    llm.reply("Counted 120 files.")  # its second
    llm.reply("The sub-agent counted 120 files in src/.")  # the parent's second
    _, status = await bot.mention("how many files are in src?")

    working = await bot.until(status, lambda m: "waiting for the go-ahead" in block_text(m))
    text = block_text(working)
    assert "*Sub-agents*" in text
    assert (
        ":hourglass_flowing_sand: Count the files in src/ · turn 1: Running the tool "
        "`fake__slow`: waiting for the go-ahead (0/1)"
    ) in text
    assert "Waiting for sub-agents" in text
    fake.release()
    final = await bot.final(status)

    text = block_text(final)
    assert "The sub-agent counted 120 files in src/." in text
    assert ":white_check_mark: Count the files in src/ · Finished" in text
    child_request = llm.requests[1]
    assert offered_tools(child_request) == ["fake__slow", "final_report", "ask_user"]


async def test_slack_read_thread_reads_the_run_s_thread_newest_last(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot()
    slack = bot.slack
    parent = slack.seed_message(DEFAULT_CHANNEL, "Release checklist for 2.0")
    for i in range(60):
        slack.seed_message(DEFAULT_CHANNEL, f"note {i}", thread_ts=parent, user="U0OTHER0001")
    llm.call_tool("slack_read_thread")
    llm.reply("Read it.")
    _, status = await bot.mention("sum up this thread", thread_ts=parent)
    await bot.final(status)

    (result,) = tool_messages(llm.requests[1])
    lines = result.splitlines()
    assert lines[0] == (
        "The thread, oldest first: 50 message(s) (the newest; 12 earlier one(s) left out to fit):"
    )
    assert lines[1] == "<@U0OTHER0001>: note 11"
    assert lines[-2] == "<@U0OTHER0001>: note 59"
    assert lines[-1] == f"<@{DEFAULT_USER}>: sum up this thread"  # the mention, newest
    assert "Working" not in result and "Starting" not in result  # its own status message


async def test_shutdown_ends_the_stdio_servers(
    make_bot: BotFactory, tmp_path: Path, fake_url: str
) -> None:
    before = children_of(os.getpid())
    config = write_config(tmp_path, {"time": TIME_SERVER, "fake": {"url": fake_url}})
    bot = await make_bot(MCP_CONFIG=config)
    servers = children_of(os.getpid()) - before
    assert len(servers) == 1  # mcp-server-time

    await bot.app.shutdown()

    await until_gone(servers)


async def test_a_server_that_does_not_start_is_reported_and_the_others_serve(
    make_bot: BotFactory, tmp_path: Path, fake_url: str, llm: LLMock
) -> None:
    broken = {"command": str(tmp_path / "no-such-server")}
    config = write_config(tmp_path, {"broken": broken, "fake": {"url": fake_url}})
    bot = await make_bot(MCP_CONFIG=config)

    failed, ok = bot.app.mcp.check_lines()
    assert failed.startswith("FAIL broken: the MCP server 'broken'")
    assert ok.startswith("ok   fake: 9 tools")
    llm.reply("Fine.")
    _, status = await bot.mention("hello")
    await bot.final(status)
    offered = offered_tools(llm.requests[0])
    assert "fake__echo" in offered
    assert not [name for name in offered if name.startswith("broken__")]


def test_a_bad_mcp_config_is_one_line_naming_the_setting_and_the_file(tmp_path: Path) -> None:
    required = {
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "secret",
        "OPENAI_API_KEY": "key",
        "OPENAI_MODEL": "model",
    }
    config = write_config(tmp_path, {"wiki": {"url": "https://wiki.example/mcp", "head": {}}})
    missing = tmp_path / "missing.json"

    with pytest.raises(ConfigError) as bad:
        load_settings(_env_file=None, MCP_CONFIG=config, **required)
    with pytest.raises(ConfigError) as absent:
        load_settings(_env_file=None, MCP_CONFIG=str(missing), **required)

    assert str(bad.value) == (
        "MCP_CONFIG: server 'wiki': unknown key 'head' "
        f"(allowed: approval, headers, tools, type, url) (in {config})"
    )
    assert str(absent.value) == (f"MCP_CONFIG: cannot read {missing}: No such file or directory")
    settings = load_settings(_env_file=None, MCP_CONFIG="", **required)
    assert settings.mcp_servers == ()
