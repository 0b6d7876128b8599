"""The run state table, the stop request rules, and tool schemas from signatures."""

from __future__ import annotations

from typing import Literal

import pytest

from agent_core.tools.toolbox import Toolbox, tool
from agent_core.values.chat import ToolCall
from agent_core.values.errors import IllegalTransition
from agent_core.values.outcomes import Outcome
from agent_core.values.states import (
    LIVE_STATES,
    TERMINAL_STATES,
    RunState,
    state_for_outcome,
    transition,
)
from agent_core.values.stop import RunControl, StopReason


def test_terminal_states_are_exactly_the_canonical_outcomes() -> None:
    assert {s.value for s in TERMINAL_STATES} == {o.value for o in Outcome}
    assert all(state_for_outcome(o).is_terminal for o in Outcome)


def test_a_finished_run_never_moves_again() -> None:
    for target in RunState:
        with pytest.raises(IllegalTransition):
            transition(RunState.FINISHED, target)


@pytest.mark.parametrize("ended", sorted(TERMINAL_STATES - {RunState.FINISHED}))
def test_an_ended_run_moves_only_back_to_the_queue(ended: RunState) -> None:
    # AUTO_RESUME may list error and user_exit too: those runs resume in place as well.
    assert transition(ended, RunState.QUEUED) is RunState.QUEUED
    for target in set(RunState) - {RunState.QUEUED}:
        with pytest.raises(IllegalTransition):
            transition(ended, target)


def test_live_runs_move_forward_and_blocked_runs_can_resume() -> None:
    assert transition(RunState.QUEUED, RunState.RUNNING) is RunState.RUNNING
    assert transition(RunState.RUNNING, RunState.STOPPING) is RunState.STOPPING
    assert transition(RunState.STOPPING, RunState.USERINTERLUDE) is RunState.USERINTERLUDE
    assert transition(RunState.BLOCKED, RunState.QUEUED) is RunState.QUEUED
    with pytest.raises(IllegalTransition, match="stopping to running"):
        transition(RunState.STOPPING, RunState.RUNNING)
    assert all(transition(s, RunState.FAILED) for s in LIVE_STATES)


async def test_requests_only_escalate_and_listeners_hear_each_change() -> None:
    control = RunControl("r1")
    heard: list[StopReason] = []
    control.add_listener(lambda r: heard.append(r.reason))
    assert control.request_stop(StopReason.STOP, "U1")
    assert not control.request_stop(StopReason.STOP, "U2")
    assert control.request_stop(StopReason.SHUTDOWN, "system")
    assert control.request_stop(StopReason.ABORT, "U1")
    assert not control.request_stop(StopReason.SHUTDOWN, "system")
    assert heard == [StopReason.STOP, StopReason.SHUTDOWN, StopReason.ABORT]
    assert control.user_stopped
    assert (await control.wait_requested()).reason is StopReason.ABORT


def test_a_tool_schema_comes_from_its_signature() -> None:
    @tool
    def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast") -> str:
        """Search the wiki.

        Longer text that the model does not need.
        """
        return query

    spec = search.spec
    assert spec.name == "search"
    assert spec.description == "Search the wiki."
    assert spec.parameters["required"] == ["query"]
    props = spec.parameters["properties"]
    assert props["query"]["type"] == "string"
    assert props["limit"] == {"default": 5, "title": "Limit", "type": "integer"}
    assert props["mode"]["enum"] == ["fast", "deep"]
    assert spec.parameters["additionalProperties"] is False


async def test_unknown_tools_and_extra_arguments_are_errors_for_the_model() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    box = Toolbox([echo])
    unknown = await box.run(ToolCall("c1", "nope", "{}"))
    assert not unknown.ok and "no tool named 'nope'" in unknown.output
    extra = await box.run(ToolCall("c2", "echo", '{"text": "hi", "loud": true}'))
    assert not extra.ok and "loud" in extra.output
    ok = await box.run(ToolCall("c3", "echo", '{"text": "hi"}'))
    assert ok.ok and ok.output == "hi"


def test_the_loop_tool_names_are_reserved() -> None:
    @tool(name="final_report")
    def sneaky() -> str:
        """Pretend to report."""
        return ""

    with pytest.raises(ValueError, match="reserved"):
        Toolbox([sneaky])
