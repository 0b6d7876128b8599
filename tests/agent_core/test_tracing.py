"""Traces of runs (agent_core/process/tracing/), read from the SDK's in-memory exporter:
one root per run with why it ended, a chat span per request, a tool span per call, and
which endings are errors (only failures, lost workers and rate limits that ended the run)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agent_core.models.retry import RetryPolicy
from agent_core.process import tracing
from agent_core.run.agent import Agent
from agent_core.run.config import AgentConfig
from agent_core.stores.memory import MemoryStore
from agent_core.testing import HandApprovals, ScriptedChatModel, ScriptedTurn
from agent_core.tools.toolbox import Tool, tool
from agent_core.values.approvals import ApprovalStatus
from agent_core.values.budget import BudgetLimits
from agent_core.values.chat import ModelResponse, Usage
from agent_core.values.ended import EndedBecause
from agent_core.values.errors import ConfigError, FatalModelError, RateLimited
from agent_core.values.events import ApprovalRequested, TextDelta
from agent_core.values.guidance import Guidance
from agent_core.values.records import ThreadKey
from agent_core.values.stop import StopReason
from tests.agent_core.helpers import EventLog

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agent_core.ports import TextSink
    from agent_core.values.chat import ModelRequest

ROOT = "invoke_agent threadpilot"
FAST = RetryPolicy(max_attempts=2, base_delay_s=0.001, max_delay_s=0.001)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    yield exporter
    tracing.reset_tracing()
    provider.shutdown()


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def root_of(exporter: InMemorySpanExporter) -> ReadableSpan:
    roots = [s for s in finished(exporter) if s.name == ROOT and s.parent is None]
    assert len(roots) == 1
    return roots[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def events_of(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


class NamedModel(ScriptedChatModel):
    """The scripted model, named as an adapter is (its API and model)."""

    api = "openai-chat"
    model = "gpt-test"


@dataclasses.dataclass
class FailingModel:
    """Refuses every request with ``error``, then answers once ``after`` refusals."""

    error: Exception
    after: int | None = None
    calls: int = 0
    api: str = "anthropic"
    model: str = "claude-test"

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        self.calls += 1
        if self.after is None or self.calls <= self.after:
            raise self.error
        return ModelResponse("ok", (), "stop", Usage(10, 2))


def agent(
    model: Any, tools: tuple[Tool, ...] = (), approvals: HandApprovals | None = None, **config: Any
) -> Agent:
    return Agent(model, tools, config=AgentConfig(retry=FAST, **config), approvals=approvals)


async def test_a_completed_run_is_one_trace_with_a_chat_span_per_request(
    spans: InMemorySpanExporter,
) -> None:
    @tool
    async def lookup(city: str) -> str:
        """Look up the weather."""
        return f"21C in {city}"

    model = NamedModel().add(ScriptedTurn(tool_calls=(("lookup", {"city": "Paris"}),)))
    model.add(ScriptedTurn("It is 21C in Paris."))
    thread = ThreadKey("T1", "C1", "1700000000.000100")
    result = await agent(model, (lookup,)).new_run("Weather?", thread=thread).run()

    root = root_of(spans)
    assert root.kind is SpanKind.INTERNAL
    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root) | {} == attrs(root)
    a = attrs(root)
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.agent.name"] == "threadpilot"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "gpt-test"
    assert a["gen_ai.conversation.id"] == "T1/C1/1700000000.000100"
    assert a["threadpilot.run.ended_because"] == "completed"
    assert a["threadpilot.run.exit_code"] == "EXIT-FINAL-ANSWER"
    assert a["threadpilot.run.outcome"] == "finished"
    assert a["threadpilot.run.turns"] == 2
    assert a["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == result.usage.completion_tokens

    chats = [s for s in finished(spans) if s.name == "chat gpt-test"]
    assert [attrs(c)["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_calls",),
        ("stop",),
    ]
    assert all(c.kind is SpanKind.CLIENT and c.parent is not None for c in chats)
    assert all(c.parent and c.parent.span_id == root.context.span_id for c in chats)
    assert [attrs(c)["threadpilot.turn.final"] for c in chats] == [False, False]
    (call,) = [s for s in finished(spans) if s.name == "execute_tool lookup"]
    assert attrs(call)["gen_ai.tool.name"] == "lookup"
    assert attrs(call)["gen_ai.tool.call.id"] == "call_1_0"
    assert {s.context.trace_id for s in finished(spans)} == {root.context.trace_id}
    # No content unless asked for.
    assert not any("gen_ai.input.messages" in attrs(s) for s in finished(spans))


async def test_the_run_row_keeps_its_trace_context(spans: InMemorySpanExporter) -> None:
    store = MemoryStore()
    model = NamedModel()
    run = Agent(model, config=AgentConfig(retry=FAST), store=store).new_run("Hi")
    await run.run()

    root = root_of(spans)
    record = await store.get_run(run.id)
    assert record is not None
    ctx = root.context
    flags = int(ctx.trace_flags)
    assert record.trace_context == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"


async def test_a_resumed_run_is_a_new_trace_linked_to_the_first(
    spans: InMemorySpanExporter,
) -> None:
    first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await agent(NamedModel()).new_run("Hi", trace_links=[first]).run()

    root = root_of(spans)
    assert root.context.trace_id != 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert [(link.context.trace_id, link.context.span_id) for link in root.links] == [
        (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
    ]


async def stopped_mid_stream(reason: StopReason, spans: InMemorySpanExporter) -> ReadableSpan:
    hold = asyncio.Event()
    model = NamedModel().add(
        ScriptedTurn("Working on it slowly", tool_calls=(("nothing", {}),), hold=hold)
    )
    run = agent(model).new_run("Do it")
    log = EventLog(run)
    task = asyncio.create_task(run.run())
    await log.first(TextDelta)
    run.request_stop(reason, "U1")
    hold.set()
    result = await task
    assert result.stop_reason is reason
    return root_of(spans)


async def test_a_stop_ends_with_a_final_turn_and_is_not_an_error(
    spans: InMemorySpanExporter,
) -> None:
    root = await stopped_mid_stream(StopReason.STOP, spans)

    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "user_exit"
    assert attrs(root)["threadpilot.run.exit_code"] == "EXIT-USER-STOP"
    assert events_of(root)[:2] == ["threadpilot.stop", "threadpilot.stop_honoured"]
    assert root.events[0].attributes == {
        "threadpilot.stop.requested_by": "U1",
        "threadpilot.stop.source": "local",
    }
    final = [s for s in finished(spans) if attrs(s).get("threadpilot.turn.final")]
    assert [attrs(s)["threadpilot.turn.final_reason"] for s in final] == ["user_stop"]


async def test_an_abort_ends_the_chat_span_in_flight_without_an_error(
    spans: InMemorySpanExporter,
) -> None:
    root = await stopped_mid_stream(StopReason.ABORT, spans)

    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "user_exit"
    assert attrs(root)["threadpilot.run.exit_code"] == "EXIT-USER-ABORT"
    assert "threadpilot.abort" in events_of(root)
    (chat,) = [s for s in finished(spans) if s.name.startswith("chat ")]
    assert chat.status.status_code is StatusCode.UNSET
    assert attrs(chat)["threadpilot.cancelled"] is True
    assert chat.end_time is not None and root.end_time is not None
    assert chat.end_time <= root.end_time


async def test_a_shutdown_is_not_an_error(spans: InMemorySpanExporter) -> None:
    root = await stopped_mid_stream(StopReason.SHUTDOWN, spans)

    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "shutdown"
    assert "threadpilot.shutdown" in events_of(root)


async def test_guidance_delivered_is_an_event_on_the_root(spans: InMemorySpanExporter) -> None:
    hold = asyncio.Event()
    model = NamedModel().add(ScriptedTurn("Looking at Oslo", hold=hold), ScriptedTurn("Bergen."))
    run = agent(model).new_run("Weather?")
    log = EventLog(run)
    task = asyncio.create_task(run.run())
    await log.first(TextDelta)
    run.add_guidance(Guidance(id="g1", author="U2", text="Bergen, please."))
    hold.set()
    await task

    root = root_of(spans)
    (delivered,) = [e for e in root.events if e.name == "threadpilot.guidance_delivered"]
    assert delivered.attributes == {"threadpilot.turn": 2, "threadpilot.guidance.count": 1}
    assert attrs(root)["threadpilot.run.ended_because"] == "completed"


async def test_a_spent_token_budget_is_an_event_and_not_an_error(
    spans: InMemorySpanExporter,
) -> None:
    model = NamedModel().add(ScriptedTurn("a b c", tool_calls=(("nothing", {}),)))
    budget = BudgetLimits(tokens=5)
    await agent(model, budget=budget).new_run("Work " * 40).run()

    root = root_of(spans)
    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "budget_exhausted"
    assert "threadpilot.budget_spent" in events_of(root)
    final = [s for s in finished(spans) if attrs(s).get("threadpilot.turn.final")]
    assert [attrs(s)["threadpilot.turn.final_reason"] for s in final] == ["budget"]


async def test_a_full_context_is_an_event_and_not_an_error(spans: InMemorySpanExporter) -> None:
    model = NamedModel().add(ScriptedTurn("a b c", tool_calls=(("nothing", {}),)))
    await agent(model, context_window=10).new_run("Work " * 40).run()

    root = root_of(spans)
    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "context_exhausted"
    assert "threadpilot.context_full" in events_of(root)


async def test_the_turn_limit_ends_the_run_unknown_and_not_an_error(
    spans: InMemorySpanExporter,
) -> None:
    model = NamedModel().add(ScriptedTurn("a", tool_calls=(("nothing", {}),)))
    await agent(model, max_turns=1).new_run("Loop").run()

    root = root_of(spans)
    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "unknown"
    assert attrs(root)["threadpilot.run.exit_code"] == "EXIT-MAX-TURNS"


async def test_a_rate_limit_that_ended_the_run_is_an_error(spans: InMemorySpanExporter) -> None:
    model = FailingModel(RateLimited("HTTP 429: slow down", retry_after=0.001))
    result = await agent(model).new_run("Hello").run()

    assert result.ended_because is EndedBecause.RATE_LIMIT
    root = root_of(spans)
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)["error.type"] == "rate_limit"
    assert attrs(root)["gen_ai.provider.name"] == "anthropic"
    chats = [s for s in finished(spans) if s.name == "chat claude-test"]
    assert len(chats) == 2  # one span per request: the first attempt and its retry
    assert all(attrs(c)["error.type"] == "429" for c in chats)
    assert "threadpilot.retry" in events_of(root)


async def test_a_429_then_success_leaves_the_run_unerrored(spans: InMemorySpanExporter) -> None:
    model = FailingModel(RateLimited("HTTP 429: slow down", retry_after=0.001), after=1)
    await agent(model).new_run("Hello").run()

    root = root_of(spans)
    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["threadpilot.run.ended_because"] == "completed"
    first, second = sorted(
        (s for s in finished(spans) if s.name.startswith("chat ")), key=lambda s: s.start_time or 0
    )
    assert first.status.status_code is StatusCode.ERROR
    assert second.status.status_code is StatusCode.UNSET
    assert events_of(root) == ["threadpilot.retry"]


async def test_a_failure_is_an_error_with_its_type(spans: InMemorySpanExporter) -> None:
    await agent(FailingModel(FatalModelError("HTTP 401: bad key", status=401))).new_run("Hi").run()

    root = root_of(spans)
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)["threadpilot.run.ended_because"] == "error"
    assert attrs(root)["error.type"] == "error"
    (chat,) = [s for s in finished(spans) if s.name.startswith("chat ")]
    assert attrs(chat)["error.type"] == "401"


async def test_a_sub_agent_traces_under_its_delegate_call(spans: InMemorySpanExporter) -> None:
    model = NamedModel().add(
        ScriptedTurn(tool_calls=(("delegate", {"task": "look it up", "tools": []}),)),
        ScriptedTurn("Child's answer."),
        ScriptedTurn("Parent's answer."),
    )
    await agent(model).new_run("Delegate").run()

    roots = [s for s in finished(spans) if s.name == ROOT]
    assert len(roots) == 2
    (delegate,) = [s for s in finished(spans) if s.name == "execute_tool delegate"]
    (child,) = [r for r in roots if r.parent is not None]
    assert child.parent is not None and child.parent.span_id == delegate.context.span_id
    assert child.context.trace_id == delegate.context.trace_id


async def test_an_approval_wait_is_a_child_of_its_tool_span(spans: InMemorySpanExporter) -> None:
    @tool(name="deploy")
    async def deploy() -> str:
        """Deploy."""
        return "deployed"

    held = dataclasses.replace(deploy, needs_approval=True)
    approvals = HandApprovals()
    model = NamedModel().add(ScriptedTurn(tool_calls=(("deploy", {}),)), ScriptedTurn("Done."))
    run = agent(model, (held,), approvals=approvals).new_run("Deploy")
    log = EventLog(run)
    task = asyncio.create_task(run.run())
    asked = await log.first(ApprovalRequested)
    approvals.decide(asked.request.id, ApprovalStatus.APPROVED, by="<@U2>")
    await task

    (call,) = [s for s in finished(spans) if s.name == "execute_tool deploy"]
    (wait,) = [s for s in finished(spans) if s.name == "threadpilot.approval"]
    assert wait.parent is not None and wait.parent.span_id == call.context.span_id
    assert attrs(wait)["threadpilot.approval.decision"] == "approved"
    assert attrs(wait)["threadpilot.approval.decided_by"] == "<@U2>"


async def test_content_is_captured_only_when_asked_and_redacted(
    spans: InMemorySpanExporter,
) -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider, capture_content=True)
    model = NamedModel().add(ScriptedTurn("Your key is sk-proj-abcdefghijklmnopqrstuvwxyz123456"))
    await agent(model).new_run("Say hello").run()

    (chat,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert "Say hello" in attrs(chat)["gen_ai.input.messages"]
    output = attrs(chat)["gen_ai.output.messages"]
    assert "Your key is" in output and "abcdefghijklmnop" not in output


async def test_without_an_endpoint_nothing_is_loaded_and_runs_are_untraced() -> None:
    tracing.reset_tracing()
    assert tracing.configure_tracing({}) is False
    assert (
        tracing.configure_tracing(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}
        )
        is False
    )
    assert not tracing.tracing_enabled()
    run = agent(NamedModel()).new_run("Hi")
    assert run._trace is tracing.NO_TRACE
    await run.run()


def test_a_bad_flag_names_its_setting() -> None:
    with pytest.raises(ConfigError, match=r"^OTEL_SDK_DISABLED: must be true or false"):
        tracing.configure_tracing({"OTEL_SDK_DISABLED": "maybe"})
    with pytest.raises(ConfigError, match="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
        tracing.configure_tracing({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "x"})


def test_what_another_worker_did_is_a_span_linked_to_the_runs_trace(
    spans: InMemorySpanExporter,
) -> None:
    first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    tracing.record_elsewhere(
        "threadpilot.run_taken_over",
        first,
        {"threadpilot.run.id": "r1"},
        ended_because=EndedBecause.WORKER_LOST,
    )
    tracing.record_elsewhere("threadpilot.stop_request", first, {"threadpilot.run.id": "r1"})
    tracing.record_elsewhere("threadpilot.stop_request", None, {"threadpilot.run.id": "r2"})

    lost, stop = finished(spans)  # the untraced run's: none
    assert [link.context.trace_id for link in lost.links] == [0x4BF92F3577B34DA6A3CE929D0E0E4736]
    assert lost.status.status_code is StatusCode.ERROR
    assert attrs(lost)["error.type"] == "worker_lost"
    assert stop.status.status_code is StatusCode.UNSET
