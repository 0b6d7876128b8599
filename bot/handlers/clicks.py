"""Deciding what a Stop or Abort click does, as a pure function of the run's state.

Kept free of Slack I/O so every case (stale, duplicate, unauthorized, escalation, a click
that did not come from the run's status message) is a plain unit test.
:mod:`bot.handlers.actions` carries out the decision.

A click counts only for the run whose status message it came from (SPEC.md section 4):
the run id is in the button's ``value``, which anyone who can post a signed payload
could copy into a button elsewhere, so the click's team, channel and message must be the
run's too (:func:`comes_from`).
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

__all__ = [
    "DOUBLE_CLICK_S",
    "Click",
    "Origin",
    "RunHome",
    "RunView",
    "Verdict",
    "comes_from",
    "decide",
    "decide_for",
]

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
    NOT_THIS_RUN = "not_this_run"
    """The click did not come from the run's status message (another thread, channel,
    message or team): refused, whatever the run's state."""
    REDELIVERED = "redelivered"
    """The same click (``action_ts`` and user) was already taken, here or by another
    worker: Slack delivered it again. Not decided here: the delivery log says so."""

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
class Origin:
    """Where a click came from: the payload's team and its message container."""

    team: str
    channel: str
    message_ts: str
    thread_ts: str | None = None


@dataclass(frozen=True, slots=True)
class RunHome:
    """Where a run's buttons live: its thread, and its status message once posted."""

    team: str
    channel: str
    thread_ts: str
    status_ts: str | None


def comes_from(origin: Origin | None, home: RunHome) -> bool:
    """True if a click from ``origin`` was pressed on the run's own status message."""
    if origin is None or (origin.team, origin.channel) != (home.team, home.channel):
        return False
    if home.status_ts is not None:
        return origin.message_ts == home.status_ts
    # No status message known yet (it is being posted, or the answer to its post was
    # lost): all we can hold the click to is the run's thread.
    return home.thread_ts in (origin.message_ts, origin.thread_ts)


@dataclass(frozen=True, slots=True)
class Click:
    user: str
    action: StopReason
    at: float
    """Monotonic time of the click."""
    origin: Origin | None
    """None when the payload named no message (e.g. a button outside any message)."""


@dataclass(frozen=True, slots=True)
class RunView:
    """What a click decision needs to know about a run, wherever the run is owned."""

    requester: str
    home: RunHome
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
    thread = live.run.thread
    view = RunView(
        requester=live.requester,
        home=RunHome(thread.team, live.session.channel, thread.thread_ts, live.session.status_ts),
        finished=live.run.result is not None,
        pending=live.run.control.reason,
        since_users_stop_s=None if last is None else click.at - last,
        participants=frozenset(live.participants),
    )
    return decide_for(click, view, settings)


def decide_for(click: Click, view: RunView, settings: Settings) -> Verdict:
    # Checked first: a click from elsewhere learns nothing about the run, not even that
    # it ended.
    if not comes_from(click.origin, view.home):
        return Verdict.NOT_THIS_RUN
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
