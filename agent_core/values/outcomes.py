"""How a run ended, in the vocabulary users see (docs/stopping.md), and the result object.

Every run ends in exactly one canonical :class:`Outcome`. Older words that may sit in
stored state (``done``, ``cancelled``, ``blocked_on_user``...) are read through
:func:`normalize_outcome` and never shown. The terminal report always has four parts:
Outcome, Evidence, Artifacts, Handoff (:class:`Handoff`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agent_core.values.budget import Spent
from agent_core.values.chat import Usage
from agent_core.values.ended import Clues, EndedBecause, classify
from agent_core.values.errors import UnknownOutcome
from agent_core.values.guidance import Guidance
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "SHUTDOWN_WORDS",
    "ExitCode",
    "Handoff",
    "Outcome",
    "RunResult",
    "Timings",
    "ended_because_of",
    "ended_by_person",
    "exit_code_of",
    "normalize_outcome",
    "outcome_label",
    "strip_softeners",
]


class Outcome(StrEnum):
    """The five canonical ways a run can end."""

    FINISHED = "finished"
    """The work is done; evidence and artifacts say what was produced."""
    BLOCKED = "blocked"
    """A non-user prerequisite is missing (or the worker went away); resumable."""
    FAILED = "failed"
    """The work or its verification failed."""
    USERINTERLUDE = "userinterlude"
    """A person stopped or aborted the run on purpose."""
    ASK_USER_QUESTION = "askuserQuestion"
    """The agent needs an answer to one blocking question before it can go on."""


class ExitCode(StrEnum):
    """Why the loop ended, as docs/stopping.md labels it."""

    FINAL_ANSWER = "EXIT-FINAL-ANSWER"
    USER_STOP = "EXIT-USER-STOP"
    USER_ABORT = "EXIT-USER-ABORT"
    SHUTDOWN = "EXIT-SHUTDOWN"
    TOKEN_LIMIT = "EXIT-TOKEN-LIMIT"
    MAX_TURNS = "EXIT-MAX-TURNS"
    MAX_RETRIES = "EXIT-MAX-RETRIES"
    BUDGET = "EXIT-BUDGET"
    ERROR = "EXIT-ERROR"


# How each canonical outcome is named to people, on every surface: the label
# always starts with one of these, never with a legacy word such as "Aborted".
OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.FINISHED: "Finished",
    Outcome.BLOCKED: "Blocked",
    Outcome.FAILED: "Failed",
    Outcome.USERINTERLUDE: "User interlude",
    Outcome.ASK_USER_QUESTION: "Question for you",
}

# A stop reason's exit code, one table both ways: older records may lack a stop reason,
# and the exit code still says what happened.
_REASON_FROM_EXIT = {
    ExitCode.USER_STOP: StopReason.STOP,
    ExitCode.USER_ABORT: StopReason.ABORT,
    ExitCode.SHUTDOWN: StopReason.SHUTDOWN,
}
_EXIT_FROM_REASON = {reason: code for code, reason in _REASON_FROM_EXIT.items()}


def exit_code_of(reason: StopReason) -> ExitCode:
    """The exit code of a run that ``reason`` ended."""
    return _EXIT_FROM_REASON[reason]


SHUTDOWN_WORDS = "interrupted by a shutdown"
"""How a label names a shutdown unless the surface has its own words for it."""


def outcome_label(
    outcome: Outcome,
    *,
    stop_reason: StopReason | None = None,
    exit_code: ExitCode | None = None,
    stopped_by: str | None = None,
    name: Callable[[str], str] = str,
    shutdown: str = SHUTDOWN_WORDS,
) -> str:
    """The canonical label first, then what a person needs to know about it:
    "User interlude: stopped by <@U1>", "Blocked: interrupted by a shutdown", "Finished".

    ``name`` renders a person (``<@U1>`` in Slack, the plain id in a terminal), and
    ``shutdown`` says what a shutdown was in the surface's words (the app: a restart). A
    stop can be honoured and the run still end another way (the answer was already
    complete, or the final turn failed): then the real outcome leads and the stop is
    named after it.
    """
    base = OUTCOME_LABELS[outcome]
    reason = stop_reason or (_REASON_FROM_EXIT.get(exit_code) if exit_code else None)
    by = f" by {name(stopped_by)}" if stopped_by else ""
    if outcome is Outcome.USERINTERLUDE:
        verb = "aborted" if reason is StopReason.ABORT else "stopped"
        return f"{base}: {verb}{by}"
    if outcome is Outcome.BLOCKED and reason is StopReason.SHUTDOWN:
        return f"{base}: {shutdown}"
    return f"{base} (stop requested{by})" if stopped_by else base


# Legacy words and their canonical outcomes. ``blocked_on_user`` depends on whether a
# question was asked.
_LEGACY: dict[str, Outcome] = {
    "finish": Outcome.FINISHED,
    "complete": Outcome.FINISHED,
    "completed": Outcome.FINISHED,
    "done": Outcome.FINISHED,
    "success": Outcome.FINISHED,
    "succeeded": Outcome.FINISHED,
    "cancelled": Outcome.USERINTERLUDE,
    "canceled": Outcome.USERINTERLUDE,
    "abort": Outcome.USERINTERLUDE,
    "aborted": Outcome.USERINTERLUDE,
    "stopped": Outcome.USERINTERLUDE,
    "interrupted": Outcome.BLOCKED,
    "paused": Outcome.BLOCKED,
    "pending": Outcome.BLOCKED,
    "error": Outcome.FAILED,
    "errored": Outcome.FAILED,
    "failure": Outcome.FAILED,
}
_CANONICAL = {o.value.lower(): o for o in Outcome}


def normalize_outcome(value: str, *, question_asked: bool = False) -> Outcome:
    """Map a canonical or legacy outcome word to its canonical :class:`Outcome`.

    ``blocked_on_user`` becomes ``askuserQuestion`` only when question metadata shows the
    agent asked a blocking question; otherwise it is a user wait (``userinterlude``).
    Raises :class:`UnknownOutcome` for a word neither table knows.
    """
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    if key in _CANONICAL:
        return _CANONICAL[key]
    if key == "blocked_on_user":
        return Outcome.ASK_USER_QUESTION if question_asked else Outcome.USERINTERLUDE
    if key in _LEGACY:
        return _LEGACY[key]
    raise UnknownOutcome(f"unknown run outcome {value!r}")


# Closing softeners (never allowed at the end of a report): optional offers that make
# the run's state ambiguous. Matched only as whole trailing sentences.
_SOFTENER = re.compile(
    r"""(?isx)
    (?:^|(?<=[.!?:\n]))\s*
    (?:
        (?:if\s+you(?:'d|\s+would)?\s+(?:want|like|prefer)(?:\s+to|\s+me\s+to)?\b[^\n]*)
      | (?:would\s+you\s+like\s+(?:me\s+to|to)\b[^\n]*)
      | (?:do\s+you\s+want\s+me\s+to\b[^\n]*)
      | (?:shall\s+i\b[^\n]*\?)
      | (?:should\s+i\s+(?:continue|proceed|go\s+ahead)\b[^\n]*)
      | (?:let\s+me\s+know\s+if\b[^\n]*)
      | (?:feel\s+free\s+to\b[^\n]*)
      | (?:happy\s+to\s+help\s+(?:further|more)\b[^\n]*)
    )
    \s*$
    """
)


def strip_softeners(text: str) -> str:
    """Remove trailing optional-offer sentences ("If you want, I can ...") from ``text``.

    Only the end of the text is touched, repeatedly, so an offer in the middle of an
    answer (which is content) stays. The result never ends with a softener.
    """
    result = text.rstrip()
    while True:
        match = _SOFTENER.search(result)
        if match is None:
            return result
        result = result[: match.start()].rstrip()


@dataclass(frozen=True, slots=True)
class Handoff:
    """The four-part terminal report."""

    outcome: Outcome
    evidence: str
    artifacts: tuple[str, ...] = ()
    next_step: str = ""
    """Who acts next and what exactly (the "Handoff" part)."""
    stopped_by: str | None = None
    """Who stopped or aborted the run, if anyone did."""
    question: str | None = None
    """For ``askuserQuestion``: the one blocking question."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "evidence": self.evidence,
            "artifacts": list(self.artifacts),
            "handoff": self.next_step,
            "stopped_by": self.stopped_by,
            "question": self.question,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Handoff:
        return cls(
            outcome=normalize_outcome(str(data["outcome"])),
            evidence=str(data.get("evidence", "")),
            artifacts=tuple(str(a) for a in data.get("artifacts", ())),
            next_step=str(data.get("handoff", "")),
            stopped_by=data.get("stopped_by"),
            question=data.get("question"),
        )


@dataclass(frozen=True, slots=True)
class Timings:
    """When a run started and ended, and when a stop was asked for and honoured."""

    started_at: datetime
    ended_at: datetime
    stop_requested_at: datetime | None = None
    stop_honoured_at: datetime | None = None

    @property
    def duration_s(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Timings:
        """Rebuild timings stored with :meth:`to_dict`."""
        return cls(
            started_at=_parse_time(data["started_at"]),
            ended_at=_parse_time(data["ended_at"]),
            stop_requested_at=_parse_optional_time(data.get("stop_requested_at")),
            stop_honoured_at=_parse_optional_time(data.get("stop_honoured_at")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "duration_s": round(self.duration_s, 6),
            "stop_requested_at": _iso(self.stop_requested_at),
            "stop_honoured_at": _iso(self.stop_honoured_at),
        }


# Process exit statuses for the terminal runner (docs/stopping.md, In a terminal).
_PROCESS_STATUS = {
    ExitCode.USER_ABORT: 130,
    ExitCode.SHUTDOWN: 143,
}


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything a caller learns when a run ends. Exactly one per run."""

    run_id: str
    outcome: Outcome
    exit_code: ExitCode
    handoff: Handoff
    stop_reason: StopReason | None
    turns: int
    usage: Usage
    timings: Timings
    final_text: str = ""
    error: str | None = None
    children: tuple[RunResult, ...] = field(default=())
    undelivered_guidance: tuple[Guidance, ...] = field(default=())
    """Guidance still queued when the run ended (a stop won, or it came too late)."""
    ended_because: EndedBecause = EndedBecause.UNKNOWN
    """Why the run ended (:mod:`agent_core.values.ended`). A result built without it (older
    code, a stored result from before it existed) is classified from what it records."""
    retry_after_s: float | None = None
    """For ``rate_limit``: the provider's Retry-After in seconds, when it sent one."""
    continued_from: str | None = None
    """The run whose context filled up and whose summary this run started from."""
    spent: Spent | None = None
    """What the whole request had spent when this (top-level) run ended, earlier legs and
    sub-agents included: an automatic resume or continuation of the request goes on from
    it (:mod:`agent_core.values.budget`). None for a sub-agent (its parent's counts it), and in
    results stored before it existed."""

    def __post_init__(self) -> None:
        if self.ended_because is EndedBecause.UNKNOWN:
            derived = ended_because_of(self.exit_code, self.outcome, self.stop_reason, self.error)
            object.__setattr__(self, "ended_because", derived)

    @property
    def resume_after(self) -> datetime | None:
        """The earliest time a resume may start (the end plus the Retry-After), if any."""
        if self.retry_after_s is None:
            return None
        return self.timings.ended_at + timedelta(seconds=self.retry_after_s)

    @property
    def process_status(self) -> int:
        """0 finished or stopped, 130 aborted, 143 shutdown, 1 failed."""
        if self.exit_code in _PROCESS_STATUS:
            return _PROCESS_STATUS[self.exit_code]
        return 1 if self.outcome is Outcome.FAILED else 0

    @property
    def summary(self) -> str:
        return self.handoff.evidence

    def label(self, name: Callable[[str], str] = str, shutdown: str = SHUTDOWN_WORDS) -> str:
        """The outcome as people read it (:func:`outcome_label`)."""
        return outcome_label(
            self.outcome,
            stop_reason=self.stop_reason,
            exit_code=self.exit_code,
            stopped_by=self.handoff.stopped_by,
            name=name,
            shutdown=shutdown,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        """Rebuild a result stored with :meth:`to_dict` (legacy outcome words allowed)."""
        usage = data.get("usage") or {}
        reason = data.get("stop_reason")
        handoff = Handoff.from_dict(data["handoff"])
        return cls(
            run_id=str(data["run_id"]),
            outcome=normalize_outcome(str(data["outcome"]), question_asked=bool(handoff.question)),
            exit_code=ExitCode(data["exit_code"]),
            handoff=handoff,
            stop_reason=StopReason(reason) if reason else None,
            turns=int(data.get("turns", 0)),
            usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
            timings=Timings.from_dict(data.get("timings") or {}),
            final_text=str(data.get("final_text", "")),
            error=data.get("error"),
            children=tuple(cls.from_dict(c) for c in data.get("children", ())),
            undelivered_guidance=_guidance_from(data.get("undelivered_guidance", ())),
            ended_because=_ended_because_from(data.get("ended_because")),
            retry_after_s=_optional_float(data.get("retry_after_s")),
            continued_from=data.get("continued_from"),
            spent=Spent.from_dict(data["spent"]) if data.get("spent") else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "outcome": self.outcome.value,
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
            "exit_code": self.exit_code.value,
            "summary": self.summary,
            "handoff": self.handoff.to_dict(),
            "final_text": self.final_text,
            "turns": self.turns,
            "usage": {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
                "total_tokens": self.usage.total_tokens,
            },
            "timings": self.timings.to_dict(),
            "error": self.error,
            "children": [c.to_dict() for c in self.children],
            "undelivered_guidance": [g.to_dict() for g in self.undelivered_guidance],
            "ended_because": self.ended_because.value,
            "retry_after_s": self.retry_after_s,
            "resume_after": _iso(self.resume_after),
            "continued_from": self.continued_from,
            "spent": self.spent.to_dict() if self.spent is not None else None,
        }


def ended_by_person(
    run_id: str,
    reason: StopReason,
    by: str,
    *,
    evidence: str,
    next_step: str,
    turns: int,
    timings: Timings,
) -> RunResult:
    """The result of a run a person stopped or aborted where its loop could not write
    one (it waited in the queue, or its worker went away): ``userinterlude``, the exit
    code of ``reason``, and who asked."""
    if not reason.by_person:
        raise ValueError(f"a person stops or aborts a run, not {reason.value}")
    outcome = Outcome.USERINTERLUDE
    return RunResult(
        run_id=run_id,
        outcome=outcome,
        exit_code=exit_code_of(reason),
        handoff=Handoff(outcome, evidence=evidence, next_step=next_step, stopped_by=by),
        stop_reason=reason,
        turns=turns,
        usage=Usage(),
        timings=timings,
    )


def ended_because_of(
    exit_code: ExitCode, outcome: Outcome, stop_reason: StopReason | None, error: str | None
) -> EndedBecause:
    """Why a run ended, from what a result records (for results built without it)."""
    clues = Clues(
        stop=stop_reason or _REASON_FROM_EXIT.get(exit_code),
        answered=exit_code is ExitCode.FINAL_ANSWER
        or (exit_code is ExitCode.MAX_TURNS and outcome is Outcome.FINISHED),
        context_full=exit_code is ExitCode.TOKEN_LIMIT,
        budget_spent=exit_code is ExitCode.BUDGET,
        message=error if exit_code in (ExitCode.MAX_RETRIES, ExitCode.ERROR) else None,
    )
    return classify(clues)


def _ended_because_from(value: Any) -> EndedBecause:
    """A stored reason; missing or unreadable means "classify from the record"."""
    try:
        return EndedBecause(value)
    except ValueError:
        return EndedBecause.UNKNOWN


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _guidance_from(items: Any) -> tuple[Guidance, ...]:
    return tuple(Guidance.from_dict(g) for g in items)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _parse_optional_time(value: str | None) -> datetime | None:
    return _parse_time(value) if value else None
