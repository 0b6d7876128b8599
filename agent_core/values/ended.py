"""Why a run ended: one pure function from :class:`Clues` to :class:`EndedBecause`.

The reasons and their order are explained for people in docs/stopping.md.

The loop, the reconciler and the terminal runner each gather what they saw when a run
ended (the exception that ended it, an HTTP status, a provider error code, the stop
request, a signal, a process exit status, a lost lease) and :func:`classify` names the
reason. Nothing here does I/O; the resume decision is :mod:`agent_core.values.resume_policy`.

When clues conflict, the highest class in :data:`PRIORITY` wins::

    rate_limit > completed > context_exhausted > budget_exhausted > user_exit > shutdown
               > worker_lost > error > unknown

``rate_limit``, ``completed``, ``context_exhausted``, ``user_exit`` and ``unknown`` keep
the original order. The four it leaves out sit where they are for these reasons:

- ``budget_exhausted`` > ``user_exit``: a spent budget forces the final turn; a
  person's Stop that lands during that turn came after the budget ended the work, and
  neither resumes. Below ``context_exhausted``: a window that filled says more about
  what to do next (continue from a summary) than the budget that ran out with it.
- ``user_exit`` > ``shutdown``: a person's Stop or Abort says "do not resume this"; a
  restart that lands during the final turn must not undo it (the same reason ``abort``
  outranks ``shutdown`` in :mod:`agent_core.values.stop`).
- ``shutdown`` > ``worker_lost``: both resume from the checkpoint, but a shutdown is
  something the process said (a signal it handled); a lost worker is inferred from a
  lease that ran out, the weaker clue.
- ``worker_lost`` > ``error`` and everything > ``error``: an error seen while a process
  was being stopped or killed is a consequence of that, not the cause; only when nothing
  more specific is known does an error name the ending (and it never resumes).

The loop passes only what *ended* the run: a 429 that a later retry got past is not a
clue, and neither is a failed final turn after a Stop (the person ended the run; the
failure only cost the report, it stays in ``RunResult.error``).

Exit statuses follow the shell's 128 + signal convention: 130 (SIGINT, Ctrl+C) and 131
(SIGQUIT) are a person; 143 (SIGTERM) and 129 (SIGHUP, the terminal closed) are a
shutdown; 137 (SIGKILL) is a lost worker; 0 is a clean, completed exit; any other status
is an error.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from agent_core.values.errors import ContextOverflow, RateLimited

if TYPE_CHECKING:
    from agent_core.values.stop import StopReason

__all__ = ["PRIORITY", "Clues", "EndedBecause", "classify"]


class EndedBecause(StrEnum):
    """Why a run ended, as stored, logged and shown (docs/stopping.md)."""

    RATE_LIMIT = "rate_limit"
    """The model provider refused with a rate limit after the in-run retries were spent."""
    COMPLETED = "completed"
    """The model ended the run on its own: an answer, a report or a question."""
    CONTEXT_EXHAUSTED = "context_exhausted"
    """The conversation filled (or overflowed) the model's context window."""
    USER_EXIT = "user_exit"
    """A person stopped or aborted it (button, stop word, Ctrl+C)."""
    SHUTDOWN = "shutdown"
    """The process running it was asked to go away (SIGTERM, SIGHUP, a deploy)."""
    WORKER_LOST = "worker_lost"
    """The worker running it vanished without a word (kill -9, a crashed host)."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """The request spent its budget (tokens, tool calls, time or cost): never resumed on
    its own (:mod:`agent_core.values.budget`)."""
    ERROR = "error"
    """A failure retrying cannot fix, or a bug."""
    UNKNOWN = "unknown"
    """No clue says why (for example a turn limit, which a resume would only hit again)."""

    @property
    def rank(self) -> int:
        """Higher wins when clues conflict."""
        return len(PRIORITY) - PRIORITY.index(self)


PRIORITY: tuple[EndedBecause, ...] = (
    EndedBecause.RATE_LIMIT,
    EndedBecause.COMPLETED,
    EndedBecause.CONTEXT_EXHAUSTED,
    EndedBecause.BUDGET_EXHAUSTED,
    EndedBecause.USER_EXIT,
    EndedBecause.SHUTDOWN,
    EndedBecause.WORKER_LOST,
    EndedBecause.ERROR,
    EndedBecause.UNKNOWN,
)
"""Strongest first (see the module docstring for why)."""


@dataclass(frozen=True, slots=True)
class Clues:
    """Everything known about a run's end; every field is optional.

    ``error``'s own ``status`` and ``code`` (a :class:`~agent_core.values.errors.ModelError`'s)
    are read too; ``status``, ``code`` and ``message`` add what a stored record or a log
    line says when there is no exception object.
    """

    error: BaseException | None = None
    """The exception that ended the run."""
    status: int | None = None
    """The model endpoint's HTTP status."""
    code: str | None = None
    """The provider's error code (``rate_limit_exceeded``, ``context_length_exceeded``)."""
    message: str | None = None
    """An error message without its exception (a stored ``RunResult.error``)."""
    answered: bool = False
    """The model ended the run itself: a plain answer, ``final_report`` or ``ask_user``."""
    context_full: bool = False
    """The loop's context guard forced the final turn before the window overflowed."""
    budget_spent: bool = False
    """The request's budget ran out and forced the final turn."""
    stop: StopReason | None = None
    """The stop request the run had when it ended (honoured or not)."""
    signal: int | None = None
    """The signal that ended the process."""
    exit_status: int | None = None
    """The process's exit status."""
    worker_lost: bool = False
    """The run's lease ran out with its owner gone and no terminal state written."""


