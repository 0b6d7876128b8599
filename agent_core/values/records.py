"""The records the stores keep, as the core and the Slack layer read and write them: a
run (:class:`RunRecord`, with where it lives in Slack and its resume decision), its
checkpoint and audit trail, stop requests, guidance, what a purge forgot, and the
installations of the app (:class:`InstallationRecord`).

The ports that keep them are in :mod:`agent_core.ports`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agent_core.values.clock import utcnow
from agent_core.values.states import RunState

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from agent_core.values.budget import Spent
    from agent_core.values.chat import ChatMessage
    from agent_core.values.ended import EndedBecause
    from agent_core.values.outcomes import ExitCode, Outcome
    from agent_core.values.stop import StopReason

__all__ = [
    "Admission",
    "ApprovalRecord",
    "ApprovalStatus",
    "AuditEvent",
    "Checkpoint",
    "Forgotten",
    "GuidanceRecord",
    "GuidanceStatus",
    "InstallationRecord",
    "ResumeState",
    "RunRecord",
    "StopRequestRecord",
    "TeamForgotten",
    "ThreadKey",
    "Wakeup",
    "is_accepted",
    "is_waiting",
]


@dataclass(frozen=True, slots=True)
class ThreadKey:
    """Where a run lives in Slack. The terminal runner uses ``("local", "cli", run_id)``."""

    team: str
    channel: str
    thread_ts: str

    def __str__(self) -> str:
        return f"{self.team}/{self.channel}/{self.thread_ts}"


class Admission(StrEnum):
    """What became of a person's new run at its admission
    (:meth:`agent_core.ports.QueueStore.admit_run`)."""

    ACCEPTED = "accepted"
    """Stored."""
    THREAD_BUSY = "thread_busy"
    """Its thread has a live run already (one live run per thread): nothing was stored."""
    PERSON_FULL = "person_full"
    """Its person has ``MAX_RUNS_PER_USER`` runs live or queued: nothing was stored."""


class ResumeState(StrEnum):
    """Where an ended run's automatic resume stands (the ``resume`` column of ``runs``).

    A run that ends is *decided* once: ``scheduled`` (with ``resume_at``) or ``declined``.
    A scheduled resume is then ``claimed`` by the worker preparing it (a summary to
    continue from; its ``owner`` and ``lease_expires_at`` hold the claim), and
    ``started``, or ``cancelled`` by a person. A resume in place makes the run live again
    with no decision (it is decided afresh when it ends). ``started``, ``declined`` and
    ``cancelled`` never change again, but for one move: a person's ``Continue`` on a run
    that spent its budget (declined) schedules its continuation, once (``resume_by``
    says who).
    """

    SCHEDULED = "scheduled"
    CLAIMED = "claimed"
    STARTED = "started"
    DECLINED = "declined"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as stored (the ``runs`` table)."""

    id: str
    thread: ThreadKey
    requester: str
    task: str
    state: RunState = RunState.QUEUED
    parent_id: str | None = None
    owner: str | None = None
    """The worker id that holds the lease."""
    lease_expires_at: datetime | None = None
    status_ts: str | None = None
    """The ``ts`` of the run's status message in Slack."""
    outcome: Outcome | None = None
    stop_reason: StopReason | None = None
    exit_code: ExitCode | None = None
    stopped_by: str | None = None
    result: Mapping[str, Any] | None = None
    """The stored :meth:`agent_core.values.outcomes.RunResult.to_dict`, once terminal."""
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    final_posted_at: datetime | None = None
    """When Slack accepted the run's terminal message; None until then (or never posted)."""
    ended_because: EndedBecause | None = None
    """Why it ended (docs/stopping.md), once terminal. Stores write it with ``result``, from it:
    writing a result writes its ``ended_because``, writing none clears it."""
    continued_from: str | None = None
    """The run whose context filled up and whose summary this run starts from."""
    auto_resumes: int = 0
    """Automatic resumes in this run's thread since a person last started a run there,
    counting this run's own start: 0 for a person's run, one more for each resume in
    place or continuation after it (``MAX_AUTO_RESUMES`` caps it)."""
    resume: ResumeState | None = None
    """Its resume decision once ended; None while live, or ended and not yet decided."""
    resume_at: datetime | None = None
    """When a ``scheduled`` resume is due (any worker starts it then)."""
    resume_reason: str | None = None
    """Why the decision was made, for logs and the status message."""
    resume_by: str | None = None
    """Who cancelled or hurried a resume (a Slack user id); None for the policy."""
    trace_context: str | None = None
    """The W3C ``traceparent`` of the run's trace (:mod:`agent_core.process.tracing`),
    written as it starts when traces are on: a Stop taken by another worker, the
    reconciler and a resume link to it. None when untraced."""
    enterprise_id: str | None = None
    """The Enterprise Grid org of the run's workspace (``thread.team``); None for a
    standalone workspace, the terminal, or when not known."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A run's conversation after its latest turn (the ``checkpoints`` table): what a
    resume goes on from.

    Written at each step's end, and within a step (:mod:`agent_core.run.step_log`): as soon as
    the model's reply is complete, before any of its tool calls runs, then as each call
    starts and as each result arrives. ``messages`` then ends with that reply and the
    results so far; a call of it with no result is still to run, unless its id is in
    ``started`` (it began, and its effect is unknown).
    """

    run_id: str
    turn: int
    messages: tuple[ChatMessage, ...]
    created_at: datetime = field(default_factory=utcnow)
    started: tuple[str, ...] = ()
    """The ids of the last reply's tool calls that began to run (empty between steps)."""
    spent: Spent | None = None
    """What the request had spent when this was written (None: not recorded)."""


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """Who did what to which run, when (the ``events`` table)."""

    run_id: str
    kind: str
    """``stop.requested``, ``abort.requested``, ``stop.escalated``, ``run.takeover``..."""
    actor: str
    at: datetime = field(default_factory=utcnow)
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StopRequestRecord:
    """A stop request as stored (a row of the ``stop_requests`` table)."""

    id: str
    run_id: str
    thread: ThreadKey
    kind: StopReason
    requested_by: str
    status: str = "requested"
    """``requested`` until the owner honours it, then ``handled``."""
    requested_at: datetime = field(default_factory=utcnow)
    handled_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What :meth:`RetentionStore.forget_requester` did."""

    runs: int
    """The person's runs deleted, with every row that hangs off them."""
    kept: int
    """The person's runs kept: live, with a resume ahead, or needed by a run that is."""


