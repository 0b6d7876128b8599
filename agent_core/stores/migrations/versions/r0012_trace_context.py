"""``runs.trace_context``: the W3C ``traceparent`` of a run's trace.

With traces on (``OTEL_EXPORTER_OTLP_ENDPOINT``), a run writes its root span's context as
it starts. A Stop taken by another worker, the reconciler ending a lost worker's run and a
resumed run (a new trace) link to it, so one run's story can be followed across workers
and restarts.

Decisions:

- Nullable Text with no default: adding it rewrites no rows on either database; runs
  written before, or without traces, read as untraced. A worker on older code names its
  columns on insert and ignores this one on read.
- No index: it is read with its run, by id.

Revision ID: r0012
Revises: r0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0012"
down_revision: str | None = "r0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("runs")}
    if "trace_context" not in present:  # else an earlier run of this revision added it
        op.add_column("runs", sa.Column("trace_context", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite has had ALTER TABLE ... DROP COLUMN since 3.35 (2021).
    op.drop_column("runs", "trace_context")
