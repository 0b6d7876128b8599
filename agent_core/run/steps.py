"""The values a turn returns, and the :class:`Ending` the loop hands to its finaliser.

The loop ``match``es on :data:`Step` instead of threading flags through branches:

- :class:`Continue` — tools ran; take another turn.
- :class:`FinalAnswer` — the model answered without tools.
- :class:`Reported` — the model called ``final_report``.
- :class:`AskedUser` — the model called ``ask_user``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pydantic

from agent_core.tools.toolbox import FINAL_REPORT, AskUser, FinalReport
from agent_core.values.ended import Clues
from agent_core.values.errors import ModelUnreachable
from agent_core.values.outcomes import ExitCode, Outcome, exit_code_of, strip_softeners
from agent_core.values.prompts import FinalTurnReason
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from agent_core.run.tally import RunTally
    from agent_core.values.chat import ChatMessage, ModelResponse, ToolCall
    from agent_core.values.errors import ModelError

__all__ = [
    "AskedUser",
    "Continue",
    "Ending",
    "FinalAnswer",
    "Reported",
    "Step",
    "assistant_message",
    "budget_spent_before_work",
    "cancelled_ending",
    "context_exhausted_ending",
    "crashed_ending",
    "default_outcome",
    "ending_after_final_turn",
    "ending_for_step",
    "model_failed_ending",
    "parse_ask",
    "parse_report",
    "rate_limited_ending",
    "stopped_before_work",
    "tool_result",
]


@dataclass(frozen=True, slots=True)
class Continue:
    pass


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    text: str


@dataclass(frozen=True, slots=True)
class Reported:
    report: FinalReport
    text: str


@dataclass(frozen=True, slots=True)
class AskedUser:
    question: str
    text: str


Step = Continue | FinalAnswer | Reported | AskedUser


@dataclass(frozen=True, slots=True)
class Ending:
    """How the loop ended, before timings, usage and stop data are attached."""

    outcome: Outcome
    exit_code: ExitCode
    evidence: str
    next_step: str
    artifacts: tuple[str, ...] = ()
    final_text: str = ""
    question: str | None = None
    error: str | None = None
    clues: Clues = field(default_factory=Clues)
    """What ended the run, for :func:`agent_core.values.ended.classify` (the loop adds the stop)."""
    retry_after_s: float | None = None
    """For a rate-limited ending: the provider's Retry-After, when it sent one."""


def parse_report(arguments: str) -> FinalReport | None:
    try:
        return FinalReport.model_validate(json.loads(arguments or "{}"))
    except (ValueError, pydantic.ValidationError):
        return None


def parse_ask(arguments: str) -> str | None:
    try:
        return AskUser.model_validate(json.loads(arguments or "{}")).question
    except (ValueError, pydantic.ValidationError):
        return None


_URL = re.compile(r"https?://[^\s<>()\"']+")
_DONE = "None: the request is answered."


def _artifacts_in(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.rstrip(".,;:") for m in _URL.findall(text)))


def ending_for_step(step: FinalAnswer | Reported | AskedUser) -> Ending:
    """The ending of a run whose model ended it on its own."""
    match step:
        case FinalAnswer(text=text):
            clean = strip_softeners(text)
            return Ending(
                Outcome.FINISHED,
                ExitCode.FINAL_ANSWER,
                evidence=clean,
                next_step=_DONE,
                artifacts=_artifacts_in(clean),
                final_text=clean,
                clues=_ANSWERED,
            )
        case Reported(report=report, text=text):
            return _from_report(
                Outcome(report.outcome), ExitCode.FINAL_ANSWER, report, text, clues=_ANSWERED
            )
        case AskedUser(question=question, text=text):
            return Ending(
                Outcome.ASK_USER_QUESTION,
                ExitCode.FINAL_ANSWER,
                evidence=strip_softeners(text) or "The agent needs an answer to go on.",
                next_step=f"The requester answers: {question}",
                question=question,
                final_text=strip_softeners(text),
                clues=_ANSWERED,
            )


_ANSWERED = Clues(answered=True)


_EXIT_FOR = {
    FinalTurnReason.USER_STOP: ExitCode.USER_STOP,
    FinalTurnReason.MAX_TURNS: ExitCode.MAX_TURNS,
    FinalTurnReason.TOKEN_LIMIT: ExitCode.TOKEN_LIMIT,
    FinalTurnReason.MAX_RETRIES: ExitCode.MAX_RETRIES,
    FinalTurnReason.BUDGET: ExitCode.BUDGET,
}


