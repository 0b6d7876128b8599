"""One sub-agent stopped, aborted or guided on its own (its own run id), while its
siblings and its parent go on (docs/stopping.md, Sub-agents people can reach).

Three children start in one parent turn and each stalls in its first step; meanwhile one
is stopped, one aborted and one given guidance, each through the child's own run. llmock
answers in arrival order, so each child's requests are told apart by their task.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.run.config import AgentConfig
from agent_core.run.delegation import child_report, stopped_here
from agent_core.terminal.cli import sub_agents_of
from agent_core.tools.builtin import current_time
from agent_core.values.events import ChildStarted, RunEvent, TextDelta
from agent_core.values.guidance import Guidance
from agent_core.values.outcomes import ExitCode
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import offered_tools

if TYPE_CHECKING:
    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.run.loop import Run
    from tests.agent_core.helpers import AgentFactory

LONG_TEXT = " ".join(f"token{i}" for i in range(40))
TASKS = ("Count the open issues", "Read the release notes", "Check the CI")
STALL_S = 2.0


def _task_of(record: RequestRecord) -> str | None:
    users = [m["content"] for m in record.body["messages"] if m["role"] == "user"]
    return next((t for t in TASKS if t in users), None)


def _user_texts(record: RequestRecord) -> list[str]:
    return [str(m["content"]) for m in record.body["messages"] if m["role"] == "user"]


async def test_one_child_stopped_one_aborted_one_guided_and_the_parent_goes_on(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    calls = tuple(ToolCall("delegate", {"task": t, "tools": ["current_time"]}) for t in TASKS)
    llm.add(Reply(tool_calls=calls), StreamFault("stall", after_chunks=0, stall_seconds=0))
    for _ in TASKS:  # each child's first step: text, a stall, then a tool call
        llm.add(
            Reply(text=LONG_TEXT, tool_calls=(ToolCall("current_time", {}),)),
            StreamFault("stall", after_chunks=3, stall_seconds=STALL_S),
        )
    llm.reply("Sub-agent summary.", times=2)  # the stopped one's final turn; the guided one's
    llm.reply("Parent summary: carried on without the aborted one.")
    config = AgentConfig(name_person=lambda user: f"<@{user}>")
    parent = make_agent([current_time], config=config).new_run("audit the project")
    streaming: set[str] = set()
    all_streaming = asyncio.Event()

    def on_parent(event: RunEvent) -> None:
        if isinstance(event, ChildStarted):
            child = next(c for c in parent.children if c.id == event.child_id)

            def on_child(e: RunEvent, task: str = event.task) -> None:
                if isinstance(e, TextDelta):
                    streaming.add(task)
                    if len(streaming) == len(TASKS):
                        all_streaming.set()

            child.events.add_listener(on_child)

    parent.events.add_listener(on_parent)
    task = asyncio.create_task(parent.run())
    async with asyncio.timeout(10):
        await all_streaming.wait()
    by_task: dict[str, Run] = {c.task: c for c in parent.children}
    stopped, aborted, guided = (by_task[t] for t in TASKS)
    guided.add_guidance(Guidance("g1", "U3", "Only look at the main branch."))
    assert stopped.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    assert aborted.request_stop(StopReason.ABORT, "U2", source=StopSource.BUTTON)
    result = await task

    records = llm.requests
    per_child = {t: [r for r in records if _task_of(r) == t] for t in TASKS}
    parents = [r for r in records if _task_of(r) is None]
    # The aborted one: its stream closed, nothing more asked.
    (only,) = per_child[TASKS[1]]
    assert not only.completed
    # The stopped one: its step finished, then a final turn offering only final_report.
    first, final = per_child[TASKS[0]]
    assert first.completed
    assert offered_tools(final) == ["final_report"]
    # The guided one: its next request carries the guidance, nobody else's does.
    _, guided_next = per_child[TASKS[2]]
    assert any("Only look at the main branch." in t for t in _user_texts(guided_next))
    others = [*per_child[TASKS[0]], *per_child[TASKS[1]], *parents]
    assert not any("main branch" in t for r in others for t in _user_texts(r))
    assert "current_time" in offered_tools(guided_next)
    # The parent went on: its next request carries the three reports.
    assert len(parents) == 2
    reports = [str(m["content"]) for m in parents[1].body["messages"] if m["role"] == "tool"]
    assert len(reports) == 3
    assert reports[0].startswith("Stopped by <@U1>")
    assert "Sub-agent summary." in reports[0]
    assert reports[1].startswith("Sub-agent aborted by <@U2>")
    assert not reports[2].startswith(("Stopped", "Sub-agent aborted"))
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert result.handoff.evidence == "Parent summary: carried on without the aborted one."
    assert parent.control.request is None
    codes = [c.exit_code for c in result.children]
    assert codes == [ExitCode.USER_STOP, ExitCode.USER_ABORT, ExitCode.FINAL_ANSWER]
    # The terminal runner's --json lists each one, with who stopped it.
    listed = [
        (a["task"], a["outcome"], a["stopped_by"], a["stopped_on_its_own"])
        for a in sub_agents_of(parent)
    ]
    assert listed == [
        (TASKS[0], "userinterlude", "U1", True),
        (TASKS[1], "userinterlude", "U2", True),
        (TASKS[2], "finished", None, False),
    ]
    # The parent's budget counts what its children spent.
    spent = parent.budget.spent()
    assert spent.total_tokens >= sum(c.usage.total_tokens for c in result.children)


async def test_a_stop_passed_down_by_the_parent_is_not_the_childs_own(
    make_agent: AgentFactory,
) -> None:
    parent = make_agent().new_run("parent")
    child = parent.child("child")
    parent.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    assert stopped_here(child.control) is None
    other = parent.child("other")
    assert other.control.request is not None  # inherited at once
    assert stopped_here(other.control) is None


async def test_a_childs_own_abort_after_its_own_stop_reads_as_aborted(
    make_agent: AgentFactory,
) -> None:
    parent = make_agent().new_run("parent")
    child = parent.child("child")
    child.request_stop(StopReason.STOP, "U1", source=StopSource.HOME)
    child.request_stop(StopReason.ABORT, "U2", source=StopSource.STORE)
    request = stopped_here(child.control)
    assert request is not None and request.requested_by == "U2"
    result = await child.run()
    report = child_report(result, stopped=request, name=lambda u: f"<@{u}>")
    assert report.splitlines()[0].startswith("Sub-agent aborted by <@U2>")


async def test_guidance_a_child_ended_before_seeing_is_listed_in_its_report(
    make_agent: AgentFactory,
) -> None:
    parent = make_agent().new_run("parent")
    child = parent.child("child")
    child.add_guidance(Guidance("g1", "U3", "Only look at the main branch."))
    child.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    result = await child.run()

    assert [g.text for g in result.undelivered_guidance] == ["Only look at the main branch."]
    report = child_report(result, stopped=stopped_here(child.control), name=lambda u: f"<@{u}>")
    lines = report.splitlines()
    assert lines[0].startswith("Stopped by <@U1>")
    assert lines[-2:] == [
        "Guidance it ended before seeing:",
        "- from <@U3>: Only look at the main branch.",
    ]
