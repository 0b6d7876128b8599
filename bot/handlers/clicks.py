"""Deciding what a Stop or Abort click does, as a pure function of the run's state.

Kept free of Slack I/O so every case (stale, duplicate, unauthorized, escalation) is a
plain unit test. :mod:`bot.handlers.actions` carries out the decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from agent_core import StopReason
from bot.policy import may_stop

if TYPE_CHECKING:
    from agent_core import RunResult
    from bot.settings import Settings
    from bot.supervisor import LiveRun

__all__ = ["DOUBLE_CLICK_S", "Click", "RunView", "Verdict", "decide", "decide_for"]

DOUBLE_CLICK_S = 3.0
"""A second Stop from the same user within this window is a double click, not a request
to escalate."""


class Verdict(StrEnum):
    STOP = "stop"
    ABORT = "abort"
    ESCALATE = "escalate"
    """Stop pressed again on a stopping run: abort it (SPEC.md section 1)."""
    DUPLICATE = "duplicate"
    ALREADY_ABORTING = "already_aborting"
    NOT_ALLOWED = "not_allowed"
    FINISHED = "finished"
    NOT_FOUND = "not_found"

    @property
    def changes_state(self) -> bool:
        return self in (Verdict.STOP, Verdict.ABORT, Verdict.ESCALATE)

    @property
    def requests(self) -> StopReason | None:
        """The stop this verdict commits, if any."""
        if self is Verdict.STOP:
            return StopReason.STOP
        if self in (Verdict.ABORT, Verdict.ESCALATE):
            return StopReason.ABORT
        return None


@dataclass(frozen=True, slots=True)
class Click:
    user: str
    action: StopReason
    at: float
    """Monotonic time of the click."""


@dataclass(frozen=True, slots=True)
class RunView:
    """What a click decision needs to know about a run, wherever the run is owned."""

    requester: str
    finished: bool
    pending: StopReason | None
    """The stop already requested (pending or being honoured), if any."""
    since_users_stop_s: float | None = None
    """Seconds since this same user last pressed Stop on this run, if they did."""
    participants: frozenset[str] = frozenset()


def decide(
    click: Click, live: LiveRun | None, finished: RunResult | None, settings: Settings
) -> Verdict:
    """Decide a click on a run this worker owns (``live``) or has seen finish."""
    if live is None:
        return Verdict.FINISHED if finished is not None else Verdict.NOT_FOUND
    last = live.stop_clicks.get(click.user)
    view = RunView(
        requester=live.requester,
        finished=live.run.result is not None,
        pending=live.run.control.reason,
        since_users_stop_s=None if last is None else click.at - last,
        participants=frozenset(live.participants),
    )
    return decide_for(click, view, settings)


def decide_for(click: Click, view: RunView, settings: Settings) -> Verdict:
    if view.finished:
        return Verdict.FINISHED
    allowed = may_stop(
        click.user,
        policy=settings.STOP_POLICY,
        requester=view.requester,
        admins=settings.ADMIN_USER_IDS,
        participants=view.participants,
    )
    if not allowed:
        return Verdict.NOT_ALLOWED
    if view.pending is not None and view.pending.cancels:
        return Verdict.ALREADY_ABORTING
    if click.action is StopReason.ABORT:
        return Verdict.ABORT
    if view.pending is StopReason.STOP:
        recent = view.since_users_stop_s is not None and view.since_users_stop_s < DOUBLE_CLICK_S
        return Verdict.DUPLICATE if recent else Verdict.ESCALATE
    return Verdict.STOP
