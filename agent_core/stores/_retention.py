"""What the retention purge and ``--forget-user`` may delete, as SQL both databases share.

One home for the rule (the memory store applies the same rule in Python, and the
contract suite holds all three to it): a run may go once it has ended, no resume is
ahead of it, and no run that is still needed points at it. A run is *needed* while it is
live or has a resume ahead (``scheduled``, ``claimed``, or ``blocked`` and not decided
yet); what it points at is its parent (``parent_id``) and the run it continues
(``continued_from``), and a needed run's children stay too (their parent reads their
rows). With a run go the rows that hang off it: its checkpoint, stop requests, audit
events and guidance.

Deletes go in batches of at most ``batch_size`` runs (or rows) per transaction, so the
purge never holds SQLite's one writer, or PostgreSQL's row locks, for long: a click's
commit waits for one batch at most.

Conditions are written with ``{cutoff}``, ``{user}`` and ``{team}`` placeholders that
each store fills in with its own parameter marks (``?``, ``$1``); the rest is constants.

Forgetting a workspace (its app uninstalled) deletes its runs that may go, the same way,
and the rows of its threads that hang off no run: handled stop requests, settled
guidance, who wrote in its threads. What its live runs still need is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core.values.states import LIVE_STATES, TERMINAL_STATES, RunState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = [
    "BATCH_SIZE",
    "OLD_ROWS",
    "OLD_RUNS",
    "RUN_TABLES",
    "TEAM_ROWS",
    "TEAM_RUNS",
    "USER_ROWS",
    "USER_RUNS",
    "USER_TEAM_ROWS",
    "USER_TEAM_RUNS",
    "Deleted",
    "check_batch_size",
    "in_batches",
    "removable_runs",
    "user_in_team",
]

BATCH_SIZE = 500
"""Runs (or rows) deleted per transaction: a few milliseconds of SQLite's writer."""


def _in(column: str, values: frozenset[RunState]) -> str:
    return f"{column} IN ({', '.join(repr(str(v)) for v in sorted(values))})"


_RESUME_AHEAD = "(resume IN ('scheduled', 'claimed') OR (state = 'blocked' AND resume IS NULL))"
"""The predicate of r0007's partial index ``ix_runs_resume_pending``, word for word: a
query that says it this way is served by that index."""
_NO_RESUME_AHEAD = (
    "NOT (COALESCE(resume, '') IN ('scheduled', 'claimed') "
    "OR (state = 'blocked' AND resume IS NULL))"
)
"""Its negation; the COALESCE because ``NOT (NULL IN (...))`` is NULL, not true, and an
undecided run that is not ``blocked`` has no resume ahead."""
_NEEDED = (
    f"SELECT id, parent_id, continued_from FROM runs WHERE {_in('state', LIVE_STATES)} "
    f"UNION ALL SELECT id, parent_id, continued_from FROM runs WHERE {_RESUME_AHEAD}"
)
"""The runs still needed, each part read through an index (live: by state; a resume
ahead: the partial index), so the set is small whatever the history."""

RUN_TABLES: tuple[tuple[str, str], ...] = (
    ("checkpoints", "run_id"),
    ("stop_requests", "run_id"),
    ("events", "run_id"),
    ("guidance", "run_id"),
    ("approvals", "run_id"),
    ("runs", "id"),
)
"""Where a run's rows are (table, the column naming the run): the run itself last."""


def removable_runs(condition: str) -> str:
    """``SELECT id FROM runs`` matching ``condition`` that may be deleted, in the order
    to delete them (the longest unchanged first); the caller adds ``LIMIT``."""
    return (
        f"WITH needed AS ({_NEEDED}) "
        # Ended, written as "not live" (the same, the states being a closed set): a
        # condition the planner cannot serve from the state index, so it walks
        # ``ix_runs_updated_at`` in order and stops at the batch's end.
        f"SELECT id FROM runs WHERE {condition} AND NOT {_in('state', LIVE_STATES)} "
        f"AND {_NO_RESUME_AHEAD} "
        "AND id NOT IN (SELECT parent_id FROM needed WHERE parent_id IS NOT NULL) "
        "AND id NOT IN (SELECT continued_from FROM needed WHERE continued_from IS NOT NULL) "
        "AND (parent_id IS NULL OR parent_id NOT IN (SELECT id FROM needed)) "
        "ORDER BY updated_at"
    )


