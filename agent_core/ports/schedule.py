"""The durable resume schedule and the run queue."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Collection
    from datetime import datetime

    from agent_core.values.records import (
        Admission,
        ResumeState,
        RunRecord,
        ThreadKey,
    )
    from agent_core.values.states import RunState

__all__ = ["QueueStore", "ResumeStore"]


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
