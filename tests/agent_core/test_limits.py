"""Forced final turns (max turns, context, retries) and how model failures are retried."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault

from agent_core.models.retry import RetryPolicy
from agent_core.run.config import AgentConfig
from agent_core.tools.toolbox import tool
from agent_core.values.ended import EndedBecause
from agent_core.values.events import Retrying, StepRestarted
from agent_core.values.outcomes import ExitCode, Outcome
from tests.agent_core.helpers import EventLog, offered_tools, system_messages

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02)


@tool
def step() -> str:
    """Take one step."""
    return "stepped"


async def test_max_turns_forces_a_final_turn(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.call_tool("step", times=2)
    llm.call_tool(
        "final_report",
        {
            "outcome": "blocked",
            "evidence": "Two of five steps done.",
            "artifacts": [],
            "handoff": "Reply in the thread to continue with step three.",
        },
    )
    agent = make_agent([step], config=AgentConfig(max_turns=2))
    result = await agent.new_run("take five steps").run()

    assert len(llm.requests) == 3
    final = llm.requests[-1]
    assert offered_tools(final) == ["final_report"]
    # Not merely offered: the model must answer with it.
    assert (final.body or {}).get("tool_choice") == {
        "type": "function",
        "function": {"name": "final_report"},
    }
    assert "every turn" in system_messages(final)[-1]
    assert result.exit_code is ExitCode.MAX_TURNS
    assert result.outcome is Outcome.BLOCKED
    assert result.handoff.evidence == "Two of five steps done."
    assert result.turns == 3


async def test_a_nearly_full_context_forces_a_final_turn(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("step")
    llm.reply("Summary of what was done so far.")
    # The system prompt alone is far beyond 90 % of a 60-token window.
    agent = make_agent([step], config=AgentConfig(context_window=60))
    result = await agent.new_run("work").run()

    assert len(llm.requests) == 2
    assert "context window" in system_messages(llm.requests[-1])[-1]
    assert result.exit_code is ExitCode.TOKEN_LIMIT
    assert result.outcome is Outcome.BLOCKED
    assert result.handoff.evidence == "Summary of what was done so far."


async def test_exhausted_retries_force_a_final_turn(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.call_tool("step")
    agent = make_agent([step], config=AgentConfig(retry=FAST_RETRY))
    run = agent.new_run("work")
    events = EventLog(run)
    from agent_core.values.events import ToolStarted

    def break_the_endpoint(event: object) -> None:
        if isinstance(event, ToolStarted):
            llm.fail(503, times=3)

    run.events.add_listener(break_the_endpoint)
    result = await run.run()

    statuses = [r.status for r in llm.requests]
    assert statuses == [200, 503, 503, 503, 200]
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert len(events.of(Retrying)) == 2
    assert result.exit_code is ExitCode.MAX_RETRIES
    assert result.outcome is Outcome.FAILED


async def test_exhausted_retries_and_a_failing_final_turn_still_end_the_run(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    # Rate limits end without a final turn (test_rate_limit_ending.py); other failures
    # still take one, and its own failure still ends the run.
    llm.fail(503, times=4)
    agent = make_agent(config=AgentConfig(retry=FAST_RETRY))
    result = await agent.new_run("work").run()

    assert [r.status for r in llm.requests] == [503, 503, 503, 503]
    assert result.exit_code is ExitCode.MAX_RETRIES
    assert result.outcome is Outcome.FAILED
    assert result.ended_because is EndedBecause.ERROR
    assert "503" in (result.error or "")


async def test_retry_after_is_honoured(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.rate_limit(retry_after=0.3)
    llm.reply("ok")
    result = await make_agent().new_run("hi").run()

    first, second = llm.requests
    assert result.outcome is Outcome.FINISHED
    assert second.started_at - first.ended_at >= 0.3
    llm.assert_resilient()


async def test_a_stalled_stream_is_closed_and_retried(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(Reply(text="one two three four"), StreamFault("stall", after_chunks=2))
    llm.reply("fresh answer")
    agent = make_agent(config=AgentConfig(retry=FAST_RETRY), idle_timeout_s=0.3)
    run = agent.new_run("hi")
    events = EventLog(run)
    result = await run.run()

    stalled, retried = llm.requests
    assert not stalled.completed and stalled.stall_waited is not None
    assert stalled.stall_waited < 5
    assert retried.completed
    assert len(events.of(StepRestarted)) == 1
    assert result.final_text == "fresh answer"


async def test_a_truncated_stream_is_never_accepted(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.add(Reply(text="half an ans"), StreamFault("truncate", after_chunks=2))
    llm.reply("the whole answer")
    agent = make_agent(config=AgentConfig(retry=FAST_RETRY))
    result = await agent.new_run("hi").run()

    assert len(llm.requests) == 2
    assert result.final_text == "the whole answer"
    llm.assert_resilient()


async def test_a_dropped_connection_is_retried(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.add(Reply(text="one two three"), StreamFault("disconnect", after_chunks=1))
    llm.reply("second try")
    agent = make_agent(config=AgentConfig(retry=FAST_RETRY))
    result = await agent.new_run("hi").run()

    assert result.final_text == "second try"
    assert len(llm.requests) == 2
