"""The status message's last word on an ended run (docs/stopping.md): why it ended, and whether
and when it resumes on its own, with ``Resume now`` and ``Don't resume`` while a resume
is scheduled, and ``Continue`` under a run that spent its budget until someone presses
it. Snapshots as in ``test_status_view`` (``UPDATE_SNAPSHOTS=1`` rewrites them).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent_core import ExitCode, Outcome
from agent_core.values.records import ResumeState
from bot import messages as m
from bot.views.status import (
    ACTION_CONTINUE,
    ACTION_DONT_RESUME,
    ACTION_RESUME_NOW,
    RESUME_BLOCK_ID,
    EndingView,
    StatusSnapshot,
    render_status,
)
from tests.bot.views.test_status_view import (
    RUN,
    T0,
    assert_snapshot,
    buttons,
    done,
    result,
    validated,
)

RATE_LIMITED = result(
    Outcome.BLOCKED,
    ExitCode.MAX_RETRIES,
    evidence="The model provider is rate-limiting requests (HTTP 429). Turn 2 is checkpointed.",
    next_step="threadpilot resumes it from the checkpoint after 60 s when policy allows.",
)
FULL = result(
    Outcome.BLOCKED,
    ExitCode.TOKEN_LIMIT,
    evidence="The conversation no longer fits the model's context window.",
    next_step="threadpilot continues in a new run from a summary of this one.",
)
SPENT = result(
    Outcome.BLOCKED,
    ExitCode.BUDGET,
    evidence="Read the clock once; the second reading is still to do.",
    next_step=(
        "The request's tool-call budget is spent: 1 tool call used of 1 "
        "(RUN_TOOL_CALL_BUDGET). Reply in the thread to go on with a new budget, or leave it here."
    ),
)
BUDGET_REASON = "The request's budget is spent, not auto-resuming"
AT = T0 + timedelta(seconds=60)
GRACE = "A person stopped a run in this thread 42 s ago (USER_EXIT_GRACE 10 min); not auto-resuming"

CASES: dict[str, tuple[StatusSnapshot, list[str]]] = {
    "ended_rate_limit_scheduled": (
        done(RATE_LIMITED, ending=EndingView("rate_limit", ResumeState.SCHEDULED, AT, "why")),
        [ACTION_RESUME_NOW, ACTION_DONT_RESUME],
    ),
    "ended_rate_limit_not_resuming": (
        done(
            RATE_LIMITED,
            ending=EndingView("rate_limit", ResumeState.DECLINED, reason=GRACE, blocked=True),
        ),
        [],
    ),
    "ended_resume_cancelled": (
        done(
            RATE_LIMITED,
            ending=EndingView("rate_limit", ResumeState.CANCELLED, by="U1", blocked=True),
        ),
        [],
    ),
    "ended_context_continuing": (
        done(FULL, ending=EndingView("context_exhausted", ResumeState.SCHEDULED, T0)),
        [ACTION_DONT_RESUME],
    ),
    "ended_context_continued": (
        done(FULL, ending=EndingView("context_exhausted", ResumeState.STARTED, blocked=True)),
        [],
    ),
    "ended_budget_offers_continue": (
        done(
            SPENT,
            ending=EndingView(
                "budget_exhausted", ResumeState.DECLINED, reason=BUDGET_REASON, blocked=True
            ),
        ),
        [ACTION_CONTINUE],
    ),
    "ended_budget_continuing": (
        done(
            SPENT,
            ending=EndingView(
                "budget_exhausted", ResumeState.SCHEDULED, T0, BUDGET_REASON, "U1", blocked=True
            ),
        ),
        [],
    ),
    "ended_budget_continued": (
        done(
            SPENT,
            ending=EndingView(
                "budget_exhausted", ResumeState.STARTED, None, BUDGET_REASON, "U1", blocked=True
            ),
        ),
        [],
    ),
    "ended_budget_continue_stopped": (
        done(
            SPENT,
            ending=EndingView(
                "budget_exhausted", ResumeState.CANCELLED, None, BUDGET_REASON, "U2", blocked=True
            ),
        ),
        [],
    ),
    "ended_completed": (
        done(
            result(Outcome.FINISHED, ExitCode.FINAL_ANSWER),
            ending=EndingView("completed", ResumeState.DECLINED, reason="Session completed"),
        ),
        [],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(name: str) -> None:
    assert_snapshot(name, render_status(CASES[name][0]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocks_are_valid_block_kit_and_buttons_only_while_scheduled(name: str) -> None:
    snapshot, expected = CASES[name]
    rendered = render_status(snapshot)
    for block in rendered.blocks:
        assert validated(block) == block
    assert buttons(rendered) == expected
    controls = [b for b in rendered.blocks if b["type"] == "actions"]
    assert [b["block_id"] for b in controls] == ([RESUME_BLOCK_ID] if expected else [])
    for element in controls[0]["elements"] if controls else []:
        assert element["value"] == RUN


def test_it_says_why_and_when() -> None:
    snapshot, _ = CASES["ended_rate_limit_scheduled"]
    texts = [
        b["elements"][0]["text"] for b in render_status(snapshot).blocks if b["type"] == "context"
    ]
    assert f"{m.why_ended('rate_limit')}\n{m.resume_scheduled(AT)}" in texts


def test_without_an_ending_nothing_is_added() -> None:
    plain = render_status(done(RATE_LIMITED))
    assert not any("Why it ended" in str(block) for block in plain.blocks)


def test_not_resuming_is_explained_only_for_a_blocked_run() -> None:
    finished = render_status(CASES["ended_completed"][0])
    assert "Not resuming" not in str(finished.blocks)
    blocked = render_status(CASES["ended_rate_limit_not_resuming"][0])
    assert m.not_resuming(GRACE) in str(blocked.blocks)
    assert m.not_resuming(GRACE).endswith("(USER_EXIT_GRACE 10 min).")


def test_a_spent_budget_offers_continue_once_and_then_says_who_continued_it() -> None:
    def said(name: str) -> str:
        return str(render_status(CASES[name][0]).blocks)

    offer = said("ended_budget_offers_continue")
    assert m.CONTINUE_OFFER in offer and m.not_resuming(BUDGET_REASON) in offer
    assert "1 tool call used of 1 (RUN_TOOL_CALL_BUDGET)" in offer  # the budget, named
    assert m.continued("U1") in said("ended_budget_continuing")
    assert m.continued("U1") in said("ended_budget_continued")
    assert m.resume_cancelled("U2") in said("ended_budget_continue_stopped")
    for name in ("ended_budget_continuing", "ended_budget_continued"):
        assert m.CONTINUE_OFFER not in said(name)