def ending_after_final_turn(
    reason: FinalTurnReason,
    report: FinalReport | None,
    text: str,
    *,
    how: str,
    default_outcome: Outcome,
    error: str | None = None,
    fallback_evidence: str = "",
    cause: ModelError | None = None,
    spent: str = "",
) -> Ending:
    """The ending after a forced final turn (or after the final turn itself failed).

    A user stop is always ``userinterlude``: the stop was theirs, not the model's; a
    spent budget always ``blocked``, and its handoff starts with ``spent`` (which budget,
    and what was spent of it). For the other limits, the model's own report decides;
    without one, ``default_outcome`` does. ``cause``: the model error that forced the
    final turn (spent retries), a clue to why the run ended; a failure of the final turn
    itself is only reported (``error``).
    """
    exit_code = _EXIT_FOR[reason]
    outcome = _final_turn_outcome(reason, report, default_outcome)
    clues = Clues(
        error=cause,
        context_full=reason is FinalTurnReason.TOKEN_LIMIT,
        budget_spent=reason is FinalTurnReason.BUDGET,
        # A turn limit is no reason of its own: finished work is completed, else unknown.
        answered=reason is FinalTurnReason.MAX_TURNS and outcome is Outcome.FINISHED,
    )
    if report is not None:
        ending = _from_report(outcome, exit_code, report, text, error=error, clues=clues)
        if not spent:
            return ending
        return dataclasses.replace(ending, next_step=f"{spent} {ending.next_step}")
    clean = strip_softeners(text)
    return Ending(
        outcome,
        exit_code,
        evidence=clean or fallback_evidence or "The run ended before it could report.",
        next_step=_next_step_for(reason, how, spent, cause),
        artifacts=_artifacts_in(clean),
        final_text=clean,
        error=error,
        clues=clues,
    )


def _final_turn_outcome(
    reason: FinalTurnReason, report: FinalReport | None, default_outcome: Outcome
) -> Outcome:
    if reason is FinalTurnReason.USER_STOP:
        return Outcome.USERINTERLUDE
    if reason is FinalTurnReason.BUDGET:
        return Outcome.BLOCKED
    return Outcome(report.outcome) if report is not None else default_outcome


def _next_step_for(
    reason: FinalTurnReason, how: str, spent: str = "", cause: ModelError | None = None
) -> str:
    if reason is FinalTurnReason.BUDGET:
        return f"{spent} {_sentence(how)} to go on with a new budget, or leave it here."
    if reason is FinalTurnReason.USER_STOP:
        return f"The requester decides: {how} to continue, or leave it stopped."
    if isinstance(cause, ModelUnreachable):
        return (
            f"Nothing reached the model at {cause.url}: check that {cause.setting} names "
            f"the endpoint and that it is up; then {how}."
        )
    if reason is FinalTurnReason.MAX_RETRIES:
        return f"Retry once the model endpoint is healthy again: {how}."
    return f"{_sentence(how)} to continue from here in a new run."


def _sentence(how: str) -> str:
    return how[:1].upper() + how[1:]


def _from_report(
    outcome: Outcome,
    exit_code: ExitCode,
    report: FinalReport,
    text: str,
    error: str | None = None,
    clues: Clues | None = None,
) -> Ending:
    return Ending(
        outcome,
        exit_code,
        evidence=strip_softeners(report.evidence),
        next_step=strip_softeners(report.handoff) or _DONE,
        artifacts=tuple(report.artifacts),
        final_text=strip_softeners(text),
        error=error,
        clues=clues or Clues(),
    )


def stopped_before_work(how: str) -> Ending:
    """A Stop honoured before the first step completed: the model was never called."""
    return Ending(
        Outcome.USERINTERLUDE,
        ExitCode.USER_STOP,
        evidence="Stopped before any work was done; the model was not called.",
        next_step=f"The requester decides: {how} to start again.",
    )


def budget_spent_before_work(spent: str, how: str) -> Ending:
    """The request's budget was spent before this run completed a step (a sub-agent
    whose siblings spent it, a continuation with nothing left): the model is not called."""
    return Ending(
        Outcome.BLOCKED,
        ExitCode.BUDGET,
        evidence="The budget was spent before this run did any work; the model was not called.",
        next_step=_next_step_for(FinalTurnReason.BUDGET, how, spent),
        clues=Clues(budget_spent=True),
    )


def crashed_ending(exc: Exception, how: str) -> Ending:
    """A bug or a store failure inside the loop: the run still ends, and says so."""
    return Ending(
        Outcome.FAILED,
        ExitCode.ERROR,
        evidence=f"threadpilot failed internally: {exc}",
        next_step=f"An admin checks the logs; {how} to retry.",
        error=repr(exc),
        clues=Clues(error=exc),
    )