def classify(clues: Clues) -> EndedBecause:
    """The strongest reason any clue points to; ``unknown`` when none points anywhere."""
    found = {
        *_from_error(clues),
        *_from_stop(clues.stop),
        *_from_signal(clues.signal),
        *_from_exit_status(clues.exit_status),
    }
    if clues.answered:
        found.add(EndedBecause.COMPLETED)
    if clues.context_full:
        found.add(EndedBecause.CONTEXT_EXHAUSTED)
    if clues.budget_spent:
        found.add(EndedBecause.BUDGET_EXHAUSTED)
    if clues.worker_lost:
        found.add(EndedBecause.WORKER_LOST)
    return max(found, key=lambda reason: reason.rank, default=EndedBecause.UNKNOWN)


# Provider codes (OpenAI and compatible servers) and message patterns for stored text.
_RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error", "rate_limited"})
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
"""429s that waiting does not cure (the account's quota or budget is spent): errors."""
_RATE_LIMIT_TEXT = re.compile(r"rate.?limit|too many requests|\bHTTP 429\b", re.IGNORECASE)
_CONTEXT_TEXT = re.compile(
    r"context.?length|maximum context|context window|prompt is too long", re.IGNORECASE
)
_QUOTA_TEXT = re.compile(r"insufficient.?quota|exceeded your current quota", re.IGNORECASE)


def _from_error(clues: Clues) -> set[EndedBecause]:
    error = clues.error
    status = clues.status if clues.status is not None else getattr(error, "status", None)
    code = clues.code or getattr(error, "code", None)
    text = " ".join(t for t in (clues.message, str(error) if error else None) if t)
    if error is None and status is None and not code and not text:
        return set()
    if code in _QUOTA_CODES or _QUOTA_TEXT.search(text):
        return {EndedBecause.ERROR}
    found: set[EndedBecause] = set()
    if (
        isinstance(error, RateLimited)
        or status == 429
        or code in _RATE_LIMIT_CODES
        or _RATE_LIMIT_TEXT.search(text)
    ):
        found.add(EndedBecause.RATE_LIMIT)
    if isinstance(error, ContextOverflow) or code in _CONTEXT_CODES or _CONTEXT_TEXT.search(text):
        found.add(EndedBecause.CONTEXT_EXHAUSTED)
    return found or {EndedBecause.ERROR}


def _from_stop(stop: StopReason | None) -> set[EndedBecause]:
    if stop is None:
        return set()
    return {EndedBecause.USER_EXIT if stop.by_person else EndedBecause.SHUTDOWN}


_SIGNALS: dict[int, EndedBecause] = {
    signals.SIGINT: EndedBecause.USER_EXIT,  # Ctrl+C
    signals.SIGQUIT: EndedBecause.USER_EXIT,  # Ctrl+\
    signals.SIGTERM: EndedBecause.SHUTDOWN,
    signals.SIGHUP: EndedBecause.SHUTDOWN,  # the terminal closed: a shutdown
    signals.SIGKILL: EndedBecause.WORKER_LOST,  # no chance to say anything
}


def _from_signal(signum: int | None) -> set[EndedBecause]:
    if signum is None:
        return set()
    return {_SIGNALS.get(signum, EndedBecause.ERROR)}  # SIGSEGV, SIGABRT...: a crash


def _from_exit_status(status: int | None) -> set[EndedBecause]:
    if status is None:
        return set()
    if status == 0:
        return {EndedBecause.COMPLETED}
    if 128 < status < 160:
        return _from_signal(status - 128)
    return {EndedBecause.ERROR}
