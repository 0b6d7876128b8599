"""Traces as a collector receives them: the real OTLP/HTTP exporter, configured from the
``OTEL_*`` settings, sends to a receiver on loopback that decodes the protobuf
(tests/fakes/otlp_receiver.py); the model is llmock. What is checked is what an operator
would read in Jaeger or Tempo: one trace per run, why it ended, which spans are errors."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import tracemalloc
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.models.api import ModelAPI
from agent_core.process import tracing
from agent_core.run.agent import Agent
from agent_core.run.config import AgentConfig
from agent_core.testing import HandApprovals, ScriptedChatModel, ScriptedTurn
from agent_core.tools.toolbox import tool
from agent_core.values.approvals import ApprovalStatus
from agent_core.values.budget import BudgetLimits
from agent_core.values.events import ApprovalRequested, RunEvent, TextDelta, ToolStarted
from agent_core.values.stop import StopReason
from tests.agent_core.helpers import FIRST_TEXT_CHUNK, EventLog
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from agent_core.run.loop import Run
    from tests.agent_core.helpers import AgentFactory

ROOT = "invoke_agent threadpilot"
ERROR, UNSET = 2, 0
CLIENT = 3


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    found = OtlpReceiver()
    await found.start()
    assert tracing.configure_tracing(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": found.url, "OTEL_SERVICE_NAME": "threadpilot-test"}
    )
    yield found
    await tracing.shutdown_tracing()
    await found.close()


def on_first(run: Run, kind: type, action: object) -> None:
    fired = False

    def listener(event: RunEvent) -> None:
        nonlocal fired
        if not fired and isinstance(event, kind):
            fired = True
            action()  # type: ignore[operator]

    run.events.add_listener(listener)


def stall_after(pieces: int, seconds: float = 30.0) -> StreamFault:
    after = FIRST_TEXT_CHUNK[ModelAPI.OPENAI_CHAT] + pieces
    return StreamFault("stall", after_chunks=after, stall_seconds=seconds)


async def sent(receiver: OtlpReceiver, roots: int = 1) -> list[ReceivedSpan]:
    """Flush (as the app does at shutdown) and wait until ``roots`` root spans arrived."""
    assert await tracing.flush_traces()
    return await receiver.until(lambda s: sum(x.name == ROOT for x in s) >= roots)


def only(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (found,) = [s for s in spans if s.name == name and (name != ROOT or not s.parent_span_id)]
    return found


def named(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_ns)


async def test_a_run_stopped_mid_stream_arrives_as_one_trace_that_says_why(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    llm.add(
        Reply(text="Checking the forecast now.", tool_calls=(ToolCall("lookup", {"c": "Oslo"}),)),
        stall_after(1, seconds=0.3),
    )
    llm.reply("Stopped before looking anything up.")
    run = make_agent().new_run("Weather in Oslo?")
    on_first(run, TextDelta, lambda: run.request_stop(StopReason.STOP, "U1"))
    await run.run()

    spans = await sent(receiver)
    root = only(spans, ROOT)
    assert root.service == "threadpilot-test"
    assert root.status_code == UNSET
    assert root.attributes["threadpilot.run.ended_because"] == "user_exit"
    assert root.attributes["threadpilot.run.exit_code"] == "EXIT-USER-STOP"
    assert root.attributes["threadpilot.run.outcome"] == "userinterlude"
    assert root.attributes["gen_ai.provider.name"] == "openai"
    assert root.attributes["gen_ai.conversation.id"] == str(run.thread)
    assert [name for name, _ in root.events] == ["threadpilot.stop", "threadpilot.stop_honoured"]
    first, final = named(spans, "chat ")
    assert {first.trace_id, final.trace_id} == {root.trace_id}
    assert first.kind == final.kind == CLIENT
    assert first.parent_span_id == final.parent_span_id == root.span_id
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first.attributes["gen_ai.usage.output_tokens"] > 0
    assert final.attributes["threadpilot.turn.final"] is True
    assert final.attributes["threadpilot.turn.final_reason"] == "user_stop"


async def test_an_aborted_run_sends_its_chat_span_in_flight_ended_and_not_an_error(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    llm.add(Reply(text="A long answer that never ends"), stall_after(1))
    run = make_agent().new_run("Write it all")
    on_first(run, TextDelta, lambda: run.request_stop(StopReason.ABORT, "U1"))
    await run.run()

    spans = await sent(receiver)
    root = only(spans, ROOT)
    assert root.status_code == UNSET
    assert root.attributes["threadpilot.run.ended_because"] == "user_exit"
    assert root.attributes["threadpilot.run.exit_code"] == "EXIT-USER-ABORT"
    assert "threadpilot.abort" in [name for name, _ in root.events]
    (chat,) = named(spans, "chat ")
    assert chat.status_code == UNSET
    assert chat.attributes["threadpilot.cancelled"] is True
    assert 0 < chat.end_ns <= root.end_ns


async def test_a_429_then_success_is_two_requests_and_a_run_that_is_not_an_error(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    llm.rate_limit(retry_after=0.01)
    llm.reply("Fine now.")
    await make_agent().new_run("Hello").run()

    spans = await sent(receiver)
    root = only(spans, ROOT)
    assert root.status_code == UNSET
    assert root.attributes["threadpilot.run.ended_because"] == "completed"
    refused, answered = named(spans, "chat ")
    assert refused.status_code == ERROR and refused.attributes["error.type"] == "429"
    assert answered.status_code == UNSET
    retry = dict(root.events)["threadpilot.retry"]
    assert retry["threadpilot.retry.attempt"] == 1


async def test_rate_limits_that_end_the_run_make_it_an_error(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    llm.rate_limit(retry_after=0.01, times=4)  # every attempt the retry policy allows
    result = await make_agent().new_run("Hello").run()
    assert result.ended_because.value == "rate_limit"

    spans = await sent(receiver)
    root = only(spans, ROOT)
    assert root.status_code == ERROR
    assert root.attributes["error.type"] == "rate_limit"
    assert root.attributes["threadpilot.run.ended_because"] == "rate_limit"
    refused = named(spans, "chat ")
    assert len(refused) == 4
    assert {(s.status_code, s.attributes["error.type"]) for s in refused} == {(ERROR, "429")}
    assert [name for name, _ in root.events].count("threadpilot.retry") == 3


async def test_a_spent_token_budget_is_an_event_and_the_run_is_not_an_error(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    @tool
    async def noop() -> str:
        """Do nothing."""
        return "done"

    llm.call_tool("noop")
    llm.call_tool(
        "final_report",
        {"outcome": "blocked", "evidence": "Budget.", "artifacts": [], "handoff": "More."},
    )
    config = AgentConfig(budget=BudgetLimits(tokens=10))
    await make_agent([noop], config=config).new_run("Work").run()

    spans = await sent(receiver)
    root = only(spans, ROOT)
    assert root.status_code == UNSET
    assert root.attributes["threadpilot.run.ended_because"] == "budget_exhausted"
    spent = dict(root.events)["threadpilot.budget_spent"]
    assert spent["threadpilot.budget"] == "tokens"
    assert spent["threadpilot.budget.limit"] == "10"
    assert spent["threadpilot.budget.spent"].endswith("tokens")
    assert named(spans, "chat ")[-1].attributes["threadpilot.turn.final_reason"] == "budget"


async def test_an_approval_wait_is_a_span_under_its_call_with_the_decision(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    @tool
    async def deploy() -> str:
        """Deploy."""
        return "deployed"

    held = dataclasses.replace(deploy, needs_approval=True)
    approvals = HandApprovals()
    llm.call_tool("deploy")
    llm.reply("Deployed.")
    run = make_agent([held], approvals=approvals).new_run("Deploy")
    log = EventLog(run)
    task = asyncio.create_task(run.run())
    asked = await log.first(ApprovalRequested)
    approvals.decide(asked.request.id, ApprovalStatus.DENIED, by="<@U2>")
    await task

    spans = await sent(receiver)
    call = only(spans, "execute_tool deploy")
    wait = only(spans, "threadpilot.approval")
    assert wait.parent_span_id == call.span_id
    assert wait.attributes["threadpilot.approval.decision"] == "denied"
    assert call.attributes["gen_ai.tool.call.id"] == asked.request.call_id


async def test_a_sub_agent_is_a_root_under_its_delegate_call_in_the_same_trace(
    llm: LLMock, make_agent: AgentFactory, receiver: OtlpReceiver
) -> None:
    llm.call_tool("delegate", {"task": "Find the release date", "tools": []})
    llm.reply("It is on the 3rd.")  # the child's answer
    llm.reply("The release is on the 3rd.")
    run = make_agent().new_run("When is the release?")
    log = EventLog(run)
    await run.run()
    assert log.of(ToolStarted)

    spans = await sent(receiver, roots=2)
    parent = only(spans, ROOT)
    delegate = only(spans, "execute_tool delegate")
    (child,) = [s for s in spans if s.name == ROOT and s.parent_span_id]
    assert child.parent_span_id == delegate.span_id
    assert delegate.parent_span_id == parent.span_id
    assert child.trace_id == parent.trace_id
    assert child.attributes["threadpilot.run.ended_because"] == "completed"


async def test_with_the_sdk_disabled_nothing_is_sent(llm: LLMock, make_agent: AgentFactory) -> None:
    receiver = OtlpReceiver()
    await receiver.start()
    try:
        settings = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SDK_DISABLED": "true"}
        assert tracing.configure_tracing(settings) is False
        llm.reply("Hello.")
        await make_agent().new_run("Hi").run()
        assert await tracing.flush_traces() is False  # nothing to flush
    finally:
        await receiver.close()
    assert receiver.requests == 0


async def test_a_receiver_that_is_down_does_not_touch_the_run(
    llm: LLMock, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")  # its retries end with the test
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert tracing.configure_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    try:
        for _ in range(3):
            llm.reply("Still answering.")
            result = await make_agent().new_run("Hi").run()
            assert result.ended_because.value == "completed"
        await tracing.flush_traces(0.2)  # bounded, whatever the exporter is doing
    finally:
        await tracing.shutdown_tracing(2.0)


async def test_with_the_receiver_down_tracing_memory_stays_flat_over_200_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the exporter cannot send is dropped once its queue is full (the SDK's
    ``OTEL_BSP_MAX_QUEUE_SIZE``, small here so 200 runs overflow it): what tracing holds
    after 200 runs is what it held after 100."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "32")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert tracing.configure_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})

    async def runs(count: int) -> None:
        for _ in range(count):
            model = ScriptedChatModel().add(
                ScriptedTurn(tool_calls=(("noop", {}),)), ScriptedTurn("Done.")
            )
            result = await Agent(model, [noop]).new_run("Work").run()
            assert result.ended_because.value == "completed"

    held = [tracemalloc.Filter(True, "*opentelemetry*"), tracemalloc.Filter(True, "*tracing*")]
    tracemalloc.start()
    try:
        await runs(100)
        before = tracemalloc.take_snapshot().filter_traces(held)
        await runs(100)
        after = tracemalloc.take_snapshot().filter_traces(held)
    finally:
        tracemalloc.stop()
        await tracing.shutdown_tracing(2.0)
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"tracing held {grown} more bytes after 100 more runs"


@tool
async def noop() -> str:
    """Do nothing."""
    return "done"
