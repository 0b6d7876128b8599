"""What the adapters share about the run queue (:class:`~agent_core.ports.QueueStore`).

The SQL of each database lives with its adapter (``sqlite_queue``, ``postgres_queue``);
this holds the definitions both write into their statements (a waiting run, a person's
runs, the fair order of the queue), the check every adapter makes before queueing a
run, and the same rules for the memory store (:func:`person_key`, :func:`fair_key`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from agent_core.values.ended import EndedBecause
from agent_core.values.records import ResumeState, is_waiting
from agent_core.values.states import LIVE_STATES, RunState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

    from agent_core.values.records import RunRecord

__all__ = [
    "CONTINUE_SQL",
    "FAIR_FROM_SQL",
    "FAIR_ORDER_SQL",
    "STOP_PENDING_SQL",
    "WAITING_SQL",
    "check_admitted",
    "check_waiting",
    "counts_for_person",
    "fair_key",
    "holds_room",
    "holds_thread",
    "person_key",
    "person_runs_sql",
    "thread_held_sql",
]

WAITING_SQL = "state = 'queued' AND owner IS NULL AND parent_id IS NULL"
"""A waiting run, as :func:`agent_core.values.records.is_waiting` (and the partial index
``ix_runs_queue`` of r0008) define it."""

STOP_PENDING_SQL = (
    "EXISTS (SELECT 1 FROM stop_requests s WHERE s.run_id = runs.id AND s.status = 'requested')"
)
"""A run with a stop request not handled yet: a waiting one is being ended, not taken."""


_LIVE_SQL = ", ".join(f"'{state}'" for state in sorted(LIVE_STATES))


def _continuing_sql(alias: str) -> str:
    return (
        f"{alias}.state = 'blocked' AND {alias}.ended_because = 'budget_exhausted' "
        f"AND {alias}.resume IN ('scheduled', 'claimed')"
    )


def person_runs_sql(team: str, requester: str) -> str:
    """A count of one person's requests in one workspace that ``MAX_RUNS_PER_USER``
    limits (``team`` and ``requester``: SQL expressions): their top-level live runs,
    waiting ones included, and the continuations someone pressed Continue for that have
    not started yet (:func:`counts_for_person`)."""
    return (
        f"(SELECT count(*) FROM runs p WHERE p.team = {team} AND p.requester = {requester} "
        f"AND p.parent_id IS NULL AND (p.state IN ({_LIVE_SQL}) OR ({_continuing_sql('p')})))"
    )


CONTINUE_SQL = (
    "UPDATE runs SET resume = 'scheduled', resume_at = {at}, resume_by = {by}, "
    "updated_at = {now} WHERE id = {id} AND state = 'blocked' "
    "AND ended_because = 'budget_exhausted' AND resume = 'declined' AND resume_by IS NULL"
)
"""Continue's commit (:meth:`~agent_core.ports.QueueStore.admit_continuation`), with each
adapter's parameter marks put in: a run that spent its budget, continued by nobody yet."""


def counts_for_person(run: RunRecord) -> bool:
    """True if ``run`` counts towards its person's ``MAX_RUNS_PER_USER``
    (:func:`person_runs_sql`): top-level, and live or a Continue not started yet."""
    if run.parent_id is not None:
        return False
    continuing = (
        run.state is RunState.BLOCKED
        and run.ended_because is EndedBecause.BUDGET_EXHAUSTED
        and run.resume in (ResumeState.SCHEDULED, ResumeState.CLAIMED)
    )
    return run.state in LIVE_STATES or continuing


def thread_held_sql(team: str, channel: str, thread_ts: str, now: str) -> str:
    """A condition: the thread (``team``, ``channel``, ``thread_ts``: SQL expressions) has
    a live top-level run that someone answers for: waiting in the queue, or leased past
    ``now``. A live row whose lease ran out lost its worker (ended by whoever finds it)
    and holds nothing. What :func:`holds_thread` says for one run."""
    return (
        f"EXISTS (SELECT 1 FROM runs t WHERE t.team = {team} AND t.channel = {channel} "
        f"AND t.thread_ts = {thread_ts} AND t.parent_id IS NULL "
        f"AND t.state IN ({_LIVE_SQL}) "
        f"AND (t.owner IS NULL OR t.lease_expires_at > {now}))"
    )


def holds_thread(run: RunRecord, now: datetime) -> bool:
    """``run`` keeps its thread from a second live run (:func:`thread_held_sql`)."""
    if run.parent_id is not None or run.state not in LIVE_STATES:
        return False
    return run.owner is None or (run.lease_expires_at is not None and run.lease_expires_at > now)


_HELD_SQL = (
    "SELECT team, requester, count(*) AS held FROM runs "
    f"WHERE parent_id IS NULL AND state IN ({_LIVE_SQL}) "
    "AND NOT (state = 'queued' AND owner IS NULL) GROUP BY team, requester"
)

FAIR_FROM_SQL = (
    f"runs LEFT JOIN ({_HELD_SQL}) h ON h.team = runs.team AND h.requester = runs.requester"
)
"""``runs``, each with ``h.held``: how many runs its person has holding room (top-level,
live, not waiting). The live runs are counted once, in one pass, not once per waiting
run: the queue can be long."""

FAIR_ORDER_SQL = "ORDER BY coalesce(h.held, 0), runs.created_at, runs.id"
"""The queue's order, for a query on :data:`FAIR_FROM_SQL`: first the runs of the people
with the fewest runs holding room, then the oldest (ties by id)."""


def person_key(run: RunRecord) -> tuple[str, str]:
    """Whose run ``run`` is: its requester, in its workspace."""
    return run.thread.team, run.requester


def holds_room(run: RunRecord) -> bool:
    """A top-level live run that is not waiting: what :data:`FAIR_FROM_SQL` counts."""
    return run.parent_id is None and run.state in LIVE_STATES and not is_waiting(run)


def fair_key(runs: Iterable[RunRecord]) -> Callable[[RunRecord], tuple[int, datetime, str]]:
    """The sort key of :data:`FAIR_ORDER_SQL`, given every run there is."""
    held = Counter(person_key(r) for r in runs if holds_room(r))
    return lambda run: (held[person_key(run)], run.created_at, run.id)


def check_admitted(run: RunRecord) -> None:
    """ValueError unless ``run`` is a person's new run: top-level and ``queued``
    (held by its worker with a lease, or waiting)."""
    if run.parent_id is not None or run.state is not RunState.QUEUED:
        raise ValueError(f"run {run.id}: only a queued top-level run can be admitted")
    if (run.owner is None) != (run.lease_expires_at is None):
        raise ValueError(f"run {run.id}: an owner needs a lease, and a lease an owner")


def check_waiting(run: RunRecord) -> None:
    """ValueError unless ``run`` can be queued: waiting, with no lease."""
    if not is_waiting(run) or run.lease_expires_at is not None:
        raise ValueError(f"run {run.id}: only a queued top-level run with no owner can wait")