@dataclass(frozen=True, slots=True)
class TeamForgotten:
    """What :meth:`RetentionStore.forget_team` did."""

    runs: int
    """The workspace's runs deleted."""
    rows: int
    """Every row deleted: the runs, what hangs off them, and the workspace's other rows."""
    kept: int
    """The workspace's runs kept: live, with a resume ahead, or needed by a run that is."""


class GuidanceStatus(StrEnum):
    """Where a reply to a live run is. ``queued`` moves once, and only to ``delivered``
    (it went out with a model request) or ``undelivered`` (the run ended first: a Stop
    or Abort won); a settled status never changes again."""

    QUEUED = "queued"
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"


@dataclass(frozen=True, slots=True)
class GuidanceRecord:
    """A reply written to a live run, as stored (the ``guidance`` table)."""

    id: str
    """Unique; the Slack layer derives it from the reply's message, so a re-delivered
    event is the same guidance."""
    run_id: str
    thread: ThreadKey
    author: str
    """Who wrote it (a Slack user id)."""
    text: str
    message_ts: str | None = None
    """The reply's Slack message (in ``thread.channel``), where its reaction goes."""
    status: GuidanceStatus = GuidanceStatus.QUEUED
    queued_at: datetime = field(default_factory=utcnow)
    settled_at: datetime | None = None
    """When it became ``delivered`` or ``undelivered``."""


