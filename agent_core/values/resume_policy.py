"""Whether and when a run that ended resumes on its own (docs/stopping.md).

:func:`decide_resume` is pure: the caller says why the run ended, what the settings are,
how many auto-resumes the thread has had, when a person last stopped a run there, the
earliest moment the run may start again, and what time it is. The answer is a value
(:class:`ResumeAt`, :class:`ResumeNow` or :class:`DontResume`) with a reason written for
logs and the audit trail ("Session ended by user, not auto-resuming"). The rules, in
the order they are checked:

1. ``ended_because`` not in ``AUTO_RESUME``: no (``user_exit``, ``error``, ``unknown``
   are never in it by default; ``completed`` and ``budget_exhausted`` may never be, and
   never resume).
2. A person stopped a run in this thread less than ``USER_EXIT_GRACE`` ago: no. The
   grace is measured at decision time; the stop that ended this very run counts.
3. ``MAX_AUTO_RESUMES`` reached in this thread: no.
4. ``rate_limit``: at ``not_before`` (the run's Retry-After, ``RunResult.resume_after``),
   or after a backoff that doubles with each resume (60 s, 120 s, ... at most 30 min)
   when the provider named no time. ``context_exhausted``: now, as a new run from a
   summary. ``shutdown`` and ``worker_lost``: now, from the checkpoint. Any time in the
   past or present is "now".

The parsers read the three settings' raw text (blank means the default) and raise
:class:`~agent_core.values.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agent_core.values.counting import count
from agent_core.values.ended import EndedBecause
from agent_core.values.errors import ConfigError

__all__ = [
    "DEFAULT_AUTO_RESUME",
    "DontResume",
    "ResumeAt",
    "ResumeDecision",
    "ResumeNow",
    "ResumeSettings",
    "decide_resume",
    "parse_auto_resume",
    "parse_duration",
    "parse_max_auto_resumes",
    "parse_user_exit_grace",
    "rate_limit_backoff",
    "weighs_last_stop",
]

DEFAULT_AUTO_RESUME = frozenset(
    {
        EndedBecause.RATE_LIMIT,
        EndedBecause.CONTEXT_EXHAUSTED,
        EndedBecause.SHUTDOWN,
        EndedBecause.WORKER_LOST,
    }
)
DEFAULT_MAX_AUTO_RESUMES = 3
DEFAULT_USER_EXIT_GRACE = timedelta(minutes=10)
_BACKOFF_FIRST = timedelta(seconds=60)
_BACKOFF_MAX = timedelta(minutes=30)


@dataclass(frozen=True, slots=True)
class ResumeSettings:
    """``AUTO_RESUME``, ``MAX_AUTO_RESUMES`` and ``USER_EXIT_GRACE``, parsed."""

    auto_resume: frozenset[EndedBecause] = DEFAULT_AUTO_RESUME
    max_auto_resumes: int = DEFAULT_MAX_AUTO_RESUMES
    user_exit_grace: timedelta = field(default=DEFAULT_USER_EXIT_GRACE)


@dataclass(frozen=True, slots=True)
class ResumeAt:
    """Resume at ``at`` (a durable schedule: any worker starts it then)."""

    at: datetime
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"decision": "resume_at", "at": self.at.isoformat(), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ResumeNow:
    """Resume as soon as a worker can."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"decision": "resume_now", "reason": self.reason}


