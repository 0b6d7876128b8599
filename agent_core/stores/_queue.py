"""What the adapters share about the run queue (:class:`~agent_core.ports.QueueStore`).

The SQL of each database lives with its adapter (``sqlite_queue``, ``postgres_queue``);
this holds the one definition of a waiting run both write into their statements, and
the check every adapter makes before queueing a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.records import is_waiting

if TYPE_CHECKING:
    from agent_core.records import RunRecord

__all__ = ["STOP_PENDING_SQL", "WAITING_SQL", "check_waiting"]

WAITING_SQL = "state = 'queued' AND owner IS NULL AND parent_id IS NULL"
"""A waiting run, as :func:`agent_core.records.is_waiting` (and the partial index
``ix_runs_queue`` of r0008) define it."""

STOP_PENDING_SQL = (
    "EXISTS (SELECT 1 FROM stop_requests s WHERE s.run_id = runs.id AND s.status = 'requested')"
)
"""A run with a stop request not handled yet: a waiting one is being ended, not taken."""


def check_waiting(run: RunRecord) -> None:
    """ValueError unless ``run`` can be queued: waiting, with no lease."""
    if not is_waiting(run) or run.lease_expires_at is not None:
        raise ValueError(f"run {run.id}: only a queued top-level run with no owner can wait")
