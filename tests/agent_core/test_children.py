"""Child runs made with :meth:`Run.child` (the API under the ``delegate`` tool, see
test_delegate.py) inherit every stop and abort of their parent."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.run.loop import Run, current_run
from agent_core.tools.toolbox import Tool, tool
from agent_core.values.events import RunEvent, TextDelta
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import offered_tools

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

LONG_TEXT = " ".join(f"token{i}" for i in range(40))


def delegating_tool(
    children: list[Run], streaming: asyncio.Event, script_child: Callable[[], object]
) -> Tool:
    @tool
    async def spawn(task: str) -> str:
        """Hand a sub-task to a child agent."""
        script_child()  # queued now, so the parent's own request cannot consume it
        child = current_run().child(task)
        children.append(child)

        def watch(event: RunEvent) -> None:
            if isinstance(event, TextDelta):
                streaming.set()

        child.events.add_listener(watch)
        result = await child.run()
        return f"child ended {result.outcome.value}: {result.summary}"

    return spawn


async def test_stop_reaches_the_child_and_both_report(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    children: list[Run] = []
    streaming = asyncio.Event()
    llm.call_tool("spawn", {"task": "count the files"})

    def script_child() -> None:
        # The child is mid-answer, about to call a tool, when the stop lands.
        more_work = (ToolCall("spawn", {"task": "count the rest"}),)
        llm.add(
            Reply(text=LONG_TEXT, tool_calls=more_work),
            StreamFault("stall", after_chunks=2, stall_seconds=0.3),
        )
        llm.reply("Child summary: counted half the files.")  # the child's final turn
        llm.reply("Parent summary: the child stopped halfway.")  # the parent's final turn

    spawn = delegating_tool(children, streaming, script_child)
    parent = make_agent([spawn]).new_run("audit the repo")
    task = asyncio.create_task(parent.run())
    async with asyncio.timeout(10):
        await streaming.wait()
    parent.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    result = await task

    (child,) = children
    assert child.control.reason is StopReason.STOP
    assert child.control.history[0].source == "parent"
    assert [offered_tools(r) for r in llm.requests[2:]] == [["final_report"], ["final_report"]]
    (child_result,) = result.children
    assert child_result.outcome is Outcome.USERINTERLUDE
    assert child_result.exit_code is ExitCode.USER_STOP
    assert child_result.summary == "Child summary: counted half the files."
    tool_result = next(m for m in llm.requests[-1].body["messages"] if m["role"] == "tool")
    assert tool_result["content"].startswith("child ended userinterlude: Child summary")
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.handoff.evidence == "Parent summary: the child stopped halfway."


async def test_abort_reaches_the_child_and_closes_its_stream(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    children: list[Run] = []
    streaming = asyncio.Event()
    llm.call_tool("spawn", {"task": "count the files"})

    def script_child() -> None:
        llm.add(Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=2))

    spawn = delegating_tool(children, streaming, script_child)
    parent = make_agent([spawn]).new_run("audit the repo")
    task = asyncio.create_task(parent.run())
    async with asyncio.timeout(10):
        await streaming.wait()
    parent.request_stop(StopReason.ABORT, "U2")
    result = await task

    (child,) = children
    assert child.result is not None
    assert child.result.exit_code is ExitCode.USER_ABORT
    assert not llm.requests[-1].completed  # the child's stream was closed
    assert len(llm.requests) == 2  # no final turns
    assert result.exit_code is ExitCode.USER_ABORT
    assert result.children[0].exit_code is ExitCode.USER_ABORT


async def test_a_child_started_after_a_stop_inherits_it(make_agent: AgentFactory) -> None:
    parent = make_agent().new_run("parent")
    parent.request_stop(StopReason.STOP, "U1")
    child = parent.child("late child")
    assert child.control.reason is StopReason.STOP
    result = await child.run()
    assert result.exit_code is ExitCode.USER_STOP
    assert result.turns == 0
