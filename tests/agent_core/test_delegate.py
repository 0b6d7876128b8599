"""The ``delegate`` tool: sub-agents that Stop and Abort reach (docs/stopping.md).

llmock answers requests in arrival order, so the scripts follow the runs' order: the
parent's turn that delegates, then its children's turns (in either order between the
children: they get the same scripted answer), then the parent's next turn, which only
starts once every child has returned. Faults meant for a child are queued when it starts
(on :class:`ChildStarted`), so a parent's request can never consume them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.run.config import AgentConfig
from agent_core.run.delegation import MAX_DEPTH, MAX_LIVE_CHILDREN
from agent_core.stores.memory import MemoryStore
from agent_core.tools.toolbox import tool
from agent_core.values.events import (
    ChildFinished,
    ChildStarted,
    RunEvent,
    RunFinished,
    TextDelta,
    ToolFinished,
    ToolProgress,
)
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import EventLog, offered_tools, system_messages
from tests.agent_core.test_cli import Cli

if TYPE_CHECKING:
    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.run.loop import Run
    from agent_core.values.outcomes import RunResult
    from agent_core.values.records import RunRecord
    from tests.agent_core.helpers import AgentFactory

LONG_TEXT = " ".join(f"token{i}" for i in range(40))


@tool
async def lookup(key: str) -> str:
    """Look a key up in the team wiki."""
    return f"{key}: 42"


def delegate(task: str, tools: list[str]) -> ToolCall:
    return ToolCall("delegate", {"task": task, "tools": tools})


def report(evidence: str, handoff: str) -> ToolCall:
    return ToolCall(
        "final_report",
        {"outcome": "blocked", "evidence": evidence, "artifacts": [], "handoff": handoff},
    )


class Children:
    """A run's children as they start, each with an :class:`EventLog` attached before
    it takes its first turn (:class:`ChildStarted` is emitted before the child runs)."""

    def __init__(self, parent: Run) -> None:
        self._parent = parent
        self.runs: list[Run] = []
        self.logs: list[EventLog] = []
        parent.events.add_listener(self._on_event)

    def _on_event(self, event: RunEvent) -> None:
        if isinstance(event, ChildStarted):
            (child,) = [c for c in self._parent.children if c.id == event.child_id]
            self.runs.append(child)
            self.logs.append(EventLog(child))

    def on_start(self, action: Any) -> None:
        """Call ``action()`` as each child starts (e.g. queue the child's fault)."""

        def listener(event: RunEvent) -> None:
            if isinstance(event, ChildStarted):
                action()

        self._parent.events.add_listener(listener)


class Gate:
    """A tool that waits until the test opens the gate; ``all_in`` is set once ``expected``
    calls are waiting in it."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.waiting = 0
        self.all_in = asyncio.Event()
        self.opened = asyncio.Event()

        @tool
        async def count_files(folder: str = ".") -> str:
            """Count the files in a folder (slow)."""
            self.waiting += 1
            if self.waiting == self.expected:
                self.all_in.set()
            await self.opened.wait()
            return f"{folder}: 120 files counted so far"

        self.tool = count_files


def tool_messages(record: RequestRecord) -> list[str]:
    body: dict[str, Any] = record.body or {}
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def stored_children(store: MemoryStore, parent_id: str) -> list[RunRecord]:
    return [r for r in store._runs.values() if r.parent_id == parent_id]


async def finished_audits(store: MemoryStore, run_id: str) -> int:
    return sum(e.kind == "run.finished" for e in await store.events_for(run_id))


async def test_two_children_in_one_batch_finish_and_report_to_the_parent(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(
        Reply(
            tool_calls=(
                delegate("Look up the build number.", ["lookup"]),
                delegate("Summarise the release notes.", []),
            )
        )
    )
    llm.add(Reply(text="Done: see https://wiki.example/build.", times=2))  # each child
    llm.reply("The build is 42 and the notes are summarised.")
    store = MemoryStore()
    parent = make_agent([lookup], store=store).new_run("prepare the release")
    log = EventLog(parent)
    children = Children(parent)

    result = await parent.run()

    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert result.handoff.evidence == "The build is 42 and the notes are summarised."
    assert offered_tools(llm.requests[0]) == ["lookup", "delegate", "final_report", "ask_user"]
    # Each child got exactly the tools it was given; neither was offered delegate.
    assert sorted(offered_tools(r) for r in llm.requests[1:3]) == [
        ["final_report", "ask_user"],
        ["lookup", "final_report", "ask_user"],
    ]
    # A child sees its task, not the parent's conversation, and knows it is a sub-agent.
    child_requests = llm.requests[1:3]
    assert {r.body["messages"][-1]["content"] for r in child_requests} == {
        "Look up the build number.",
        "Summarise the release notes.",
    }
    assert all("sub-agent" in system_messages(r)[1] for r in child_requests)
    # The parent reads each child's outcome, evidence, artifacts and handoff.
    first, second = tool_messages(llm.requests[3])
    for child, message in zip(children.runs, (first, second), strict=True):
        assert message.splitlines() == [
            f"Sub-agent {child.id} ended. Outcome: Finished [EXIT-FINAL-ANSWER]",
            "Evidence: Done: see https://wiki.example/build.",
            "Artifacts: https://wiki.example/build",
            "Handoff: None: the request is answered.",
        ]
    # The parent's hub shows both children start and end; their results are the parent's.
    started = log.of(ChildStarted)
    assert [(e.task, e.tools, e.depth) for e in started] == [
        ("Look up the build number.", ("lookup",), 1),
        ("Summarise the release notes.", (), 1),
    ]
    ended = log.of(ChildFinished)
    assert {e.child_id for e in ended} == {c.id for c in children.runs}
    assert all(e.result.outcome is Outcome.FINISHED for e in ended)
    assert [c.run_id for c in result.children] == [c.id for c in children.runs]
    # A child that has ended is no longer reached by its parent's requests.
    parent.request_stop(StopReason.ABORT, "U9")
    assert [c.control.request for c in children.runs] == [None, None]
    # Stored with their parent; each child's checkpoint and audit trail are its own.
    records = stored_children(store, parent.id)
    assert {r.id for r in records} == {c.id for c in children.runs}
    assert all(r.state is RunState.FINISHED for r in records)
    for child in children.runs:
        checkpoint = await store.latest_checkpoint(child.id)
        assert checkpoint is not None
        assert checkpoint.messages[-2]["content"] == child.task
        assert await finished_audits(store, child.id) == 1


async def test_stop_reaches_every_child_and_the_parent_reports_with_their_handoffs(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    gate = Gate(expected=2)
    llm.add(
        Reply(
            tool_calls=(
                delegate("Count the files in src.", ["count_files"]),
                delegate("Count the files in tests.", ["count_files"]),
            )
        )
    )
    llm.add(Reply(tool_calls=(ToolCall("count_files", {}),), times=2))  # both children
    llm.add(Reply(tool_calls=(report("Counted 120 files.", "Count the rest."),), times=2))
    llm.reply("Parent summary: both sub-agents stopped with partial counts.")
    store = MemoryStore()
    parent = make_agent([gate.tool], store=store).new_run("count every file")
    children = Children(parent)
    task = asyncio.create_task(parent.run())
    async with asyncio.timeout(10):
        await gate.all_in.wait()  # both children are in the middle of a step

    # As the owner applies a stop committed on another worker: on the parent run only.
    assert parent.request_stop(StopReason.STOP, "U1", source=StopSource.STORE)
    for child in children.runs:
        assert child.control.reason is StopReason.STOP
        assert child.control.history[0].source == "parent"
    gate.opened.set()  # the children's tool calls complete: their step finishes
    result = await task

    # Each child took its own final turn, then the parent took its final turn.
    assert len(llm.requests) == 6
    assert [offered_tools(r) for r in llm.requests[3:]] == [["final_report"]] * 3
    for child in children.runs:
        assert child.result is not None
        assert child.result.exit_code is ExitCode.USER_STOP
        assert child.result.label() == "User interlude: stopped by U1"
    final_turn = tool_messages(llm.requests[-1])[-2:]
    assert [m.splitlines()[0] for m in final_turn] == [
        f"Sub-agent {c.id} ended. Outcome: User interlude: stopped by U1 [EXIT-USER-STOP]"
        for c in children.runs
    ]
    assert all("Evidence: Counted 120 files.\n" in m for m in final_turn)
    assert all(m.endswith("Handoff: Count the rest.") for m in final_turn)
    assert result.exit_code is ExitCode.USER_STOP
    assert result.handoff.evidence == (
        "Parent summary: both sub-agents stopped with partial counts."
    )
    assert [c.exit_code for c in result.children] == [ExitCode.USER_STOP] * 2
    for record in stored_children(store, parent.id):
        assert record.state is RunState.USERINTERLUDE
        assert await finished_audits(store, record.id) == 1


@dataclass
class Streaming:
    """A parent whose two children are both mid-answer, their streams stalled for 30 s:
    only a cancellation ends them sooner."""

    parent: Run
    task: asyncio.Task[RunResult]
    log: EventLog
    children: Children
    store: MemoryStore


async def two_children_streaming(llm: LLMock, make_agent: AgentFactory) -> Streaming:
    llm.add(Reply(tool_calls=(delegate("Read the logs.", []), delegate("Read the docs.", []))))
    llm.add(Reply(text=LONG_TEXT, times=2))
    store = MemoryStore()
    parent = make_agent(store=store).new_run("investigate")
    log = EventLog(parent)
    children = Children(parent)
    children.on_start(lambda: llm.add(StreamFault("stall", after_chunks=2, stall_seconds=30)))
    task = asyncio.create_task(parent.run())
    await log.first(ChildStarted, lambda e: len(log.of(ChildStarted)) == 2)
    for child_log in children.logs:
        await child_log.first(TextDelta)
    return Streaming(parent, task, log, children, store)


async def assert_children_cut_off(
    llm: LLMock, run: Streaming, outcome: Outcome, exit_code: ExitCode
) -> None:
    records = llm.requests
    assert len(records) == 3  # no child final turn, no parent final turn
    assert not any(r.completed for r in records[1:])  # every child's stream was closed
    for child in run.children.runs:
        assert child.result is not None
        assert (child.result.outcome, child.result.exit_code) == (outcome, exit_code)
    assert {e.child_id for e in run.log.of(ChildFinished)} == {c.id for c in run.children.runs}
    for record in stored_children(run.store, run.parent.id):
        assert record.state is RunState(outcome.value)
        assert await finished_audits(run.store, record.id) == 1  # exactly one ending


@pytest.mark.parametrize(
    ("reason", "outcome", "exit_code"),
    [
        (StopReason.ABORT, Outcome.USERINTERLUDE, ExitCode.USER_ABORT),
        (StopReason.SHUTDOWN, Outcome.BLOCKED, ExitCode.SHUTDOWN),
    ],
)
async def test_abort_and_shutdown_cancel_every_child_at_once(
    llm: LLMock,
    make_agent: AgentFactory,
    reason: StopReason,
    outcome: Outcome,
    exit_code: ExitCode,
) -> None:
    run = await two_children_streaming(llm, make_agent)

    run.parent.request_stop(reason, "U2")
    async with asyncio.timeout(5):  # the run ends without waiting out the stalls
        result = await run.task

    assert (result.outcome, result.exit_code) == (outcome, exit_code)
    await assert_children_cut_off(llm, run, outcome, exit_code)
    assert all(c.control.history[0].source == "parent" for c in run.children.runs)
    assert isinstance(run.log.events[-1], RunFinished)  # children ended before their parent


async def test_a_parent_task_cancelled_from_outside_leaves_no_child_running(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    run = await two_children_streaming(llm, make_agent)

    run.task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await run.task

    assert run.parent.result is not None
    assert run.parent.result.exit_code is ExitCode.SHUTDOWN
    await assert_children_cut_off(llm, run, Outcome.BLOCKED, ExitCode.SHUTDOWN)


async def test_a_child_that_fails_is_reported_as_the_tool_result(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("delegate", {"task": "Check the deploy.", "tools": []})
    llm.reply("The sub-agent could not reach the model; nothing was checked.")
    parent = make_agent().new_run("is the deploy healthy?")
    log = EventLog(parent)
    Children(parent).on_start(lambda: llm.fail(401, message="Incorrect API key provided"))

    result = await parent.run()

    (ended,) = log.of(ChildFinished)
    assert (ended.result.outcome, ended.result.exit_code) == (Outcome.FAILED, ExitCode.ERROR)
    (message,) = tool_messages(llm.requests[-1])
    assert message.startswith(f"Sub-agent {ended.child_id} ended. Outcome: Failed [EXIT-ERROR]")
    assert "Incorrect API key" in message
    (done,) = [e for e in log.of(ToolFinished) if e.name == "delegate"]
    assert done.ok  # the tool worked: its result is the child's failure
    assert result.exit_code is ExitCode.FINAL_ANSWER


class ChildRecordsCrash(MemoryStore):
    """A store with a bug that only a child run meets."""

    async def create_run(self, run: RunRecord) -> None:
        if run.parent_id is not None:
            raise RuntimeError("the runs table is corrupt")
        await super().create_run(run)


async def test_a_child_that_crashes_is_a_failed_child_not_a_crashed_parent(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("delegate", {"task": "Tidy the wiki.", "tools": []})
    llm.reply("The sub-agent crashed; the wiki is untouched.")
    parent = make_agent(store=ChildRecordsCrash()).new_run("tidy up")
    log = EventLog(parent)

    result = await parent.run()

    (ended,) = log.of(ChildFinished)
    assert ended.result.outcome is Outcome.FAILED
    assert "the runs table is corrupt" in ended.result.handoff.evidence
    (message,) = tool_messages(llm.requests[-1])
    assert "Outcome: Failed [EXIT-ERROR]" in message
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert [c.outcome for c in result.children] == [Outcome.FAILED]


async def test_depth_is_at_most_two_and_children_are_stored_with_their_parent(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(Reply(tool_calls=(delegate("Survey the wiki.", ["lookup", "delegate"]),)))
    llm.add(Reply(tool_calls=(delegate("Read page 1.", ["delegate"]),)))  # too deep
    llm.add(Reply(tool_calls=(delegate("Read page 1.", ["lookup"]),)))
    llm.reply("Page 1 read.")  # the grandchild
    llm.reply("Survey done.")  # the child
    llm.reply("The wiki is surveyed.")  # the parent
    store = MemoryStore()
    parent = make_agent([lookup], store=store).new_run("survey the wiki")

    result = await parent.run()

    (child,) = parent.children
    (grandchild,) = child.children
    assert (parent.depth, child.depth, grandchild.depth) == (0, 1, MAX_DEPTH)
    parent_turn, child_turn, child_retry, grandchild_turn, *_ = llm.requests
    assert "delegate" in offered_tools(parent_turn)
    assert "delegate" in offered_tools(child_turn)
    assert offered_tools(grandchild_turn) == ["lookup", "final_report", "ask_user"]
    (refusal,) = tool_messages(child_retry)
    assert refusal == (
        "error: delegate: a sub-agent of this run would be at depth 2, the deepest allowed, "
        "so it cannot be given 'delegate'. No sub-agent was started. Name some of: lookup "
        "(or none); final_report and ask_user every sub-agent has anyway"
    )
    with pytest.raises(ValueError, match="deepest allowed"):
        grandchild.child("deeper still")
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert [c.children[0].handoff.evidence for c in result.children] == ["Page 1 read."]
    stored = {r.id: r.parent_id for r in store._runs.values()}
    assert stored == {parent.id: None, child.id: parent.id, grandchild.id: child.id}
    for run in (parent, child, grandchild):
        assert await finished_audits(store, run.id) == 1


async def test_at_most_four_children_are_live_and_a_fifth_is_refused(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    parts = [f"Count part {n}." for n in range(1, 6)]
    llm.add(Reply(tool_calls=tuple(delegate(p, []) for p in parts)))
    llm.add(Reply(text="Part counted.", times=MAX_LIVE_CHILDREN))
    llm.add(Reply(tool_calls=(delegate(parts[4], []),)))  # once they have reported
    llm.reply("Part counted.")
    llm.reply("All five parts are counted.")
    parent = make_agent().new_run("count the parts")
    log = EventLog(parent)

    result = await parent.run()

    first_batch = tool_messages(llm.requests[MAX_LIVE_CHILDREN + 1])
    assert all(m.startswith("Sub-agent ") for m in first_batch[:MAX_LIVE_CHILDREN])
    assert first_batch[MAX_LIVE_CHILDREN] == (
        "error: delegate: 4 sub-agents of this run are already running, the most allowed at "
        "once, so this task was not started; delegate it again once one of them has reported"
    )
    started = [e.task for e in log.of(ChildStarted)]
    assert started == [*parts[:MAX_LIVE_CHILDREN], parts[4]]
    assert tool_messages(llm.requests[-1])[-1].startswith("Sub-agent ")
    assert result.handoff.evidence == "All five parts are counted."


async def test_tools_the_parent_lacks_are_refused_and_no_child_starts(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("delegate", {"task": "Clean up.", "tools": ["lookup", "rm_rf", "shell"]})
    llm.reply("I cannot hand over tools I do not have.")
    parent = make_agent([lookup]).new_run("clean up")
    log = EventLog(parent)

    result = await parent.run()

    (refusal,) = tool_messages(llm.requests[-1])
    assert refusal == (
        "error: delegate: not among this run's tools: 'rm_rf', 'shell'. No sub-agent was "
        "started. Name some of: lookup, delegate (or none); final_report and ask_user every "
        "sub-agent has anyway"
    )
    assert log.of(ChildStarted) == []
    assert parent.children == ()
    assert result.exit_code is ExitCode.FINAL_ANSWER


async def test_a_childs_turns_and_tools_show_as_the_delegate_calls_progress(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("delegate", {"task": "Find the key.", "tools": ["lookup"]})
    llm.call_tool("lookup", {"key": "answer"})
    llm.reply("The key is 42.")  # the child
    llm.reply("Found it: 42.")  # the parent
    parent = make_agent([lookup]).new_run("find the key")
    log = EventLog(parent)

    await parent.run()

    assert [(e.name, e.progress, e.message) for e in log.of(ToolProgress)] == [
        ("delegate", 1, "turn 1"),
        ("delegate", 1, "turn 1: running lookup"),
        ("delegate", 2, "turn 2"),
    ]


async def test_the_terminal_shows_sub_agents_start_and_end_at_every_depth(llm: LLMock) -> None:
    llm.add(Reply(tool_calls=(delegate("Survey the wiki.", ["delegate"]),)))
    llm.add(Reply(tool_calls=(delegate("Read page 1.", []),)))
    llm.reply("Page 1 read.")  # the grandchild
    llm.reply("Survey done.")  # the child
    llm.reply("The wiki is surveyed.")  # the top-level run
    cli = await Cli.start(llm, "survey the wiki", "--json")
    status, result = await cli.finish_json()

    assert status == 0
    (child,) = result["children"]
    (grandchild,) = child["children"]
    assert [
        (a["run_id"], a["parent_id"], a["task"], a["outcome"], a["stopped_by"])
        for a in result["sub_agents"]
    ] == [
        (child["run_id"], result["run_id"], "Survey the wiki.", "finished", None),
        (grandchild["run_id"], child["run_id"], "Read page 1.", "finished", None),
    ]
    shown = [line for line in cli.stderr.splitlines() if "sub-agent" in line]
    assert shown == [
        f"=> sub-agent {child['run_id'][:8]} started: Survey the wiki.",
        f"  => sub-agent {grandchild['run_id'][:8]} started: Read page 1.",
        f"  <= sub-agent {grandchild['run_id'][:8]} ended: Finished [EXIT-FINAL-ANSWER]",
        f"<= sub-agent {child['run_id'][:8]} ended: Finished [EXIT-FINAL-ANSWER]",
    ]


async def test_tool_timeout_does_not_cut_a_child_short(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("delegate", {"task": "Think it over.", "tools": []})
    llm.reply("Thought it over.")  # the child, answering later than TOOL_TIMEOUT
    llm.reply("Decided.")
    parent = make_agent(config=AgentConfig(tool_timeout_s=0.2)).new_run("decide")
    Children(parent).on_start(lambda: llm.delay(0.6))

    result = await parent.run()

    (child,) = result.children
    assert child.exit_code is ExitCode.FINAL_ANSWER
    assert child.handoff.evidence == "Thought it over."
    (message,) = tool_messages(llm.requests[-1])
    assert message.splitlines()[0].endswith("Outcome: Finished [EXIT-FINAL-ANSWER]")
