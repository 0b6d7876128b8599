"""App Home's Block Kit and the ``/threadpilot`` list (bot/views/home.py).

Snapshots: each case's view is compared with the committed JSON file
``tests/bot/views/snapshots/home_<case>.json``. After an intended change to wording or
layout, regenerate them and review the diff before committing::

    UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/bot/views/test_home_view.py

Besides the snapshots: every block is parsed by slack_sdk's Block Kit models, the
buttons follow each run's state, and however many runs there are (or however long their
tasks), a view stays within Slack's 100 blocks and 250 kB and a message within 50 blocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from agent_core import (
    AuditEvent,
    ExitCode,
    Handoff,
    Outcome,
    RunRecord,
    RunResult,
    RunState,
    Spent,
    StopReason,
    StopRequestRecord,
    ThreadKey,
    Timings,
    Usage,
)
from bot.views.home import (
    ACTION_HOME_ABORT,
    ACTION_HOME_STOP,
    ACTION_STOP_ALL,
    MAX_VIEW_BLOCKS,
    MAX_VIEW_BYTES,
    ListedRun,
    Listing,
    render_home,
    render_list_message,
)

SNAPSHOTS = Path(__file__).parent / "snapshots"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TEAM_URL = "https://threadpilot-test.slack.com/"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def a_run(run_id: str, state: RunState, **fields: Any) -> RunRecord:
    record = RunRecord(
        id=run_id,
        thread=ThreadKey("T1", "C0TPCHAN001", f"1772366{len(run_id):03}.000100"),
        requester="U1",
        task="Find out why the cache is cold & fix <TTL>",
        state=state,
        status_ts=f"1772366{len(run_id):03}.000200",
        created_at=ago(125),
        updated_at=ago(5),
    )
    return dataclasses.replace(record, **fields)


def ended(run_id: str, outcome: Outcome, exit_code: ExitCode, **fields: Any) -> RunRecord:
    reason = {
        ExitCode.USER_STOP: StopReason.STOP,
        ExitCode.USER_ABORT: StopReason.ABORT,
        ExitCode.SHUTDOWN: StopReason.SHUTDOWN,
    }.get(exit_code)
    stopped_by = fields.pop("stopped_by", None)
    result = RunResult(
        run_id=run_id,
        outcome=outcome,
        exit_code=exit_code,
        handoff=Handoff(outcome, "evidence", (), "next", stopped_by),
        stop_reason=reason,
        turns=2,
        usage=Usage(),
        timings=Timings(ago(3600), ago(3000)),
    )
    return a_run(
        run_id,
        RunState(outcome.value),
        outcome=outcome,
        exit_code=exit_code,
        stop_reason=reason,
        stopped_by=stopped_by,
        result=result.to_dict(),
        created_at=ago(3600),
        updated_at=ago(3000),
        **fields,
    )


def pending(run_id: str, kind: StopReason, by: str) -> StopRequestRecord:
    return StopRequestRecord("req-" + run_id, run_id, ThreadKey("T1", "C", "1"), kind, by)


def vote(run_id: str, user: str, value: str) -> AuditEvent:
    return AuditEvent(run_id, "feedback", user, ago(2000), {"value": value})


LIVE = (
    ListedRun(a_run("run-queued", RunState.QUEUED, created_at=ago(3))),
    ListedRun(a_run("run-working", RunState.RUNNING), turns_done=2),
    ListedRun(a_run("run-stop-asked", RunState.RUNNING), 1, pending("x", StopReason.STOP, "U2")),
    ListedRun(a_run("run-stopping", RunState.STOPPING, stopped_by="U1"), turns_done=4),
    ListedRun(a_run("run-aborting", RunState.RUNNING), 3, pending("y", StopReason.ABORT, "U1")),
)
ENDED = (
    ListedRun(
        ended("run-finished", Outcome.FINISHED, ExitCode.FINAL_ANSWER),
        feedback=(vote("run-finished", "U1", "positive"), vote("run-finished", "U3", "negative")),
    ),
    ListedRun(ended("run-stopped", Outcome.USERINTERLUDE, ExitCode.USER_STOP, stopped_by="U2")),
    ListedRun(ended("run-restart", Outcome.BLOCKED, ExitCode.SHUTDOWN, stopped_by="signal:x")),
    # Ended by the reconciler: no stored result, only the row's own fields.
    ListedRun(
        a_run(
            "run-lost",
            RunState.BLOCKED,
            outcome=Outcome.BLOCKED,
            exit_code=ExitCode.SHUTDOWN,
            updated_at=ago(7200),
        )
    ),
)


def member(**fields: Any) -> Listing:
    base: dict[str, Any] = {
        "viewer": "U1",
        "admin": False,
        "now": NOW,
        "team_url": TEAM_URL,
        "public_channels": frozenset({"C0TPCHAN001"}),
    }
    return Listing(**(base | fields))


def many_runs(count: int, *, task: str = "Summarise the incident report") -> tuple[ListedRun, ...]:
    return tuple(
        ListedRun(
            a_run(f"run-{i:04}", RunState.RUNNING, task=f"{task} #{i}", requester=f"U{i % 7}"),
            turns_done=i % 5,
        )
        for i in range(count)
    )


CASES: dict[str, Listing] = {
    "member": member(live=LIVE, ended=ENDED),
    "admin": member(viewer="UADMIN", admin=True, live=LIVE, ended=ENDED, notice="Stopping: done."),
    "empty": member(team_url=None),
    "many_runs": member(viewer="UADMIN", admin=True, live=many_runs(80), ended=ENDED),
}


def assert_snapshot(name: str, actual: dict[str, Any]) -> None:
    path = SNAPSHOTS / f"home_{name}.json"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", "utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path}; create it with UPDATE_SNAPSHOTS=1 and review it")
    assert actual == json.loads(path.read_text("utf-8"))


def buttons(blocks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(action id, value) of every button, in order."""
    return [
        (element["action_id"], element["value"])
        for block in blocks
        for element in block.get("elements", [])
        if isinstance(element, dict) and element.get("type") == "button"
    ]


