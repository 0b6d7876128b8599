"""Rate limits past the in-run retries (docs/stopping.md): the run ends ``blocked`` with
``ended_because=rate_limit`` and the provider's Retry-After, takes no doomed final turn,
checkpoints the conversation, and a resumed run continues from it. Plus why every other
kind of ending ended, as the loop classifies it."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply

from agent_core.models.api import ModelAPI
from agent_core.models.retry import RetryPolicy
from agent_core.run.config import AgentConfig
from agent_core.stores.memory import MemoryStore
from agent_core.values.ended import EndedBecause
from agent_core.values.events import Retrying, RunEvent, TextDelta, ToolStarted, TurnStarted
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.prompts import RESUMED_NOTE, resumed_note
from agent_core.values.resume_policy import ResumeAt, ResumeSettings, decide_resume
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason
from tests.agent_core.helpers import offered_tools, system_messages, tool_results
from tests.agent_core.test_stop import LONG_TEXT, noop, on_first, stall_after

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

pytestmark = pytest.mark.parametrize("model_api", list(ModelAPI))  # every scenario, every API

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02)


async def test_retries_spent_on_rate_limits_end_blocked_then_a_resume_continues(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    store = MemoryStore()
    agent = make_agent([noop], config=AgentConfig(retry=FAST_RETRY), store=store)
    llm.call_tool("noop")
    run = agent.new_run("tidy up")
    on_first(run, ToolStarted, lambda: llm.rate_limit(retry_after=0.05, times=3))
    result = await run.run()

    # Three attempts, all refused, and no final turn after them (it would be refused too).
    assert [r.status for r in llm.requests] == [200, 429, 429, 429]
    assert all(offered_tools(r) != ["final_report"] for r in llm.requests)
    assert result.outcome is Outcome.BLOCKED
    assert result.exit_code is ExitCode.MAX_RETRIES
    assert result.ended_because is EndedBecause.RATE_LIMIT
    assert result.retry_after_s == 0.05
    assert result.resume_after == result.timings.ended_at + timedelta(seconds=0.05)
    assert "rate-limiting" in result.handoff.evidence
    # When a person can go on; whether it resumes on its own is the policy's to say.
    assert "(it asked for 0.05 s)" in result.handoff.next_step
    assert "resumes" not in result.handoff.next_step
    record = await store.get_run(run.id)
    assert record is not None and record.state is RunState.BLOCKED
    assert record.result is not None and record.result["ended_because"] == "rate_limit"

    # The policy schedules it for the Retry-After.
    decision = decide_resume(
        result.ended_because,
        settings=ResumeSettings(),
        resumes_in_thread=0,
        last_user_stop_at=None,
        not_before=result.resume_after,
        now=result.timings.ended_at,
    )
    assert isinstance(decision, ResumeAt) and decision.at == result.resume_after

    # A resumer queues it again and restores the checkpoint: the work goes on from there.
    checkpoint = await store.latest_checkpoint(run.id)
    assert checkpoint is not None
    assert [m["content"] for m in checkpoint.messages if m["role"] == "tool"] == ["nothing done"]
    assert await store.set_state(run.id, RunState.QUEUED, expected=[RunState.BLOCKED])
    llm.reply("Tidied up after the pause.")
    resumed = agent.new_run(
        "tidy up", run_id=run.id, restore=checkpoint, resumed_because=EndedBecause.RATE_LIMIT
    )
    again = await resumed.run()

    last = llm.requests[-1]
    assert last.status == 200
    assert tool_results(last) == ["nothing done"]
    assert system_messages(last)[-1] == resumed_note(EndedBecause.RATE_LIMIT) != RESUMED_NOTE
    assert again.outcome is Outcome.FINISHED
    assert again.ended_because is EndedBecause.COMPLETED
    assert again.final_text == "Tidied up after the pause."
    record = await store.get_run(run.id)
    assert record is not None and record.state is RunState.FINISHED


async def test_a_retry_after_beyond_what_a_run_waits_ends_it_at_once(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    store = MemoryStore()
    llm.rate_limit(retry_after=300)  # more than RetryPolicy.max_retry_after_s
    run = make_agent(store=store).new_run("hello")
    started = time.monotonic()
    result = await run.run()

    assert time.monotonic() - started < 30
    assert [r.status for r in llm.requests] == [429]
    assert result.ended_because is EndedBecause.RATE_LIMIT
    assert result.outcome is Outcome.BLOCKED
    assert result.retry_after_s == 300
    # Nothing was answered yet, and the conversation is still checkpointed for the resume.
    checkpoint = await store.latest_checkpoint(run.id)
    assert checkpoint is not None and checkpoint.turn == 0
    assert checkpoint.messages[-1] == {"role": "user", "content": "hello"}


async def test_a_stop_during_the_rate_limit_wait_ends_without_waiting_again(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    """The rule: the Stop ends the wait and goes to the final turn. That turn is
    rate-limited too here; it gets one attempt, so the person is not kept waiting."""
    llm.call_tool("noop")
    run = make_agent([noop]).new_run("work")
    on_first(run, ToolStarted, lambda: llm.rate_limit(retry_after=60, times=2))
    on_first(run, Retrying, lambda: run.request_stop(StopReason.STOP, "U1"))
    started = time.monotonic()
    result = await run.run()

    assert time.monotonic() - started < 30  # neither 60 s Retry-After was waited out
    assert [r.status for r in llm.requests] == [200, 429, 429]
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.exit_code is ExitCode.USER_STOP
    # The person ended it; the refused final turn only cost the report.
    assert result.ended_because is EndedBecause.USER_EXIT
    assert result.handoff.stopped_by == "U1"
    assert "429" in (result.error or "")
    assert "noop: ok" in result.handoff.evidence


async def test_a_stop_sent_with_the_refused_last_attempt_still_gets_its_final_turn(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("noop")
    run = make_agent([noop]).new_run("work")
    on_first(run, ToolStarted, lambda: llm.rate_limit(retry_after=300))  # no retry: too long

    def stop_as_turn_two_goes_out(event: RunEvent) -> None:
        if isinstance(event, TurnStarted) and event.turn == 2:
            run.request_stop(StopReason.STOP, "U1")

    run.events.add_listener(stop_as_turn_two_goes_out)
    result = await run.run()

    assert [r.status for r in llm.requests] == [200, 429, 200]
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.ended_because is EndedBecause.USER_EXIT
    assert result.handoff.stopped_by == "U1"


async def test_why_each_kind_of_ending_ended(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    agent = make_agent()

    llm.reply("All done.")
    assert (await agent.new_run("a").run()).ended_because is EndedBecause.COMPLETED

    llm.fail(401)
    failed = await agent.new_run("b").run()
    assert (failed.outcome, failed.ended_because) == (Outcome.FAILED, EndedBecause.ERROR)

    for reason, expected in [
        (StopReason.ABORT, EndedBecause.USER_EXIT),
        (StopReason.SHUTDOWN, EndedBecause.SHUTDOWN),
    ]:
        llm.add(Reply(text=LONG_TEXT), stall_after(model_api, 2))
        run = agent.new_run("c")
        on_first(run, TextDelta, lambda run=run, reason=reason: run.request_stop(reason, "U1"))
        assert (await run.run()).ended_because is expected

    # Cancelled from outside (the task's owner went away): a shutdown.
    llm.add(Reply(text=LONG_TEXT), stall_after(model_api, 2))
    run = agent.new_run("d")
    started = asyncio.Event()
    on_first(run, TextDelta, started.set)
    task = asyncio.create_task(run.run())
    async with asyncio.timeout(10):
        await started.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert run.result is not None and run.result.ended_because is EndedBecause.SHUTDOWN
