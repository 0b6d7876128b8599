"""The loop without interruptions: answers, tools, reports, questions, model errors."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core.models.api import ModelAPI
from agent_core.stores.memory import MemoryStore
from agent_core.tools.toolbox import tool
from agent_core.values.events import ToolFinished, ToolStarted, TurnFinished
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.states import RunState
from tests.agent_core.helpers import EventLog, offered_tools, tool_results

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

pytestmark = pytest.mark.parametrize("model_api", list(ModelAPI))  # every scenario, every API


async def test_plain_answer_finishes_without_softeners(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.reply("The build is green: see https://ci.example/run/42. If you want, I can rerun it.")
    result = await make_agent().new_run("Is the build green?").run()

    assert result.outcome is Outcome.FINISHED
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert result.final_text == "The build is green: see https://ci.example/run/42."
    assert result.handoff.artifacts == ("https://ci.example/run/42",)
    assert result.turns == 1
    assert result.stop_reason is None
    assert result.process_status == 0


async def test_tool_results_are_fed_back_and_usage_counted(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    seen: list[str] = []

    @tool
    async def lookup(city: str) -> str:
        """Look up the weather."""
        seen.append(city)
        return f"21C in {city}"

    llm.call_tool("lookup", {"city": "Paris"})
    llm.reply("It is 21C in Paris.")
    run = make_agent([lookup]).new_run("Weather in Paris?")
    events = EventLog(run)
    result = await run.run()

    assert seen == ["Paris"]
    assert result.outcome is Outcome.FINISHED
    assert result.turns == 2
    assert result.usage.total_tokens > 0
    replies = [e.reply for e in events.of(TurnFinished)]  # each reply's own usage
    assert len(replies) == 2 and all(r.completion_tokens > 0 for r in replies)
    assert replies[0] + replies[1] == result.usage
    assert tool_results(llm.requests[1]) == ["21C in Paris"]
    assert offered_tools(llm.requests[0]) == ["lookup", "delegate", "final_report", "ask_user"]


async def test_parallel_tool_calls_run_concurrently(llm: LLMock, make_agent: AgentFactory) -> None:
    both_started = asyncio.Event()
    running = 0

    @tool
    async def probe(name: str) -> str:
        """Wait until both probes run at once: proves they are concurrent."""
        nonlocal running
        running += 1
        if running == 2:
            both_started.set()
        async with asyncio.timeout(5):
            await both_started.wait()
        return f"probed {name}"

    llm.add(Reply(tool_calls=(ToolCall("probe", {"name": "a"}), ToolCall("probe", {"name": "b"}))))
    llm.reply("done")
    run = make_agent([probe]).new_run("probe both")
    events = EventLog(run)
    result = await run.run()

    assert result.outcome is Outcome.FINISHED
    assert sorted(e.output for e in events.of(ToolFinished)) == ["probed a", "probed b"]
    assert len(events.of(ToolStarted)) == 2


async def test_a_tool_that_raises_gives_the_model_an_error(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    @tool
    def explode() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    llm.call_tool("explode")
    llm.reply("The tool failed; reporting that.")
    result = await make_agent([explode]).new_run("try it").run()

    assert result.outcome is Outcome.FINISHED
    assert tool_results(llm.requests[1]) == ["error: explode raised RuntimeError: disk on fire"]


async def test_malformed_tool_json_is_reported_to_the_model(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    calls: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count."""
        calls.append(n)
        return n

    # The first answer calls one of the offered tools with arguments that are not JSON.
    llm.break_tool_call("malformed_arguments")
    result = await make_agent([count]).new_run("count").run()

    assert result.outcome is Outcome.FINISHED
    assert calls == []
    (error,) = tool_results(llm.requests[1])
    assert error.startswith("error: ")
    assert "valid JSON" in error


async def test_arguments_that_do_not_fit_the_signature_are_reported(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    calls: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count."""
        calls.append(n)
        return n

    llm.call_tool("count", {"n": "not a number"})
    result = await make_agent([count]).new_run("count").run()

    assert result.outcome is Outcome.FINISHED
    assert calls == []
    (error,) = tool_results(llm.requests[1])
    assert error.startswith("error: invalid arguments for count: n:")


async def test_final_report_sets_the_outcome_and_handoff(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool(
        "final_report",
        {
            "outcome": "blocked",
            "evidence": "The deploy key is missing from the vault.",
            "artifacts": ["PR #12"],
            "handoff": "@ops adds the deploy key. Would you like me to continue?",
        },
    )
    store = MemoryStore()
    result = await make_agent(store=store).new_run("deploy").run()

    assert result.outcome is Outcome.BLOCKED
    assert result.handoff.evidence == "The deploy key is missing from the vault."
    assert result.handoff.artifacts == ("PR #12",)
    assert result.handoff.next_step == "@ops adds the deploy key."
    stored = await store.get_run(result.run_id)
    assert stored is not None
    assert stored.state is RunState.BLOCKED
    assert stored.result is not None and stored.result["outcome"] == "blocked"


async def test_ask_user_ends_with_the_question(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.call_tool("ask_user", {"question": "Which environment, staging or prod?"})
    result = await make_agent().new_run("deploy it").run()

    assert result.outcome is Outcome.ASK_USER_QUESTION
    assert result.handoff.question == "Which environment, staging or prod?"
    assert "staging or prod" in result.handoff.next_step


async def test_a_bad_request_fails_without_retrying(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.fail(401)
    result = await make_agent().new_run("hello").run()

    assert result.outcome is Outcome.FAILED
    assert result.exit_code is ExitCode.ERROR
    assert result.process_status == 1
    assert len(llm.requests) == 1
    assert "401" in (result.error or "")


async def test_the_event_stream_yields_every_event_and_ends_with_the_result(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    from agent_core.values.events import RunFinished, TextDelta, TurnStarted

    llm.reply("streamed words")
    run = make_agent().new_run("say it")
    received: list[object] = []

    async def consume() -> None:
        async for event in run.events.subscribe():
            received.append(event)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)  # one loop turn: the subscriber registers before the run starts
    result = await run.run()
    async with asyncio.timeout(5):
        await consumer  # ends by itself after RunFinished

    assert isinstance(received[0], TurnStarted)
    assert "".join(e.text for e in received if isinstance(e, TextDelta)) == "streamed words"
    assert received[-1] == RunFinished(run.id, result)
