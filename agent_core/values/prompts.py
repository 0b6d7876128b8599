"""Every instruction the loop itself sends to the model, in one place.

User text never lands in a system message: guidance from the thread is injected as a
user message, marked as such (docs/stopping.md, Guidance).
"""

from __future__ import annotations

from enum import StrEnum

from agent_core.values.ended import EndedBecause

__all__ = [
    "RESUMED_NOTE",
    "SUMMARY_INSTRUCTION",
    "SYSTEM_PROMPT",
    "FinalTurnReason",
    "continuation_note",
    "final_turn_instruction",
    "guidance_note",
    "resumed_note",
]

SYSTEM_PROMPT = (
    "You are threadpilot, an agent working on a request inside a Slack thread. Use the "
    "tools you are given to do the work. When the work is done, call final_report with "
    "the outcome, the evidence, the artifacts and the handoff (or simply answer in plain "
    "text). If you cannot go on without an answer from the person, call ask_user with one "
    "concrete question. Never end with optional offers such as 'If you want, I can ...'."
)

RESUMED_NOTE = (
    "This run was interrupted (the worker running it restarted) and has been resumed from "
    "the last completed turn. Anything after that turn was lost: check before you assume a "
    "step you were in the middle of took effect, then continue the work."
)

_RATE_LIMITED_NOTE = (
    "This run paused because the model provider rate-limited it, and has been resumed "
    "from where it stopped: nothing was lost. Continue the work."
)


_ONE_MORE_BUDGET_NOTE = (
    "This run's budget ran out, and a person has given it one more budget of the same "
    "size: the conversation continues from the last completed turn. Tool calls refused "
    "because the budget was spent did not run; call again what you still need, then "
    "continue the work."
)


def resumed_note(ended_because: EndedBecause) -> str:
    """What a run resumed from its checkpoint is told about the gap."""
    if ended_because is EndedBecause.RATE_LIMIT:
        return _RATE_LIMITED_NOTE
    if ended_because is EndedBecause.BUDGET_EXHAUSTED:
        return _ONE_MORE_BUDGET_NOTE
    return RESUMED_NOTE


SUMMARY_INSTRUCTION = (
    "You summarise an agent's work so that a fresh run can continue it: the conversation "
    "below no longer fits the model's context window. Write at most 400 words, plain text, "
    "under exactly these headings:\n"
    "Task: what the person asked for, with every constraint they gave.\n"
    "Done and verified: what was done, with concrete results and how they were checked.\n"
    "Artifacts: files, links and ids produced (exact names).\n"
    "Remaining: what is left to do, in order.\n"
    "Open questions: anything undecided or waiting on a person (or 'none').\n"
    "Keep exact values (names, numbers, ids, errors); leave out chatter and raw tool output."
)


def continuation_note(previous_run_id: str) -> str:
    """The system note opening a run that continues one whose context filled up."""
    return (
        f"This run continues run {previous_run_id}, whose conversation filled the context "
        "window. The assistant message below is a summary of that work; the request is "
        "repeated after it. Continue from where the summary leaves off: do not redo work it "
        "lists as done and verified, and check anything it is unsure about."
    )


class FinalTurnReason(StrEnum):
    """Why the loop forces one last turn with only ``final_report`` allowed."""

    USER_STOP = "user_stop"
    MAX_TURNS = "max_turns"
    TOKEN_LIMIT = "token_limit"
    MAX_RETRIES = "max_retries"
    BUDGET = "budget"
    """The request's budget is spent (:mod:`agent_core.values.budget`)."""


_REPORT = (
    "Call the final_report tool now (or answer in plain text) with: outcome; evidence "
    "(what was done and verified so far, with concrete results); artifacts (files, links, "
    "ids produced); handoff (who acts next and exactly what remains). Do not call any "
    "other tool and do not start new work."
)

_WHY = {
    FinalTurnReason.USER_STOP: "The user asked you to stop. Stop working now.",
    FinalTurnReason.MAX_TURNS: "You have used every turn this run is allowed.",
    FinalTurnReason.TOKEN_LIMIT: "The conversation has nearly filled the context window.",
    FinalTurnReason.MAX_RETRIES: (
        "The model endpoint kept failing and the retries are used up; this is the last attempt."
    ),
    FinalTurnReason.BUDGET: "The request's budget is spent, so the work stops here.",
}


def final_turn_instruction(reason: FinalTurnReason, detail: str = "") -> str:
    """The system message of a forced final turn; ``detail`` says more about the reason
    (which budget ran out, and how much of it was spent)."""
    why = f"{_WHY[reason]} {detail}" if detail else _WHY[reason]
    return f"{why} {_REPORT}"


def guidance_note(author: str, text: str) -> str:
    """The user-role message that carries one reply written while the agent worked."""
    return f"Guidance from {author} while you were working: {text}"
