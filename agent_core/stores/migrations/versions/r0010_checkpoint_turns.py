"""``checkpoints.started`` and ``checkpoints.spent``: a checkpoint within a step.

A run's checkpoint is now also written inside a step (``agent_core.run.step_log``): when the
model's reply is complete, before any tool call runs, and as each call starts and each
result arrives. A resume then finishes that step without asking the model again: it runs
the calls with no result, and tells the model that a call which had started has an
unknown effect (it is never run twice).

Decisions:

- ``started``: JSON list of the ids of the reply's calls that began to run. ``spent``:
  JSON object, what the request had spent (tokens, tool calls, time, cost) when the
  checkpoint was written, so a ``kill -9`` does not reset the request's budget.
- Both nullable with no default: adding them rewrites no rows on either database, and
  a row written before (or by a worker still on r0009 code, which names its columns)
  reads as "no call started, spend not recorded".
- No index: a checkpoint is read by its run id (the primary key).

Revision ID: r0010
Revises: r0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0010"
down_revision: str | None = "r0009"
branch_labels = None
depends_on = None

_COLUMNS = ("started", "spent")


def upgrade() -> None:
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("checkpoints")}
    for name in _COLUMNS:
        if name not in present:  # else an earlier run of this revision added it
            op.add_column("checkpoints", sa.Column(name, sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite has had ALTER TABLE ... DROP COLUMN since 3.35 (2021).
    for name in _COLUMNS:
        op.drop_column("checkpoints", name)
