"""The status message's sub-agents (the run's tasks) and its tools' progress: snapshots,
Block Kit validity, and Slack's limits whatever the children (see test_status_view.py for
the rest of the message)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent_core import ExitCode, Outcome, StopReason
from bot import messages as m
from bot.views.status import ChildTask, render_status
from tests.bot.views.test_status_view import (
    _SETTINGS,
    assert_snapshot,
    check_limits,
    done,
    live,
    result,
    validated,
)
from tests.fakes.slack_blocks import blocks_text

COUNTING = ChildTask(
    "child-1",
    "Count the files in src/ & tests/",
    m.sub_agent_turn(2, m.activity_tool_progress("fake__slow", 1, 3, "step 1 of 3")),
)
READING = ChildTask(
    "child-2",
    "Read the <wiki> page on releases",
    result=result(Outcome.FINISHED, ExitCode.FINAL_ANSWER),
)
STOPPED = ChildTask(
    "child-3",
    "Check the CI",
    result=result(
        Outcome.USERINTERLUDE, ExitCode.USER_STOP, reason=StopReason.STOP, stopped_by="U1"
    ),
)

CASES = {  # snapshots of the live views; the done view's text is checked below
    "running_with_children": live(
        "running", activity=m.ACTIVITY_SUB_AGENTS, children=(READING, COUNTING)
    ),
    "running_with_tool_progress": live(
        "running", activity=m.activity_tool_progress("git__git_log", 40, None, "reading <main>")
    ),
}
DONE_WITH_CHILDREN = done(
    result(
        Outcome.USERINTERLUDE,
        ExitCode.USER_STOP,
        reason=StopReason.STOP,
        stopped_by="U1",
        evidence="The sub-agents counted 120 files; the CI check was stopped.",
    ),
    children=(READING, STOPPED),
)


def test_snapshots() -> None:
    for name, snapshot in CASES.items():
        rendered = render_status(snapshot)
        assert_snapshot(name, rendered)
        for block in rendered.blocks:
            assert validated(block) == block


def test_the_children_are_listed_as_tasks_with_their_state() -> None:
    text = blocks_text(render_status(CASES["running_with_children"]).blocks)
    assert (
        "*Sub-agents*\n"
        ":white_check_mark: Read the &lt;wiki&gt; page on releases · Finished\n"
        ":hourglass_flowing_sand: Count the files in src/ &amp; tests/ · turn 2: Running the "
        "tool `fake__slow`: step 1 of 3 (1/3)"
    ) in text
    done_text = blocks_text(render_status(DONE_WITH_CHILDREN).blocks)
    assert ":black_square_for_stop: Check the CI · User interlude: stopped by <@U1>" in done_text


def test_many_children_keep_the_newest_and_count_the_rest() -> None:
    children = tuple(ChildTask(f"c{i}", f"task number {i} " + "x" * 150) for i in range(40))
    rendered = render_status(live("running", children=children))
    check_limits(rendered)
    text = blocks_text(rendered.blocks)
    assert "task number 39" in text
    assert "task number 0 " not in text
    assert "… and " in text and " earlier" in text


@_SETTINGS
@given(
    tasks=st.lists(st.text(min_size=1, max_size=3_000), min_size=1, max_size=60),
    message=st.text(max_size=5_000),
)
def test_any_children_fit_slack(tasks: list[str], message: str) -> None:
    activity = m.sub_agent_turn(3, m.activity_tool_progress("x" * 64, 2, 7, message))
    children = tuple(ChildTask(f"c{i}", task, activity) for i, task in enumerate(tasks))
    check_limits(render_status(live("stopping", stop_reason=StopReason.STOP, children=children)))
    finished = result(Outcome.FINISHED, ExitCode.FINAL_ANSWER, evidence=message * 3)
    ended = tuple(ChildTask(c.child_id, c.task, result=finished) for c in children)
    check_limits(render_status(done(finished, children=ended, answer=message)))