OLD_RUNS = "updated_at < {cutoff}"
"""Runs that have not changed since the cut-off (an ended run changes no more)."""

USER_RUNS = "requester = {user}"
"""A person's runs (sub-agents' runs carry their parent's requester)."""

TEAM_RUNS = "team = {team}"
"""A workspace's runs (sub-agents' runs are in their parent's thread)."""

TEAM_ROWS: tuple[tuple[str, str], ...] = (
    ("thread_participants", "team = {team}"),
    ("stop_requests", "team = {team} AND status = 'handled'"),
    ("guidance", "team = {team} AND status <> 'queued'"),
)
"""A workspace's rows that forgetting it deletes besides its runs' (table, condition)."""

OLD_ROWS: tuple[tuple[str, str], ...] = (
    ("stop_requests", "status = 'handled' AND handled_at < {cutoff}"),
    ("events", "at < {cutoff}"),
    (
        "checkpoints",
        "created_at < {cutoff} AND run_id IN "
        f"(SELECT id FROM runs WHERE {_in('state', TERMINAL_STATES - {RunState.BLOCKED})})",
    ),
    ("deliveries", "seen_at < {cutoff}"),
    ("guidance", "status <> 'queued' AND settled_at < {cutoff}"),
    ("approvals", "status <> 'requested' AND decided_at < {cutoff}"),
    ("thread_participants", "seen_at < {cutoff}"),
)
"""Rows that go by age alone, whoever's run they belong to (table, condition)."""

USER_ROWS: tuple[tuple[str, str], ...] = (
    ("thread_participants", "user_id = {user}"),
    ("guidance", "status <> 'queued' AND author = {user}"),
    ("approvals", "status <> 'requested' AND decided_by = {user}"),
)
"""What else a person wrote, in other people's threads, that forgetting them deletes."""

USER_TEAM_RUNS = "team || ':' || requester = {user}"
"""A person's runs in one workspace; the value is :func:`user_in_team` (one parameter,
so each store's one-value delete serves it; ``--forget-user`` is rare enough to scan)."""

USER_TEAM_ROWS: tuple[tuple[str, str], ...] = (
    ("thread_participants", "team || ':' || user_id = {user}"),
    ("guidance", "status <> 'queued' AND team || ':' || author = {user}"),
    ("approvals", "status <> 'requested' AND team || ':' || decided_by = {user}"),
)
""":data:`USER_ROWS` in one workspace's threads."""


def user_in_team(user: str, team: str) -> str:
    """The value :data:`USER_TEAM_RUNS` and :data:`USER_TEAM_ROWS` compare with."""
    return f"{team}:{user}"


async def in_batches(batch: Callable[[], Awaitable[tuple[int, int]]], batch_size: int) -> Deleted:
    """Call ``batch`` (one transaction: ``(runs, rows)`` it deleted) until one deletes
    fewer than ``batch_size`` runs (or rows); the totals."""
    check_batch_size(batch_size)
    total = Deleted()
    while True:
        runs, rows = await batch()
        total = Deleted(total.runs + runs, total.rows + rows)
        if runs < batch_size:
            return total


def check_batch_size(batch_size: int) -> None:
    """ValueError unless at least 1, before the store is touched."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")


@dataclass(frozen=True, slots=True)
class Deleted:
    runs: int = 0
    """Runs (or, for rows deleted by age, those rows)."""
    rows: int = 0
    """Every row, the runs' own included."""
