"""What a run keeps, and what is kept for it: runs, checkpoints and the audit trail, stop
requests, guidance, who wrote in a thread, and the queries over runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from datetime import datetime

    from agent_core.values.outcomes import ExitCode
    from agent_core.values.records import (
        AuditEvent,
        Checkpoint,
        GuidanceRecord,
        GuidanceStatus,
        RunRecord,
        StopRequestRecord,
        ThreadKey,
    )
    from agent_core.values.states import RunState
    from agent_core.values.stop import StopReason

__all__ = [
    "DashboardQueries",
    "GuidanceStore",
    "ParticipantStore",
    "RunQueries",
    "RunStore",
    "StopRequestStore",
]


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

    async def live_children(self, parent_ids: Collection[str]) -> list[RunRecord]:
        """The live sub-agents whose parent is among ``parent_ids`` (one level down),
        oldest ``created_at`` first (ties by id): listed under their parents."""
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