@dataclass(frozen=True, slots=True)
class DontResume:
    """Do not resume; ``reason`` says why."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"decision": "dont_resume", "reason": self.reason}


ResumeDecision = ResumeAt | ResumeNow | DontResume

_NOT_LISTED = {
    EndedBecause.USER_EXIT: "Session ended by user, not auto-resuming",
    EndedBecause.COMPLETED: "Session completed, nothing to resume",
    EndedBecause.ERROR: "Session ended with an error, not auto-resuming",
    EndedBecause.UNKNOWN: "Session ended for an unknown reason, not auto-resuming",
    EndedBecause.BUDGET_EXHAUSTED: "The request's budget is spent, not auto-resuming",
}
_NEVER_RESUMED = frozenset({EndedBecause.COMPLETED, EndedBecause.BUDGET_EXHAUSTED})
"""Never resumed on their own, whatever ``AUTO_RESUME`` says: nothing is left to do, or
a person decides whether a request may spend more."""
_WHY_NOW = {
    EndedBecause.CONTEXT_EXHAUSTED: (
        "Context window exhausted; continuing in a new run from a summary"
    ),
    EndedBecause.SHUTDOWN: "Interrupted by a shutdown; resuming from the checkpoint",
    EndedBecause.WORKER_LOST: "The worker running it was lost; resuming from the checkpoint",
    EndedBecause.RATE_LIMIT: "Rate limited by the model provider; its wait is over, resuming",
}


def decide_resume(
    ended_because: EndedBecause,
    *,
    settings: ResumeSettings,
    resumes_in_thread: int,
    last_user_stop_at: datetime | None,
    not_before: datetime | None,
    now: datetime,
) -> ResumeDecision:
    """Whether and when to resume a run that ended for ``ended_because`` (see the module).

    ``resumes_in_thread``: auto-resumes already made in the thread (the Slack side counts
    them since the last run a person started there). ``not_before``: the earliest start,
    e.g. ``RunResult.resume_after``. All datetimes must be timezone-aware.
    """
    if ended_because not in settings.auto_resume or ended_because in _NEVER_RESUMED:
        return DontResume(
            _NOT_LISTED.get(
                ended_because,
                f"Session ended because of {ended_because.value}, which AUTO_RESUME "
                "does not list; not auto-resuming",
            )
        )
    if last_user_stop_at is not None and now - last_user_stop_at < settings.user_exit_grace:
        ago = _duration(now - last_user_stop_at)
        grace = _duration(settings.user_exit_grace)
        return DontResume(
            f"A person stopped a run in this thread {ago} ago (USER_EXIT_GRACE {grace}); "
            "not auto-resuming"
        )
    if resumes_in_thread >= settings.max_auto_resumes:
        return DontResume(
            f"Already auto-resumed {count(resumes_in_thread, 'time')} in this thread "
            f"(MAX_AUTO_RESUMES {settings.max_auto_resumes}); not auto-resuming"
        )
    at = not_before
    if ended_because is EndedBecause.RATE_LIMIT and at is None:
        at = now + rate_limit_backoff(resumes_in_thread)
    if at is not None and at > now:
        return ResumeAt(at, _resume_at_reason(ended_because, at, now))
    return ResumeNow(
        _WHY_NOW.get(
            ended_because,
            f"Session ended because of {ended_because.value}, which AUTO_RESUME lists; resuming",
        )
    )


def weighs_last_stop(ended_because: EndedBecause, settings: ResumeSettings) -> bool:
    """Whether :func:`decide_resume`'s answer for ``ended_because`` can depend on when a
    person last stopped a run in the thread: the caller reads that only then."""
    return ended_because in settings.auto_resume


def rate_limit_backoff(resumes_in_thread: int) -> timedelta:
    """The wait before resuming a rate-limited run whose provider named no time."""
    doublings = min(max(0, resumes_in_thread), 16)  # the cap is reached long before
    return min(_BACKOFF_FIRST * (1 << doublings), _BACKOFF_MAX)


def _resume_at_reason(ended_because: EndedBecause, at: datetime, now: datetime) -> str:
    when = f"at {at.strftime('%H:%M:%S %Z').strip()} (in {_duration(at - now)})"
    if ended_because is EndedBecause.RATE_LIMIT:
        return f"Rate limited by the model provider; resuming {when}"
    return f"Session ended because of {ended_because.value}; resuming {when}"


def _duration(delta: timedelta) -> str:
    seconds = max(0, round(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


# -- the three settings ---------------------------------------------------------------


def parse_auto_resume(raw: str | None) -> frozenset[EndedBecause]:
    """``AUTO_RESUME``: comma-separated reasons (any case), ``none`` for none, blank for
    the default ``rate_limit,context_exhausted,shutdown,worker_lost``."""
    if raw is None or not raw.strip():
        return DEFAULT_AUTO_RESUME
    words = [w.strip().lower() for w in raw.split(",") if w.strip()]
    if words == ["none"]:
        return frozenset()
    known = {r.value: r for r in EndedBecause}
    unknown = [w for w in words if w not in known]
    if unknown:
        raise ConfigError(
            "AUTO_RESUME",
            f"unknown reason {unknown[0]!r}; list some of "
            f"{', '.join(r.value for r in EndedBecause if r not in _NEVER_RESUMED)}, "
            "or 'none'",
        )
    reasons = frozenset(known[w] for w in words)
    if EndedBecause.COMPLETED in reasons:
        raise ConfigError(
            "AUTO_RESUME", "'completed' cannot resume: a completed run has nothing left to do"
        )
    if EndedBecause.BUDGET_EXHAUSTED in reasons:
        raise ConfigError(
            "AUTO_RESUME",
            "'budget_exhausted' cannot resume on its own: a person continues a request "
            "whose budget is spent",
        )
    return reasons


def parse_max_auto_resumes(raw: str | None) -> int:
    """``MAX_AUTO_RESUMES``: a whole number, 0 or more (0 turns auto-resume off); blank: 3."""
    if raw is None or not raw.strip():
        return DEFAULT_MAX_AUTO_RESUMES
    text = raw.strip()
    if not text.isdigit():
        raise ConfigError(
            "MAX_AUTO_RESUMES", f"{raw!r} is not a whole number of resumes (0 or more)"
        )
    return int(text)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)?$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_user_exit_grace(raw: str | None) -> timedelta:
    """``USER_EXIT_GRACE``: seconds (``600``) or with a unit (``90s``, ``10m``, ``1h``);
    ``0`` turns the grace off; blank: 10 minutes."""
    if raw is None or not raw.strip():
        return DEFAULT_USER_EXIT_GRACE
    return parse_duration("USER_EXIT_GRACE", raw)


def parse_duration(setting: str, raw: str) -> timedelta:
    """A duration setting's text: seconds (``600``) or with a unit (``90s``, ``10m``,
    ``1h``). Raises :class:`ConfigError` naming ``setting``."""
    match = _DURATION.match(raw.strip().lower())
    if match is None:
        raise ConfigError(
            setting,
            f"{raw!r} is not a duration; write seconds (600) or 90s, 10m, 1h",
        )
    number, unit = match.groups()
    return timedelta(seconds=float(number) * _UNIT_SECONDS[(unit or "s")[0]])