def default_outcome(reason: FinalTurnReason, error: ModelError | None) -> Outcome:
    """The outcome of a forced final turn when the model filed no report."""
    if reason is FinalTurnReason.MAX_RETRIES:
        rate_limited = error is not None and error.status == 429
        return Outcome.BLOCKED if rate_limited else Outcome.FAILED
    return Outcome.BLOCKED


def model_failed_ending(
    error: ModelError, outcome: Outcome, code: ExitCode, tally: RunTally, *, how: str
) -> Ending:
    return Ending(
        outcome,
        code,
        evidence=f"{error}. {tally.progress_summary()}",
        next_step="An admin checks the model settings (MODEL_API and its key, model and "
        f"URL); then {how} to retry.",
        error=str(error),
        clues=Clues(error=error),
    )


def rate_limited_ending(
    error: ModelError, retry_after_s: float | None, tally: RunTally, *, how: str, stored: bool
) -> Ending:
    """The in-run retries were spent on rate limits: blocked, resumable from the checkpoint
    when the run is ``stored`` (the app may resume it; a terminal keeps nothing).

    No final turn: the provider has just refused for a while, so a last request would
    only be refused too. The handoff is built from what the run recorded. Whether the run
    resumes on its own is decided after it ended (the resume policy), and said by
    whoever shows that decision: the handoff says only what a person can do.
    """
    wait = f" (it asked for {retry_after_s:g} s)" if retry_after_s is not None else ""
    if stored:
        kept = f" The conversation up to turn {tally.steps_completed} is checkpointed."
        next_step = f"Once the provider's rate limit has passed{wait}, {how} to go on."
    else:
        kept = ""
        after = f"{retry_after_s:g} s" if retry_after_s is not None else "a backoff"
        next_step = f"Nothing is running. Once {after} has passed, {how} to retry."
    return Ending(
        Outcome.BLOCKED,
        ExitCode.MAX_RETRIES,
        evidence=f"The model provider is rate-limiting requests ({error}). "
        f"{tally.progress_summary()}{kept}",
        next_step=next_step,
        error=str(error),
        clues=Clues(error=error),
        retry_after_s=retry_after_s,
    )


def context_exhausted_ending(
    error: ModelError, tally: RunTally, *, how: str, stored: bool
) -> Ending:
    """The conversation no longer fits the context window: blocked, to be continued in a
    new run from a summary (:mod:`agent_core.run.compaction`) when the run is ``stored``."""
    continued = "threadpilot continues in a new run from a summary of this one when policy "
    return Ending(
        Outcome.BLOCKED,
        ExitCode.TOKEN_LIMIT,
        evidence=f"The conversation no longer fits the model's context window ({error}). "
        f"{tally.progress_summary()}",
        next_step=f"{continued}allows; otherwise {how} with a narrower request."
        if stored
        else f"Nothing is running. {_sentence(how)} with a narrower request.",
        error=str(error),
        clues=Clues(error=error),
    )


def cancelled_ending(reason: StopReason, tally: RunTally, *, how: str, stored: bool) -> Ending:
    """The ending of a run whose task was cancelled by an abort or a shutdown.

    ``stored``: the run has a store, so a shut-down run is checkpointed and the app
    resumes it; without one (a terminal) nothing was kept, and a person starts again.
    """
    during = f"during turn {tally.turns} while {tally.activity}"
    if reason is StopReason.ABORT:
        return Ending(
            Outcome.USERINTERLUDE,
            exit_code_of(reason),
            evidence=f"Aborted {during}; the interrupted step was discarded. "
            f"{tally.progress_summary()}",
            next_step=f"Nothing is running. {_sentence(how)} to start again.",
        )
    if not stored:
        return Ending(
            Outcome.BLOCKED,
            exit_code_of(reason),
            evidence=f"Interrupted by a shutdown {during}; nothing was saved.",
            next_step=f"Nothing is running. {_sentence(how)} to start again.",
        )
    return Ending(
        Outcome.BLOCKED,
        exit_code_of(reason),
        evidence=f"Interrupted by a shutdown {during}; the conversation up to turn "
        f"{tally.steps_completed} is checkpointed.",
        next_step=f"After the restart, {how} to go on.",
    )


# -- the transcript -------------------------------------------------------------------


def assistant_message(response: ModelResponse) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": response.text or None}
    if response.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in response.tool_calls
        ]
    if response.reasoning is not None:
        message["reasoning"] = response.reasoning.to_message()
    return message


def tool_result(call: ToolCall, content: str) -> ChatMessage:
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def final_report_of(response: ModelResponse) -> FinalReport | None:
    """The report a final turn's reply makes through ``final_report``, if it makes one."""
    return next(
        (
            r
            for c in response.tool_calls
            if c.name == FINAL_REPORT.name
            if (r := parse_report(c.arguments))
        ),
        None,
    )