class ApprovalStatus(StrEnum):
    """Where one approval request is (:mod:`agent_core.values.approvals`). ``requested`` moves
    once (compare-and-set: the first decision wins); every other status is terminal."""

    REQUESTED = "requested"
    APPROVED = "approved"
    DENIED = "denied"
    """A person said no."""
    EXPIRED = "expired"
    """Nobody decided within ``APPROVAL_TIMEOUT``: denied."""
    CANCELLED = "cancelled"
    """The run was stopped or aborted while it waited: the call was not run."""

    @property
    def terminal(self) -> bool:
        return self is not ApprovalStatus.REQUESTED


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """A tool call held for a person's decision, as stored (the ``approvals`` table)."""

    id: str
    run_id: str
    thread: ThreadKey
    requester: str
    """Who started the run (the policy's ``requester``)."""
    tool: str
    """As offered to the model: ``server__tool``."""
    arguments: str
    """The model's JSON text: hostile data, shown only parsed and escaped (all of it behind
    **Show all** when a message cannot hold it)."""
    call_id: str = ""
    """The model's id for the call."""
    status: ApprovalStatus = ApprovalStatus.REQUESTED
    decided_by: str | None = None
    """Who approved or denied it (a Slack user id); None for expired and cancelled."""
    message_ts: str | None = None
    """The approval message in ``thread.channel``, once posted."""
    requested_at: datetime = field(default_factory=utcnow)
    decided_at: datetime | None = None
    taken_at: datetime | None = None
    """When the run took the decision; until then a resumed run asking for the same call
    waits on this approval (and its message) instead of a new one."""


def is_waiting(record: RunRecord) -> bool:
    """True if ``record`` waits in the run queue: ``queued``, nobody's, and top-level.

    A resume in place passes through ``queued`` with its owner already set, and a
    sub-agent's row is ``queued`` (with a ``parent_id``) until its parent's worker starts
    it: neither is waiting for a worker.
    """
    return record.state is RunState.QUEUED and record.owner is None and record.parent_id is None


def is_accepted(record: RunRecord) -> bool:
    """True if ``record`` is a person's new run that a worker accepted and has not shown
    yet: ``queued``, held by that worker, top-level, with no status message, and neither
    a resume nor a continuation (those have run before, and have a checkpoint to go on
    from). Slack was told "accepted" when it was written; if its worker goes away now,
    nothing ran and nothing was shown, so it goes back in the queue
    (the reconciler of any worker), not to an ending.
    """
    return (
        record.state is RunState.QUEUED
        and record.owner is not None
        and record.parent_id is None
        and record.status_ts is None
        and record.auto_resumes == 0
        and record.continued_from is None
    )


@dataclass(frozen=True, slots=True)
class Wakeup:
    """What a wake-up (:class:`agent_core.ports.StopWakeups`) says was committed: a stop
    request or guidance for ``run_id``, or, with no run, a run queued for any worker.
    A hint, never the truth: read the tables to act."""

    run_id: str | None = None

    @property
    def queued(self) -> bool:
        """True when it says a run was queued (only the queue's taker need wake)."""
        return self.run_id is None


@dataclass(frozen=True, slots=True)
class InstallationRecord:
    """Where the app is installed and its credentials there, kept for the Slack layer.

    One per ``(enterprise_id, team_id)``: ``""`` stands for "none" in either (an org-wide
    install has ``team_id == ""``, a workspace outside an enterprise
    ``enterprise_id == ""``). ``secret`` is opaque to the core: the app's own encoding of
    the installation (encrypted when it has a key).
    """

    enterprise_id: str
    team_id: str
    secret: str
    expires_at: datetime | None = None
    """When the access token expires (token rotation); None if it does not."""
    installed_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    refresh_failures: int = 0
    """Refreshes that failed in a row since the last one that worked."""
    refresh_error: str | None = None
    """What the last failed refresh met (None once one works)."""
    refresh_until: datetime | None = None
    """While a worker refreshes: when its lease ends; after a failure: the next try."""
