"""The durable run queue: runs waiting for room under ``MAX_LIVE_RUNS``.

A run that arrives while its worker is full is stored in state ``queued`` with no owner
and waits there; any worker with room takes the oldest (docs/operations.md, Queue and
MAX_LIVE_RUNS).

Decisions:

- No new table: a waiting run is a ``runs`` row like any other (its thread, its status
  message, its stop requests and guidance are found as a live run's are), so taking it
  is one ``UPDATE`` that moves its state and sets its owner and lease together.
- "Waiting" is ``state = 'queued' AND owner IS NULL AND parent_id IS NULL``: a resume in
  place also passes through ``queued`` (with its owner set), and a sub-agent's row is
  ``queued`` for a moment before its parent's worker starts it (it has a ``parent_id``).
- One partial index, in queue order (``created_at``, then ``id``): it holds only the
  waiting runs, so taking the head and counting the queue do not grow with the history
  of ``runs``.

Revision ID: r0008
Revises: r0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0008"
down_revision: str | None = "r0007"
branch_labels = None
depends_on = None

_WAITING = "state = 'queued' AND owner IS NULL AND parent_id IS NULL"


def upgrade() -> None:
    # Outside a transaction, CONCURRENTLY on PostgreSQL: workers of the previous version
    # keep writing ``runs`` meanwhile (r0007 says why). IF NOT EXISTS: a build cut short
    # is run again.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_runs_queue",
            "runs",
            ["created_at", "id"],
            postgresql_where=sa.text(_WAITING),
            sqlite_where=sa.text(_WAITING),
            if_not_exists=True,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    op.drop_index("ix_runs_queue", table_name="runs")
