"""What several workers share: leases, retention, the delivery log, and stop wake-ups."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime

    from agent_core.values.records import (
        Forgotten,
        RunRecord,
        TeamForgotten,
        Wakeup,
    )

__all__ = [
    "DeliveryLog",
    "LeaseStore",
    "Reconnected",
    "RetentionStore",
    "StopListener",
    "StopWakeup",
    "StopWakeups",
]


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