def text_of(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(name: str) -> None:
    assert_snapshot(name, render_home(CASES[name]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_and_messages_are_valid_block_kit(name: str) -> None:
    view = render_home(CASES[name])
    parsed = View(**view)
    parsed.validate_json()
    for block in [*view["blocks"], *render_list_message(CASES[name]).blocks]:
        model = Block.parse(block)
        assert model is not None
        assert model.to_dict() == block


def test_buttons_follow_each_runs_state() -> None:
    view = render_home(CASES["member"])
    assert buttons(view["blocks"]) == [
        (ACTION_HOME_STOP, "run-queued"),
        (ACTION_HOME_ABORT, "run-queued"),
        (ACTION_HOME_STOP, "run-working"),
        (ACTION_HOME_ABORT, "run-working"),
        (ACTION_HOME_ABORT, "run-stop-asked"),  # a Stop is pending: only Abort is left
        (ACTION_HOME_ABORT, "run-stopping"),
        # aborting: nothing left to press
    ]
    text = text_of(view["blocks"])
    assert "Working: turn 3" in text  # two turns done, the third under way
    assert "Aborting... (requested by <@U1>)" in text
    assert "Stopping: finishing this step, then a summary · Requested by <@U2>" in text


def test_only_admins_get_stop_all_with_a_confirmation() -> None:
    assert ACTION_STOP_ALL not in [a for a, _ in buttons(render_home(CASES["member"])["blocks"])]
    (stop_all,) = [
        e
        for block in render_home(CASES["admin"])["blocks"]
        for e in block.get("elements", [])
        if e.get("action_id") == ACTION_STOP_ALL
    ]
    assert stop_all["confirm"]["title"]["text"] == "Stop every run?"
    assert "all 5 live runs" in stop_all["confirm"]["text"]["text"]
    # Nothing live: nothing to stop, so no button.
    assert ACTION_STOP_ALL not in text_of(render_home(member(admin=True))["blocks"])


def test_ended_runs_say_how_and_why_they_ended_and_their_feedback() -> None:
    text = text_of(render_home(CASES["member"])["blocks"])
    assert "Finished" in text and "why: it completed" in text
    assert "User interlude: stopped by <@U2>" in text and "why: a person stopped it" in text
    assert "why: a restart" in text
    assert "Feedback: 👍 1 · 👎 1" in text
    # Model text is escaped; the thread link points at the status message in its thread.
    assert "cache is cold &amp; fix &lt;TTL&gt;" in text
    assert (
        "https://threadpilot-test.slack.com/archives/C0TPCHAN001/p1772366012000200"
        "?thread_ts=1772366012.000100&cid=C0TPCHAN001" in text
    )


@pytest.mark.parametrize("count", [0, 1, 40, 45, 46, 200, 1000])
def test_any_number_of_runs_fits_a_view_and_a_message(count: int) -> None:
    listing = member(viewer="UADMIN", admin=True, live=many_runs(count), ended=ENDED, notice="x")
    view = render_home(listing)
    assert len(view["blocks"]) <= MAX_VIEW_BLOCKS - 5  # with a margin
    assert len(json.dumps(view).encode()) < MAX_VIEW_BYTES * 0.8
    message = render_list_message(listing)
    assert len(message.blocks) <= 45
    for blocks in (view["blocks"], message.blocks):
        shown = {value for action, value in buttons(blocks) if action == ACTION_HOME_STOP}
        text = text_of(blocks)
        assert "Recently ended" in text and "Feedback: 👍" in text  # the history always fits
        if shown != {r.record.id for r in listing.live}:
            assert f"{count - len(shown):,} more live runs" in text
        assert shown == {f"run-{i:04}" for i in range(len(shown))}  # newest first, in order


def test_huge_tasks_are_cut_and_still_fit() -> None:
    listing = member(live=many_runs(60, task="é" * 20_000 + "<!channel>"), ended=ENDED)
    view = render_home(listing)
    assert len(json.dumps(view).encode()) < MAX_VIEW_BYTES * 0.8
    assert "<!channel>" not in text_of(view["blocks"])
    for block in view["blocks"]:
        text = block.get("text", {}).get("text", "")
        assert len(text) < 3000


def test_a_private_request_is_shown_only_to_its_requester() -> None:
    private = {"D0TPDM00001": "salary review", "G0TPMPIM001": "reorg", "C0TPPRIV001": "incident"}
    runs = [
        ListedRun(
            a_run(
                f"run-{channel}",
                RunState.RUNNING,
                task=task,
                thread=ThreadKey("T1", channel, "1.0"),
            )
        )
        for channel, task in {**private, "C0TPCHAN001": "roadmap"}.items()
    ]
    admin = member(viewer="UADMIN", admin=True, live=tuple(runs))
    for blocks in (render_home(admin)["blocks"], render_list_message(admin).blocks):
        text = text_of(blocks)
        assert "roadmap" in text
        assert not [task for task in private.values() if task in text]
        assert text.count("Private request (in a DM, group DM or private channel)") == 3
        assert len(buttons(blocks)) == 9  # still stoppable: Stop all, and Stop and Abort each
    own = text_of(render_home(dataclasses.replace(admin, viewer="U1"))["blocks"])
    assert all(task in own for task in private.values())


def test_runs_show_what_they_spent_where_it_is_known() -> None:
    finished = ended("run-priced", Outcome.FINISHED, ExitCode.FINAL_ANSWER)
    assert finished.result is not None
    child = {**finished.result, "usage": {"prompt_tokens": 400, "completion_tokens": 100}}
    with_children = {
        **finished.result,
        "usage": {"prompt_tokens": 11_000, "completion_tokens": 900},
        "children": [child],
    }
    spent = Spent(prompt_tokens=11_000, completion_tokens=1_400, tool_calls=7, cost_usd=0.0312)
    listing = member(
        live=(
            ListedRun(a_run("run-held-here", RunState.RUNNING), turns_done=2, spent=spent),
            ListedRun(a_run("run-held-elsewhere", RunState.RUNNING), turns_done=2),
        ),
        ended=(
            # The request's whole spend, when the result carries it.
            ListedRun(
                dataclasses.replace(
                    finished, result={**finished.result, "spent": {**spent.to_dict()}}
                )
            ),
            # Else its tokens, sub-agents' included.
            ListedRun(dataclasses.replace(finished, id="run-tokens", result=with_children)),
        ),
    )
    lines = [
        b["text"]["text"]
        for b in render_home(listing)["blocks"]
        if b["type"] == "section" and "\n" in b["text"]["text"]
    ]
    assert len(lines) == 4
    assert lines[0].endswith(
        "Working: turn 3 · 02:05 elapsed · 12.4k tokens · 7 tool calls · $0.03"
    )
    assert lines[1].endswith("Working: turn 3 · 02:05 elapsed")  # not known on this worker
    assert "· 12.4k tokens · 7 tool calls · $0.03" in lines[2]
    assert lines[3].endswith("· 12.4k tokens")
