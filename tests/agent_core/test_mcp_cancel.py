"""Stop, Abort and TOOL_TIMEOUT reach MCP calls in flight (docs/stopping.md, issue 12).

Real runs: llmock streams the tool call, our own MCP server (:mod:`tests.fakes.mcp_server`,
built with the ``mcp`` SDK) serves it over streamable HTTP on loopback and records every
cancellation it receives. Each Abort and timeout test runs under both protocol eras, pinned
by the client: the ``initialize`` handshake (2025-11-25), where the cancellation is a
``notifications/cancelled`` POST naming the request, and 2026-07-28, where it is the
request's response stream being closed (and no notification is sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core.run.config import AgentConfig
from agent_core.tools.mcp import HttpServer, McpManager
from agent_core.values.events import ToolFinished, ToolProgress
from agent_core.values.outcomes import ExitCode
from agent_core.values.stop import StopReason
from tests.agent_core.helpers import EventLog, offered_tools
from tests.agent_core.mcp_helpers import PROMPT_S
from tests.fakes.mcp_server import FakeMcpServer, serve_http

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from agent_core.tools.mcp.config import ProtocolMode
    from tests.agent_core.helpers import AgentFactory

ERAS: list[tuple[ProtocolMode, str]] = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]


@contextlib.asynccontextmanager
async def fake_server(
    protocol: ProtocolMode = "auto", fake: FakeMcpServer | None = None
) -> AsyncIterator[tuple[FakeMcpServer, McpManager]]:
    fake = fake or FakeMcpServer()
    async with serve_http(fake) as url:
        manager = McpManager([HttpServer("fake", url, protocol=protocol)])
        async with manager:
            yield fake, manager
        fake.release()  # a slow call nobody cancelled must not hold the server's shutdown


def tool_messages(llm: LLMock, request: int) -> list[str]:
    body: dict[str, Any] = llm.requests[request].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_stop_lets_the_slow_call_finish_then_takes_the_final_turn(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    async with fake_server() as (fake, manager):
        llm.call_tool("fake__slow", {"steps": 3})
        llm.reply("Stopped as asked: the slow work finished.")
        run = make_agent(manager.tools).new_run("work slowly")
        events = EventLog(run)
        async with asyncio.TaskGroup() as group:
            running = group.create_task(run.run())
            await events.first(ToolProgress)  # the call is under way on the server
            assert run.request_stop(StopReason.STOP, "U1")
            fake.release()
            result = await running

    assert fake.cancelled == []
    assert tool_messages(llm, 1) == ["slow finished 3 steps"]
    assert offered_tools(llm.requests[1]) == ["final_report"]  # the final turn
    assert len(llm.requests) == 2
    assert result.exit_code is ExitCode.USER_STOP
    assert [
        (p.call_id, p.name, p.progress, p.total, p.message) for p in events.of(ToolProgress)
    ] == [
        (events.of(ToolFinished)[0].call_id, "fake__slow", 0, 3, "waiting for the go-ahead"),
        *(
            (events.of(ToolFinished)[0].call_id, "fake__slow", s, 3, f"step {s} of 3")
            for s in (1, 2, 3)
        ),
    ]


@pytest.mark.parametrize(
    ("reason", "exit_code"),
    [(StopReason.ABORT, ExitCode.USER_ABORT), (StopReason.SHUTDOWN, ExitCode.SHUTDOWN)],
)
@pytest.mark.parametrize(("protocol", "version"), ERAS)
async def test_abort_and_shutdown_cancel_the_call_as_its_protocol_says_and_end_the_run_at_once(
    llm: LLMock,
    make_agent: AgentFactory,
    protocol: ProtocolMode,
    version: str,
    reason: StopReason,
    exit_code: ExitCode,
) -> None:
    async with fake_server(protocol) as (fake, manager):
        llm.call_tool("fake__slow", {"steps": 3})
        run = make_agent(manager.tools).new_run("work slowly")
        events = EventLog(run)
        async with asyncio.TaskGroup() as group:
            running = group.create_task(run.run())
            await events.first(ToolProgress)
            aborted = time.perf_counter()
            run.request_stop(reason, "U1")
            async with asyncio.timeout(PROMPT_S):
                result = await running
            took = time.perf_counter() - aborted

        await fake.until(lambda: fake.cancelled, "the slow call cancelled on the server")
        [call] = fake.calls
        assert call.protocol == version
        assert fake.cancelled == [call]
        if protocol == "legacy":
            await fake.until(lambda: fake.cancel_notifications, "a cancellation POSTed")
            assert fake.cancel_notifications == [call.request_id]
        else:
            assert fake.cancel_notifications == []  # the closed stream was the signal

    assert result.exit_code is exit_code
    assert took < PROMPT_S
    assert len(llm.requests) == 1


@pytest.mark.parametrize(("protocol", "version"), ERAS)
async def test_tool_timeout_cancels_the_call_and_the_model_is_told(
    llm: LLMock, make_agent: AgentFactory, protocol: ProtocolMode, version: str
) -> None:
    async with fake_server(protocol) as (fake, manager):
        llm.call_tool("fake__slow", {"steps": 1})
        llm.reply("The slow tool timed out.")
        agent = make_agent(manager.tools, config=AgentConfig(tool_timeout_s=0.5))
        result = await agent.new_run("work slowly").run()

        await fake.until(lambda: fake.cancelled, "the slow call cancelled on the server")
        [call] = fake.calls
        assert (call.protocol, fake.cancelled) == (version, [call])
        if protocol == "legacy":
            await fake.until(lambda: fake.cancel_notifications, "a cancellation POSTed")
            assert fake.cancel_notifications == [call.request_id]
        else:
            assert fake.cancel_notifications == []

    assert tool_messages(llm, 1) == ["error: fake__slow timed out after 0.5 s"]
    assert result.exit_code is ExitCode.FINAL_ANSWER


async def test_the_server_still_answers_after_a_cancelled_call(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    async with fake_server() as (_, manager):
        llm.call_tool("fake__slow", {"steps": 1})
        llm.call_tool("fake__echo", {"text": "still here"})
        llm.reply("Done.")
        agent = make_agent(manager.tools, config=AgentConfig(tool_timeout_s=0.3))
        result = await agent.new_run("work").run()

    assert tool_messages(llm, 2)[-1] == "still here"
    assert result.exit_code is ExitCode.FINAL_ANSWER


async def test_every_call_in_flight_is_cancelled_at_once_not_one_answer_after_another(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    # The server answers each cancellation POST only once all three have arrived: a client
    # that waits for one answer before sending the next (the SDK's own transport does, for
    # notifications) would leave the last two behind for seconds.
    fake = FakeMcpServer(hold_cancellations=3)
    async with fake_server("legacy", fake) as (fake, manager):
        llm.add(Reply(tool_calls=tuple(ToolCall("fake__slow", {"steps": n}) for n in (1, 2, 3))))
        run = make_agent(manager.tools).new_run("work slowly, three ways")
        events = EventLog(run)
        async with asyncio.TaskGroup() as group:
            running = group.create_task(run.run())
            await events.first(ToolProgress, lambda e: len(events.of(ToolProgress)) == 3)
            run.request_stop(StopReason.ABORT, "U1")
            async with asyncio.timeout(PROMPT_S):
                result = await running

        await fake.until(lambda: len(fake.held_together) == 3, "three cancellations answered")
        assert fake.held_together == [True, True, True]
        assert sorted(fake.cancel_notifications) == sorted(c.request_id for c in fake.calls)
        await fake.until(lambda: len(fake.cancelled) == 3, "three calls cancelled")

    assert result.exit_code is ExitCode.USER_ABORT
