"""A run cancelled while its ending cannot be written (a database blip): the
cancellation stays a cancellation, whatever the store does.

The supervisor cancels a run's task that has not ended by its shutdown deadline, and a
parent's Abort cancels its ``delegate`` calls: in both cases the run records its ending
for a bounded time (``AgentConfig.cancel_drain_s``) and then re-raises the
``CancelledError``, never a ``TimeoutError`` (which the supervisor logs as a failed
session and a parent reads as "delegate raised TimeoutError").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from structlog.testing import capture_logs

from agent_core.run.config import AgentConfig
from agent_core.stores.memory import MemoryStore
from agent_core.tools.toolbox import Tool, tool
from agent_core.values.events import ChildFinished, ToolFinished, ToolStarted
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.states import TERMINAL_STATES, RunState
from agent_core.values.stop import StopReason
from tests.agent_core.helpers import EventLog
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from collections.abc import Collection

    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

DRAIN_S = 0.3
"""The drain bound in these tests: short, so a cut write shows quickly."""


class SlowEndings(MemoryStore):
    """A store whose terminal writes hang (a database that stopped answering) until
    ``answer`` is set; only for child runs when ``children_only``."""

    def __init__(self, *, children_only: bool = False) -> None:
        super().__init__()
        self.children_only = children_only
        self.answer = asyncio.Event()
        self.hanging: list[str] = []
        self.changes = Changes()

    async def set_state(
        self, run_id: str, new: RunState, *, expected: Collection[RunState], **changes: Any
    ) -> bool:
        record = await self.get_run(run_id)
        child = record is not None and record.parent_id is not None
        if new in TERMINAL_STATES and (child or not self.children_only):
            self.hanging.append(run_id)
            self.changes.notify()
            await self.answer.wait()
        return await super().set_state(run_id, new, expected=expected, **changes)


def waiting_tool() -> tuple[Tool, asyncio.Event]:
    """A tool that runs until it is cancelled; the event is set once it has started."""
    started = asyncio.Event()

    @tool
    async def watch_deploy() -> str:
        """Watch the deploy until it settles."""
        started.set()
        await asyncio.Event().wait()
        return "settled"

    return watch_deploy, started


async def test_a_run_cancelled_at_shutdown_while_its_ending_hangs_stays_cancelled(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    """What the supervisor does to a run still going at its shutdown deadline."""
    watch, started = waiting_tool()
    llm.call_tool("watch_deploy", {})
    store = SlowEndings()
    agent = make_agent([watch], config=AgentConfig(cancel_drain_s=DRAIN_S), store=store)
    run = agent.new_run("watch the deploy")
    task = asyncio.create_task(run.run())
    await started.wait()

    with capture_logs() as logs:
        task.cancel()
        async with asyncio.timeout(DRAIN_S + 5):
            with pytest.raises(asyncio.CancelledError):
                await task

    assert task.cancelled()
    assert store.hanging == [run.id]
    (cut,) = [e for e in logs if e["event"] == "run.ending_unrecorded"]
    assert cut["log_level"] == "warning"
    assert cut["reason"] == "shutdown"
    assert cut["waited_s"] == DRAIN_S
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]
    assert run.result is not None and run.result.exit_code is ExitCode.SHUTDOWN


async def test_a_run_cancelled_at_shutdown_records_its_ending_when_the_store_answers(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    watch, started = waiting_tool()
    llm.call_tool("watch_deploy", {})
    store = SlowEndings()
    agent = make_agent([watch], config=AgentConfig(cancel_drain_s=30), store=store)
    run = agent.new_run("watch the deploy")
    task = asyncio.create_task(run.run())
    await started.wait()

    task.cancel()
    store.answer.set()  # the blip is over before the drain bound
    with pytest.raises(asyncio.CancelledError):
        await task

    stored = await store.get_run(run.id)
    assert stored is not None and stored.state is RunState.BLOCKED


async def test_an_aborted_run_waits_for_its_ending_and_a_shutdown_then_cancels_it(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    """An Abort's ending is retried through the outage (the run reports its end once it
    is stored); the shutdown deadline cutting that wait short is a cancellation too."""
    watch, started = waiting_tool()
    llm.call_tool("watch_deploy", {})
    store = SlowEndings()
    agent = make_agent([watch], config=AgentConfig(cancel_drain_s=DRAIN_S), store=store)
    run = agent.new_run("watch the deploy")
    task = asyncio.create_task(run.run())
    await started.wait()

    run.request_stop(StopReason.ABORT, "U1")
    await store.changes.until(lambda: store.hanging, timeout=5, describe=lambda: "no write")
    assert not task.done()  # still writing its ending
    with capture_logs() as logs:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert not [e for e in logs if e["log_level"] in ("error", "critical")]
    assert run.result is not None and run.result.exit_code is ExitCode.USER_ABORT


async def test_an_aborted_parent_does_not_read_its_childs_hung_ending_as_a_timeout(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    watch, started = waiting_tool()
    llm.call_tool("delegate", {"task": "Watch the deploy.", "tools": ["watch_deploy"]})
    llm.call_tool("watch_deploy", {})
    store = SlowEndings(children_only=True)
    agent = make_agent([watch], config=AgentConfig(cancel_drain_s=DRAIN_S), store=store)
    parent = agent.new_run("is the deploy healthy?")
    log = EventLog(parent)
    task = asyncio.create_task(parent.run())
    await started.wait()
    await log.first(ToolStarted, lambda e: e.name == "delegate")

    with capture_logs() as logs:
        parent.request_stop(StopReason.ABORT, "U1")
        async with asyncio.timeout(DRAIN_S + 5):
            result = await task

    assert (result.outcome, result.exit_code) == (Outcome.USERINTERLUDE, ExitCode.USER_ABORT)
    (child,) = parent.children
    assert store.hanging == [child.id]
    # The delegate call was cancelled with the batch: it did not end with an error result.
    assert [e.output for e in log.of(ToolFinished) if e.name == "delegate"] == []
    (ended,) = log.of(ChildFinished)
    assert ended.result.exit_code is ExitCode.USER_ABORT
    (cut,) = [e for e in logs if e["event"] == "run.ending_unrecorded"]
    assert (cut["run_id"], cut["reason"]) == (child.id, "abort")
    assert "TimeoutError" not in repr(logs)
