"""Who may stop a run, and what a request to end it does: pure functions, no I/O.

Every way of asking a run to end (the Stop and Abort buttons, Slack's native stop, stop
words, App Home, ``/threadpilot``) is decided here, by :func:`verdict_for`, once, from a
:class:`RunView` that :mod:`bot.stopping.stops` builds from this worker's memory or from the
database. What the view may need beyond the run is read first, and only where it can
change the answer: who wrote in the thread (:func:`needs_participants`, read by
:func:`read_participants`, the one function here that reads) and the asker's own
earlier Stops (:func:`needs_own_stops`). Keeping the rest free of I/O makes every case a
plain unit test, and lets every worker decide alike.

Rules, in the order they are checked (docs/stopping.md, Who may stop and Escalation):

1. A button counts only on the run's own status message: its team, channel and message
   (:func:`comes_from`). The run id in a button's ``value`` can be copied by anyone who
   can post a signed payload; where it was pressed cannot. Checked first, so a click
   from elsewhere learns nothing about the run, not even that it ended. Likewise an ask
   from another workspace (App Home, ``/threadpilot``: :func:`same_workspace`) changes
   nothing in this one's runs.
2. A run that has ended stays ended.
3. ``STOP_POLICY``: the requester and ``ADMIN_USER_IDS`` always; under ``participants``
   also whoever wrote in the run's thread; under ``anyone``, anyone (:func:`may_stop`).
4. The stop ladder: level 1 is Stop (a final turn for a summary), level 2 is Abort. An
   Abort, or a second deliberate Stop while stopping, is level 2; nothing goes past it.

What is a *deliberate* second Stop? A re-delivery of the same click or event is not one,
and never gets here: :mod:`bot.stopping.stops` drops it by its delivery key first. What is left is
a second real press by the same hand right after the first, when the control had not
re-rendered yet (the Stop button was still on that person's screen). Escalating that
would cut the summary off for good, with none of the confirmation the Abort button
asks for; so a Stop *pressed* (button, native stop, App Home, or a button in
``/threadpilot``'s answer: :attr:`agent_core.StopSource.pressed`) by the same person
within :data:`DOUBLE_PRESS_S` of their own Stop is answered "already stopping". Anyone
else's Stop, a typed stop word, or the same person's press after the window, is
deliberate: level 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from agent_core import StopReason, StopSource
from bot.config.settings import StopPolicy

if TYPE_CHECKING:
    from collections.abc import Collection

    from agent_core import ThreadKey
    from bot.access.admins import Admins
    from bot.config.settings import Settings

__all__ = [
    "DOUBLE_PRESS_S",
    "Origin",
    "RunHome",
    "RunView",
    "StopAsk",
    "Verdict",
    "comes_from",
    "may_continue",
    "may_steer",
    "may_stop",
    "needs_own_stops",
    "needs_participants",
    "read_participants",
    "same_workspace",
    "verdict_for",
]


@dataclass(frozen=True, slots=True)
class StopAsk:
    """Someone asks a run to end."""

    user: str
    kind: StopReason
    """``stop`` or ``abort``."""
    source: StopSource
    run_id: str | None = None
    """The run asked about (a button's ``value``; App Home, the command)."""
    thread: ThreadKey | None = None
    """Without ``run_id``: the run live in this thread (native stop, stop words)."""
    delivery: str | None = None
    """The Slack delivery's key (``click:<action_ts>:<user>``, ``event:<event_id>``): the
    same delivery again changes nothing and is answered once."""
    message: Origin | None = None
    """Where a button was pressed: it must be the run's status message."""
    user_team: str | None = None
    """The asker's own team, when the payload names it (:class:`bot.access.trust.Person`)."""
    team: str | None = None
    """The workspace the ask comes from (App Home, ``/threadpilot``): only that
    workspace's runs can be asked (:func:`verdict_for`)."""

    @property
    def workspace(self) -> str | None:
        """The workspace the ask comes from, whichever way the payload says it."""
        if self.team is not None:
            return self.team
        if self.message is not None:
            return self.message.team
        return self.thread.team if self.thread is not None else None

    def __post_init__(self) -> None:
        if not self.kind.by_person:
            raise ValueError(f"a person asks for stop or abort, not {self.kind.value}")
        if self.run_id is None and self.thread is None:
            raise ValueError("a StopAsk needs the run id or the run's thread")


DOUBLE_PRESS_S = 3.0
"""A second Stop pressed by the same person this soon after theirs is a double click:
about the time a status message takes to re-render on their screen."""


class Verdict(StrEnum):
    """What a request to end a run does."""

    STOP = "stop"
    """Level 1: the run finishes its step, then writes a summary."""
    ABORT = "abort"
    """Level 2 by the Abort button (or an Abort from anywhere)."""
    ESCALATE = "escalate"
    """Level 2 by a second deliberate Stop on a stopping run."""
    DUPLICATE = "duplicate"
    """The same person's Stop again, right after theirs: one Stop (a double press)."""
    ALREADY_ABORTING = "already_aborting"
    NOT_ALLOWED = "not_allowed"
    FINISHED = "finished"
    NOT_FOUND = "not_found"
    NOT_THIS_RUN = "not_this_run"
    """A button not on the run's status message (another thread, channel, message or
    team): refused, whatever the run's state."""
    OTHER_WORKSPACE = "other_workspace"
    """Asked from another workspace than the run's (App Home, ``/threadpilot``): refused,
    whatever the run's state."""
    UNTRUSTED = "untrusted"
    """From another organisation, or a guest, where the settings do not allow them
    (:mod:`bot.access.trust`): refused before anything about the run is read."""
    REDELIVERED = "redelivered"
    """Slack delivered the same click or event again (to this worker or another): not
    decided here; the delivery log says so."""

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

    @property
    def level(self) -> int | None:
        """Where on the stop ladder this verdict puts the run (1 Stop, 2 Abort)."""
        requests = self.requests
        return None if requests is None else (1 if requests is StopReason.STOP else 2)


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


def same_workspace(team: str | None, home: RunHome) -> bool:
    """True unless an ask from workspace ``team`` names a run of another workspace
    (``team`` None: the ask was found by its thread or message, checked elsewhere)."""
    return team is None or team == home.team


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
class RunView:
    """What deciding needs to know about a run, wherever the run is owned."""

    requester: str
    home: RunHome
    finished: bool
    pending: StopReason | None
    """The stop already requested (pending or being honoured), if any."""
    since_users_stop_s: float | None = None
    """Seconds since the asking person's own latest Stop on this run, if they made one
    (only read when it matters: a Stop pressed on a stopping run)."""
    participants: frozenset[str] = frozenset()
    """Who wrote in the run's thread (only read when the policy needs it)."""


def may_stop(
    user: str,
    *,
    policy: StopPolicy,
    requester: str,
    admins: Collection[str],
    participants: Collection[str] = (),
) -> bool:
    """True if ``user`` may stop or abort a run started by ``requester``."""
    if user == requester or user in admins:
        return True
    if policy is StopPolicy.ANYONE:
        return True
    return policy is StopPolicy.PARTICIPANTS and user in participants


def may_continue(user: str, *, requester: str, admins: Collection[str]) -> bool:
    """True if ``user`` may press Continue under ``requester``'s run that spent its
    budget: it spends one more budget on the requester's behalf, so only they and the
    admins may, whatever ``STOP_POLICY`` says."""
    return user == requester or user in admins


def records_participants(settings: Settings) -> bool:
    """True if who writes in a run's thread is recorded: ``STOP_POLICY`` or
    ``APPROVAL_POLICY`` is ``participants`` (either needs them, whatever the other says)."""
    return StopPolicy.PARTICIPANTS in (settings.STOP_POLICY, settings.APPROVAL_POLICY)


def needs_participants(
    user: str, requester: str, settings: Settings, *, policy: StopPolicy | None = None
) -> bool:
    """True if :func:`may_stop` depends on who wrote in the thread for this user, under
    ``policy`` (``STOP_POLICY`` unless given: approvals ask with ``APPROVAL_POLICY``)."""
    return (
        (policy or settings.STOP_POLICY) is StopPolicy.PARTICIPANTS
        and user != requester
        and user not in settings.ADMIN_USER_IDS
    )


class Participants(Protocol):
    """Where who wrote in a thread is read (the store)."""

    async def participants(self, thread: ThreadKey) -> Collection[str]: ...


async def read_participants(
    store: Participants,
    user: str,
    requester: str,
    thread: ThreadKey,
    settings: Settings,
    *,
    policy: StopPolicy | None = None,
) -> frozenset[str]:
    """Who wrote in ``thread``, read only when :func:`may_stop` depends on it for
    ``user`` under ``policy`` (as :func:`needs_participants`; else nobody: the answer is
    the same)."""
    if not needs_participants(user, requester, settings, policy=policy):
        return frozenset()
    return frozenset(await store.participants(thread))


async def may_steer(
    user: str,
    requester: str,
    thread: ThreadKey,
    *,
    store: Participants,
    settings: Settings,
    admins: Admins,
) -> bool:
    """True if ``user`` may guide ``requester``'s run in ``thread`` (or one of its
    sub-agents): who may stop a run may steer it. ``STOP_POLICY`` (its participants read
    only when they matter), then the workspace's admins (asked only when it matters)."""
    participants = await read_participants(store, user, requester, thread, settings)
    allowed = may_stop(
        user,
        policy=settings.STOP_POLICY,
        requester=requester,
        admins=settings.ADMIN_USER_IDS,
        participants=participants,
    )
    return allowed or await admins.is_admin(user, thread.team)


def needs_own_stops(ask: StopAsk, view: RunView) -> bool:
    """True if :func:`verdict_for` depends on the asker's own latest Stop on the run
    (:attr:`RunView.since_users_stop_s`): a Stop pressed on a stopping run."""
    return (
        ask.kind is StopReason.STOP
        and view.pending is StopReason.STOP
        and not view.finished
        and ask.source.pressed
    )


def verdict_for(
    ask: StopAsk,
    view: RunView | None,
    settings: Settings,
    *,
    double_press_s: float = DOUBLE_PRESS_S,
    admin: bool = False,
) -> Verdict:
    """What ``ask`` does to the run ``view`` describes (None: there is no such run).
    ``admin``: the asker is an admin of the run's workspace besides ``ADMIN_USER_IDS``
    (:class:`bot.access.admins.Admins`)."""
    if view is None:
        return Verdict.NOT_FOUND
    if not same_workspace(ask.team, view.home):
        return Verdict.OTHER_WORKSPACE
    if ask.source.on_status_message and not comes_from(ask.message, view.home):
        return Verdict.NOT_THIS_RUN
    if view.finished:
        return Verdict.FINISHED
    allowed = may_stop(
        ask.user,
        policy=settings.STOP_POLICY,
        requester=view.requester,
        admins=settings.ADMIN_USER_IDS,
        participants=view.participants,
    )
    if not allowed and not admin:
        return Verdict.NOT_ALLOWED
    if view.pending is not None and view.pending.cancels:
        return Verdict.ALREADY_ABORTING
    if ask.kind is StopReason.ABORT:
        return Verdict.ABORT
    if view.pending is StopReason.STOP:
        since = view.since_users_stop_s
        if ask.source.pressed and since is not None and since < double_press_s:
            return Verdict.DUPLICATE
        return Verdict.ESCALATE
    return Verdict.STOP
