"""The interfaces the core depends on. The records that cross them are in
:mod:`agent_core.values.chat` (the chat model's) and :mod:`agent_core.values.records` (the stores').

Adapters live beside each other in :mod:`agent_core.stores` (``memory`` here; ``sqlite``
and ``postgres`` for durable, multi-worker state) and one contract test suite runs against
all of them. The core never imports an adapter.

- :class:`ChatModel` streams one model turn (one adapter per API:
  :mod:`agent_core.models.openai_chat` for Chat Completions,
  :mod:`agent_core.models.openai_responses`, :mod:`agent_core.models.anthropic_messages`).
- :class:`RunStore` keeps runs, their checkpoints (the conversation after each turn) and
  the audit trail. Terminal state is written by compare-and-set: exactly one wins.
- :class:`StopRequestStore` keeps stop requests so that a click landing in any worker
  reaches the run's owner, and survives a restart (docs/operations.md, Several workers).
- :class:`RunQueries` finds runs by what they became, and writes fields without moving
  state: what the reconciler needs to repost final messages and resume runs.
- :class:`DeliveryLog` tells every worker whether a Slack delivery (an event, a click)
  was already taken by some worker, so a re-delivery changes nothing.
- :class:`ParticipantStore` remembers who wrote in which Slack thread, so every worker
  decides alike who may stop a run under ``STOP_POLICY=participants``.
- :class:`GuidanceStore` keeps the replies people write to a live run until its owner
  has given them to the model, or the run ended first (docs/stopping.md, Guidance).
- :class:`DashboardQueries` reads what App Home and ``/threadpilot`` list: a workspace's
  runs (a person's or everyone's), the runs that changed lately, checkpoint turns and
  audit events of some kinds (docs/slack-setup.md, Home tab and /threadpilot).
- :class:`ResumeStore` keeps each ended run's resume decision, the durable schedule any
  worker starts a resume from (docs/stopping.md, "Why a run ended").
- :class:`QueueStore` keeps the runs waiting for room under ``MAX_LIVE_RUNS``: any worker
  with room takes the oldest (docs/operations.md, Queue and MAX_LIVE_RUNS).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime

    from agent_core.values.approvals import ApprovalDecision, ApprovalRequest
    from agent_core.values.chat import ModelRequest, ModelResponse
    from agent_core.values.outcomes import ExitCode
    from agent_core.values.records import (
        Admission,
        ApprovalRecord,
        ApprovalStatus,
        AuditEvent,
        Checkpoint,
        Forgotten,
        GuidanceRecord,
        GuidanceStatus,
        ResumeState,
        RunRecord,
        StopRequestRecord,
        TeamForgotten,
        ThreadKey,
        Wakeup,
    )
    from agent_core.values.states import RunState
    from agent_core.values.stop import StopReason

__all__ = [
    "ApprovalStore",
    "Approvals",
    "ChatModel",
    "DashboardQueries",
    "DeliveryLog",
    "GuidanceStore",
    "LeaseStore",
    "ParticipantStore",
    "QueueStore",
    "Reconnected",
    "ResumeStore",
    "RetentionStore",
    "RunQueries",
    "RunStore",
    "StopListener",
    "StopRequestStore",
    "StopWakeup",
    "StopWakeups",
    "Store",
    "TextSink",
]


# -- the chat model -------------------------------------------------------------------


TextSink = Callable[[str], None]
"""Receives text deltas as they stream in."""


class ChatModel(Protocol):
    """Streams one turn. Cancelling the awaiting task must close the HTTP stream before
    the cancellation propagates; failures are raised as
    :class:`agent_core.values.errors.ModelError`.

    The request's messages are in the core's shape (OpenAI chat messages, with a
    :class:`Reasoning` under an assistant message's ``reasoning`` key); each adapter
    translates them to its API (``MODEL_API``: :mod:`agent_core.models.openai_chat`,
    :mod:`agent_core.models.openai_responses`, :mod:`agent_core.models.anthropic_messages`).
    """

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse: ...


class Approvals(Protocol):
    """Where a held tool call gets a person's decision (:mod:`agent_core.values.approvals`):
    Slack's Approve / Deny buttons, the terminal's y/N."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        """Show ``request`` to the people who may decide and wait for a decision.

        Cancelling the awaiting task only stops the wait: the request stays open (a
        shutdown keeps it for the resumed run) until :meth:`settle` ends it.
        """
        ...

    async def settle(self, request: ApprovalRequest, status: ApprovalStatus) -> ApprovalDecision:
        """End ``request`` with ``status`` (expired, cancelled) unless a decision got
        there first (compare-and-set); returns the decision that stands."""
        ...


# -- runs, checkpoints, audit ---------------------------------------------------------


class RunStore(Protocol):
    """Runs, their checkpoint (the conversation after each turn) and their audit trail."""

    async def create_run(self, run: RunRecord) -> None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def set_state(
        self,
        run_id: str,
        new: RunState,
        *,
        expected: Collection[RunState],
        **changes: Any,
    ) -> bool:
        """Compare-and-set: move to ``new`` only if the current state is in ``expected``.

        ``changes`` names other :class:`RunRecord` fields to write in the same statement.
        Returns False (and writes nothing) when another writer got there first. Raises
        :class:`~agent_core.values.errors.IllegalTransition`, before the store is touched, when
        a move from one of ``expected`` to ``new`` is not in the table of legal moves
        (:func:`agent_core.values.states.check_moves`; staying in a state is no move).
        """
        ...

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None: ...

    async def latest_checkpoint(self, run_id: str) -> Checkpoint | None: ...

    async def record_event(self, event: AuditEvent) -> None: ...

    async def events_for(self, run_id: str) -> list[AuditEvent]: ...


# -- stop requests --------------------------------------------------------------------


class StopRequestStore(Protocol):
    """Stop requests, durable before the click is acknowledged, for the run's owner to apply."""

    async def add_stop_request(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        request_id: str | None = None,
    ) -> StopRequestRecord:
        """Commit a request. It is durable when this returns (before the click's ack).

        ``request_id`` (default: a new one) lets the caller know the id before the
        commit: the worker that applies its own request tells its stop watcher first, so
        the watcher never applies it again. It must be new.
        """
        ...

    async def add_stop_request_once(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        delivery: str,
        request_id: str | None = None,
    ) -> StopRequestRecord | None:
        """Commit a request as :meth:`add_stop_request` does, once for ``delivery``, the
        key of the Slack delivery that asks (as for :meth:`DeliveryLog.first_delivery`,
        seen at the request's ``requested_at``).

        The key is recorded and the request added in one transaction: None, and nothing
        written, when some worker had already taken the key; the request, when this call
        took it. A store that retried after losing its connection still returns the
        request if its first attempt landed.
        """
        ...

    async def add_stop_requests(
        self,
        requests: Sequence[StopRequestRecord],
        *,
        events: Sequence[AuditEvent] = (),
        delivery: str | None = None,
    ) -> list[StopRequestRecord] | None:
        """Commit many requests at once (``Stop all``): one transaction, whatever their
        number, so a click's commit waits for one, not for hundreds.

        Each request is added only if its run is still ``queued`` or ``running`` and has
        no request pending (a compare-and-set: a Stop there meanwhile would make this one
        an escalation). ``events`` are the audit events of the requests, written for the
        runs whose request was added, in the same transaction. A store with
        :class:`StopWakeups` wakes each added run's owner with the commit. ``delivery``
        is taken as for :meth:`add_stop_request_once`: None, and nothing written, when some
        worker had taken it. Returns the requests added, in the order given; ValueError
        if two name the same run or one is not a new ``requested`` one.
        """
        ...

    async def pending_stop_requests(
        self, run_ids: Collection[str] | None = None
    ) -> list[StopRequestRecord]:
        """Requests still ``requested``, oldest first; all runs when ``run_ids`` is None."""
        ...

    async def mark_stop_handled(self, request_id: str) -> bool:
        """Mark one request handled. False if it already was."""
        ...


# -- leases, retention, wake-ups (docs/operations.md) ---------------------------------


class LeaseStore(Protocol):
    """Which worker owns which live run, for how long (the ``owner`` and
    ``lease_expires_at`` columns of ``runs``).

    Leasing never changes a run's state: state moves by :meth:`RunStore.set_state` alone.
    ``now`` defaults to the wall clock; tests pass it explicitly. To leave no window in
    which a new run has no owner, create it with ``owner`` and ``lease_expires_at`` set.
    """

    async def claim_run(
        self, run_id: str, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> bool:
        """Take or renew the lease on a live run for ``ttl_s`` seconds from ``now``.

        Succeeds when the lease is free, expired, or already ``owner``'s. False (and
        nothing written) for an unknown or terminal run, or one another owner still holds.
        """
        ...

    async def release_run(self, run_id: str, owner: str) -> bool:
        """Drop ``owner``'s lease so another worker may claim at once. False if not held."""
        ...

    async def heartbeat(
        self, owner: str, run_ids: Collection[str], ttl_s: float, *, now: datetime | None = None
    ) -> set[str]:
        """Extend ``owner``'s lease on each of ``run_ids`` that is live and still its own,
        in one statement; returns the ids renewed.

        ``run_ids`` are the runs the caller really holds (in memory, being driven): a live
        row that names ``owner`` but is not among them is nobody's and is left to expire.
        An id asked for but not returned is lost (ended or taken over elsewhere).
        """
        ...

    async def expired_runs(self, now: datetime | None = None) -> list[RunRecord]:
        """Live runs whose lease ran out at or before ``now``, oldest run first.

        Runs never leased are not in the list: nobody lost them.
        """
        ...

    async def live_runs(self, owner: str | None = None) -> list[RunRecord]:
        """Live runs (of ``owner``, or of everyone), oldest first."""
        ...


class RetentionStore(Protocol):
    """Deletes what is no longer needed (docs/operations.md, Retention and backups).

    A run may be deleted once it has ended, no resume is ahead of it (``scheduled``,
    ``claimed``, or ``blocked`` and undecided) and no run that is live or has a resume
    ahead is its parent, child or continuation. Its checkpoint, stop requests, audit
    events and guidance go with it. Deletes go in transactions of at most
    ``batch_size`` runs (or rows), so a click's commit never waits for more than one.
    """

    async def purge(self, older_than: datetime, *, batch_size: int = ...) -> int:
        """Delete what is no longer needed from before ``older_than``; returns rows deleted.

        Goes: runs that may be deleted and have not changed since ``older_than`` (with
        their rows), and by age alone: handled stop requests (by ``handled_at``), audit
        events (by ``at``), the checkpoints of runs that can never resume (terminal,
        except ``blocked``), delivery keys (by when they were first seen), settled
        guidance (by ``settled_at``) and thread participants (by when they last wrote).
        Live runs, runs with a resume ahead, pending stop requests and queued guidance
        are kept.
        """
        ...

    async def forget_requester(
        self, user: str, *, team: str | None = None, batch_size: int = ...
    ) -> Forgotten:
        """Delete ``user``'s runs that may be deleted, whatever their age, with their
        rows, and what else they wrote: their settled guidance in other runs and their
        thread participations. Their live runs (and those with a resume ahead) are kept
        and counted: stop them, then ask again. ``team``: in that workspace only (None:
        in every workspace)."""
        ...

    async def forget_team(self, team: str, *, batch_size: int = ...) -> TeamForgotten:
        """Delete workspace ``team``'s runs that may be deleted, whatever their age, with
        their rows, and its threads' handled stop requests, settled guidance and
        participants (its app was uninstalled). Its live runs (and those with a resume
        ahead) are kept and counted."""
        ...


class DeliveryLog(Protocol):
    """Which deliveries some worker already took, durably and across workers.

    Slack re-delivers an event it believes was not acknowledged (maybe to another
    worker) and may send a click twice; the worker that receives one asks here first
    and acts only on a first delivery. A delivery that asks a run to stop records its
    key in the same transaction as its stop request instead
    (:meth:`StopRequestStore.add_stop_request_once`): one key, one table.
    """

    async def first_delivery(self, key: str, *, now: datetime | None = None) -> bool:
        """Record ``key`` (e.g. ``event:<event_id>``); True for exactly one caller ever,
        across every worker sharing the database, False for every later one.

        ``now`` (default: the wall clock) is when the key was seen, for
        :meth:`RetentionStore.purge`. Raises :class:`agent_core.values.errors.StorageError`
        when the answer cannot be had; a store that retried after losing its connection
        still answers True to the caller whose write landed.
        """
        ...

    async def forget_delivery(self, key: str) -> None:
        """Remove ``key`` from the log, so that the next delivery of it is a first one
        again (on any worker): for a delivery whose handling failed before Slack was
        answered, which Slack will deliver again. Nothing happens for a key not there.
        Raises :class:`agent_core.values.errors.StorageError` when the database cannot be told.
        """
        ...


# -- guidance (docs/stopping.md, Guidance) ---------------------------------------------


class GuidanceStore(Protocol):
    async def add_guidance(self, record: GuidanceRecord) -> bool:
        """Commit a queued reply. It is durable when this returns (before the event's ack).

        False, writing nothing, if guidance with this id exists (the same reply delivered
        again); a store that retried after losing its connection still answers True when
        its own first attempt landed. A store with :class:`StopWakeups` wakes the run's
        owner with the commit, as for a stop request. ValueError unless ``status`` is
        ``queued`` and ``settled_at`` unset.
        """
        ...

    async def pending_guidance(
        self, run_ids: Collection[str] | None = None
    ) -> list[GuidanceRecord]:
        """Guidance still ``queued``, oldest ``queued_at`` first (ties in commit order);
        all runs when ``run_ids`` is None."""
        ...

    async def mark_guidance(
        self, ids: Collection[str], status: GuidanceStatus, *, at: datetime | None = None
    ) -> set[str]:
        """Move each of ``ids`` that is still ``queued`` to ``status`` (``delivered`` or
        ``undelivered``, ValueError for ``queued``), settled ``at`` (default: now).

        Returns the ids this call moved: of two workers marking the same guidance, one
        gets it and the other an empty set, so only one writes its audit event.
        """
        ...

    async def guidance_for(self, run_id: str) -> list[GuidanceRecord]:
        """Every guidance of the run, whatever its status, ordered as
        :meth:`pending_guidance` (until purged)."""
        ...


# -- who wrote in a thread (STOP_POLICY=participants) ----------------------------------


class ParticipantStore(Protocol):
    """Who wrote in which Slack thread: with ``STOP_POLICY=participants`` they may stop
    or abort its run, and a click is decided by whichever worker receives it.

    The requester needs no entry: it is on the run (:attr:`RunRecord.requester`).
    """

    async def add_participant(
        self, thread: ThreadKey, user: str, *, now: datetime | None = None
    ) -> None:
        """Record that ``user`` wrote in ``thread``, seen ``now`` (default: the wall
        clock). Idempotent: writing again only moves when they were last seen."""
        ...

    async def participants(self, thread: ThreadKey) -> set[str]:
        """Everyone recorded as having written in ``thread`` (until purged)."""
        ...


StopWakeup = Callable[["Wakeup"], Awaitable[None]]
"""Called with each :class:`~agent_core.values.records.Wakeup`: a newly committed stop request
or guidance, or a run queued; read the tables to act."""

Reconnected = Callable[[], Awaitable[None]]
"""Called after a wake-up channel came back: anything sent meanwhile was lost, re-scan."""


class StopListener(Protocol):
    @property
    def connected(self) -> bool:
        """False while the wake-up channel is down and being re-established."""
        ...


@runtime_checkable
class StopWakeups(Protocol):
    """A store that can wake workers when a stop request or guidance is committed
    (PostgreSQL).

    A wake-up is a hint, never the truth: the ``stop_requests`` and ``guidance`` tables
    are. Stores without this capability (SQLite, memory) are polled.
    """

    def listen_stops(
        self, on_stop: StopWakeup, *, on_reconnect: Reconnected | None = None
    ) -> AbstractAsyncContextManager[StopListener]:
        """Listen while the context is open. The channel is live once entered, so a
        scan made after entering misses nothing."""
        ...


class RunQueries(Protocol):
    """Reading runs by what they became, and writing fields that are not their state."""

    async def find_runs(
        self,
        *,
        states: Collection[RunState] | None = None,
        stop_reason: StopReason | None = None,
        exit_code: ExitCode | None = None,
        final_posted: bool | None = None,
        thread: ThreadKey | None = None,
        owner: str | None = None,
        top_level: bool | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Runs matching every filter given (None: any), oldest ``created_at`` first
        (ties by id), at most ``limit`` of them.

        ``states`` empty matches nothing; ``final_posted=False`` means ``final_posted_at``
        is NULL, True that it is set. ``top_level=True`` matches runs without a parent
        (``parent_id`` NULL: not sub-agents), False only sub-agents' runs. A negative
        ``limit`` raises ValueError.
        """
        ...

    async def update_run(self, run_id: str, **changes: Any) -> bool:
        """Write :class:`RunRecord` fields other than ``state`` (``status_ts``,
        ``final_posted_at``, ``owner``...), whatever the run's state; bumps ``updated_at``.

        Checked and encoded like :meth:`RunStore.set_state`'s ``changes``: TypeError for
        ``state`` (moving it takes a compare-and-set), ``id``, ``updated_at`` or an unknown
        name, raised before the store is touched. False if there is no such run; with
        no ``changes`` nothing is written and the answer only says whether it exists.
        """
        ...

    async def stop_requests_for(self, run_id: str) -> list[StopRequestRecord]:
        """Every stop request of the run, handled or not, oldest first (until purged)."""
        ...


class DashboardQueries(Protocol):
    """What App Home and ``/threadpilot`` list, read by whichever worker is asked.

    Only top-level runs are listed (a sub-agent's run is shown through its parent), so
    the listings leave out runs with a ``parent_id``; :meth:`runs_changed_since` does
    not, since a caller may care about any row. ``team`` is the thread's team.
    """

    async def team_live_runs(
        self, team: str, *, requester: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Live top-level runs of ``team`` (``requester``'s, or everyone's when None),
        newest ``created_at`` first (ties by id, descending), at most ``limit``."""
        ...

    async def team_ended_runs(
        self, team: str, *, requester: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        """Terminal top-level runs of ``team`` (``requester``'s, or everyone's), the
        latest ``updated_at`` first (ties by id, descending), at most ``limit``."""
        ...

    async def runs_changed_since(self, since: datetime, *, limit: int = 1000) -> list[RunRecord]:
        """Runs whose ``updated_at`` is at or after ``since`` (any team, children too),
        oldest ``updated_at`` first (ties by id), at most ``limit``.

        ``updated_at`` is written with the writer's clock: a caller polling this should
        ask again a little before its last answer and skip what it saw."""
        ...

    async def checkpoint_turns(self, run_ids: Collection[str]) -> dict[str, int]:
        """The ``turn`` of each run's checkpoint, by run id (runs without one left out),
        without reading the conversations."""
        ...

    async def events_of_kind(
        self, run_ids: Collection[str], kinds: Collection[str]
    ) -> list[AuditEvent]:
        """The audit events of ``run_ids`` whose ``kind`` is among ``kinds``, in the order
        they were recorded (until purged)."""
        ...


# -- the durable resume schedule (docs/stopping.md) ------------------------------------


class ResumeStore(Protocol):
    """Each ended run's resume decision: what any worker starts a resume from, on time,
    whoever decided it and whatever happened to that worker since."""

    async def set_resume(
        self,
        run_id: str,
        new: ResumeState | None,
        *,
        expected: Collection[ResumeState | None],
        due_by: datetime | None = None,
        claimed_by: str | None = None,
        state: RunState | None = None,
        **changes: Any,
    ) -> bool:
        """Compare-and-set of the ``resume`` decision of a run that has ended.

        Moves ``resume`` to ``new`` only if the run is in a terminal state and its
        ``resume`` is in ``expected`` (None: not decided yet). ``due_by``: only a resume
        due by then, ``scheduled`` with ``resume_at`` at or before it, or ``claimed``
        with its claim (``lease_expires_at``) run out by then. ``claimed_by``: only a
        resume that worker holds (``owner``). ``state``: move the run's state too (a
        resume in place makes it live again), only for a run in an ended state from which
        that move is legal. ``changes``: other :class:`RunRecord`
        fields, checked as :meth:`RunStore.set_state` checks them. False, writing
        nothing, when another writer got there first; exactly one of racing writers wins.
        """
        ...

    async def start_continuation(
        self,
        run_id: str,
        continuation: RunRecord,
        *,
        expected: Collection[ResumeState | None],
        due_by: datetime | None = None,
        claimed_by: str | None = None,
        **changes: Any,
    ) -> bool:
        """Start ``run_id``'s resume as the new run ``continuation`` (a continuation from
        a summary, or ``Continue``), in one transaction: :meth:`set_resume` to ``started``
        (``expected``, ``due_by``, ``claimed_by``, ``changes`` as there) and, only if that
        moved it, :meth:`RunStore.create_run` of ``continuation``. Either both land or
        neither does: a worker lost between them cannot leave a resume ``started`` with no
        run. False, writing nothing, when another writer got there first. ValueError,
        writing nothing, if ``continuation``'s id exists."""
        ...

    async def pending_resumes(self, *, limit: int = 100) -> list[RunRecord]:
        """Runs whose resume is ahead: ``scheduled`` or ``claimed``, and ``blocked`` runs
        not decided yet; soonest ``resume_at`` (else ``updated_at``) first, at most
        ``limit``."""
        ...

    async def last_user_stop(self, thread: ThreadKey) -> datetime | None:
        """When a person last asked a run in ``thread`` to stop or abort (the newest stop
        request of kind ``stop`` or ``abort``, handled or not, until purged)."""
        ...


# -- the run queue (docs/operations.md, Queue and MAX_LIVE_RUNS) ------------------------


class QueueStore(Protocol):
    """Runs waiting for a worker with room (:func:`~agent_core.values.records.is_waiting`): the
    durable queue every worker shares, and the admission of a person's new runs.

    Queue order is fair: first the runs of the people (a requester in a workspace) with
    the fewest runs holding room (top-level, live, not waiting), then the oldest
    ``created_at`` (ties by id)."""

    async def admit_run(self, run: RunRecord, *, limit: int | None) -> Admission:
        """Store ``run``, a person's new run (``queued`` and top-level; leased to the
        worker that accepted it, or waiting), unless its thread already has a live
        top-level run that someone answers for (waiting, or leased: one live run per
        thread), or its requester already has ``limit`` live top-level runs in its
        workspace, waiting ones included (and Continues not started yet:
        :meth:`admit_continuation`); then nothing is written and the answer says which
        (:class:`~agent_core.values.records.Admission`). ``limit`` None: no limit per person.
        The checks and the insert are one transaction, serialised per thread and per
        person across every store on the database: of two admissions at once for one
        thread, or for a person's last place, one wins. ValueError if ``run`` is not such
        a run, or if the id exists. A waiting ``run`` wakes the other workers as
        :meth:`enqueue_run` does."""
        ...

    async def admit_continuation(
        self, run_id: str, by: str, *, at: datetime, limit: int | None
    ) -> bool:
        """Continue: schedule the continuation of ``run_id`` (``blocked``, its budget
        spent, its resume ``declined`` and nobody's yet) for ``at``, asked by ``by``,
        unless its requester already has ``limit`` requests counted in its workspace
        (live top-level runs, waiting ones included, and Continues not started yet); as
        :meth:`admit_run`, the count and the write are one transaction, serialised per
        person. ``limit`` None: no limit. False if nothing was written (the caller reads
        the run to tell a full person from a press that lost)."""
        ...

    async def enqueue_run(self, run: RunRecord) -> None:
        """Store ``run`` as waiting; ValueError unless it is ``queued`` with no owner,
        lease or parent, or if the id exists. A store with :class:`StopWakeups` wakes
        the other workers (a queued :class:`~agent_core.values.records.Wakeup`) with the commit."""
        ...

    async def claim_queued(
        self, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> RunRecord | None:
        """Take the first waiting run in queue order: in one transaction it becomes
        ``running``, owned by ``owner`` with a lease of ``ttl_s`` seconds from ``now``, and
        is returned as stored after that. None when nothing waits. Of workers claiming at once each
        gets a different run (none is taken twice). A waiting run with a pending stop
        request is passed over: it is being ended (:meth:`end_queued` by the worker that
        took the request, else a later sweep), and must never reach the model.
        """
        ...

    async def unclaim_run(self, run_id: str, owner: str) -> bool:
        """Put a run :meth:`claim_queued` gave ``owner`` back in the queue (its worker
        could not start it after all: it began shutting down). Only a ``running`` run
        still ``owner``'s moves; True if this call moved it."""
        ...

    async def requeue_run(self, run_id: str, owner: str, *, status_ts: str | None = None) -> bool:
        """Put in the queue a run ``owner`` accepted and has not started (``queued`` and
        held by ``owner``): it waits, with no owner and no lease, for any worker, with
        ``status_ts`` as its status message if given. Wakes the other workers as
        :meth:`enqueue_run` does. True if this call moved it; False if it is no longer
        ``owner``'s or has started."""
        ...

    async def queued_runs(self, *, limit: int = 1000) -> list[RunRecord]:
        """The waiting runs in queue order, at most ``limit`` (ValueError if negative)."""
        ...

    async def count_queued(self) -> int:
        """How many runs wait."""
        ...

    async def stopped_in_queue(self, *, limit: int = 100) -> list[RunRecord]:
        """Waiting runs with a pending stop request (their ending is due), oldest first."""
        ...


class ApprovalStore(Protocol):
    """Tool calls held for a person's decision (:mod:`agent_core.values.approvals`), committed
    before the click that decides one is acknowledged.

    Adding and deciding one also moves its run's ``updated_at`` (in the same
    transaction): App Home lists a run's pending approvals, and refreshes on that."""

    async def add_approval(self, record: ApprovalRecord) -> bool:
        """Add a ``requested`` approval; False (nothing written) if its id exists."""
        ...

    async def set_approval_message(self, approval_id: str, message_ts: str) -> bool:
        """Note where the approval message was posted; False if there is no such row."""
        ...

    async def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        decided_by: str | None = None,
        at: datetime | None = None,
    ) -> bool:
        """Compare-and-set ``requested`` → ``status``: True if this call decided it, False
        if it was decided already (the first decision wins) or does not exist. On
        PostgreSQL the commit wakes the run's owner (the stop requests' channel)."""
        ...

    async def take_approval(self, approval_id: str, *, at: datetime | None = None) -> bool:
        """Mark a decided approval taken by its run (once: True the first time)."""
        ...

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...

    async def pending_approvals(
        self, run_ids: Collection[str] | None = None
    ) -> list[ApprovalRecord]:
        """``requested`` approvals (of these runs), oldest first."""
        ...

    async def approvals_for(self, run_id: str) -> list[ApprovalRecord]:
        """Every approval of a run, oldest first."""
        ...

    async def pending_approvals_under(self, run_ids: Collection[str]) -> list[ApprovalRecord]:
        """``requested`` approvals of these runs and of their sub-agents (any depth),
        oldest first: App Home lists a live run's held calls, its sub-agents' included."""
        ...

    async def ended_runs_with_open_approvals(self, *, limit: int = 100) -> list[RunRecord]:
        """Runs that have ended (any terminal state) with an approval still ``requested``,
        in one query (the reconciler's pass), oldest ``updated_at`` first, at most
        ``limit``. Runs and their approvals are purged together: an approval without
        its run is not listed."""
        ...


class Store(
    RunStore,
    ApprovalStore,
    RunQueries,
    DashboardQueries,
    StopRequestStore,
    LeaseStore,
    RetentionStore,
    DeliveryLog,
    GuidanceStore,
    ParticipantStore,
    ResumeStore,
    QueueStore,
    Protocol,
):
    """Everything a worker needs from one database.

    :func:`agent_core.stores.factory.open_store` returns one; the caller closes it.
    """

    async def close(self) -> None: ...
