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

__all__ = ["DOUBLE_CLICK_S", "Click", "Verdict", "decide"]

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


@dataclass(frozen=True, slots=True)
class Click:
    user: str
    action: StopReason
    at: float
    """Monotonic time of the click."""


def decide(
    click: Click, live: LiveRun | None, finished: RunResult | None, settings: Settings
) -> Verdict:
    if live is None:
        return Verdict.FINISHED if finished is not None else Verdict.NOT_FOUND
    if live.run.result is not None:
        return Verdict.FINISHED
    allowed = may_stop(
        click.user,
        policy=settings.STOP_POLICY,
        requester=live.requester,
        admins=settings.ADMIN_USER_IDS,
        participants=live.participants,
    )
    if not allowed:
        return Verdict.NOT_ALLOWED
    pending = live.run.control.reason
    if pending is not None and pending.cancels:
        return Verdict.ALREADY_ABORTING
    if click.action is StopReason.ABORT:
        return Verdict.ABORT
    if pending is StopReason.STOP:
        last = live.stop_clicks.get(click.user)
        if last is not None and click.at - last < DOUBLE_CLICK_S:
            return Verdict.DUPLICATE
        return Verdict.ESCALATE
    return Verdict.STOP
