"""``runs.final_posted_at``: when Slack accepted the run's terminal message.

Decisions:

- Nullable with no default: rows from r0001 read as "not posted" (NULL), and adding a
  nullable column without a default rewrites no rows on either database, so the upgrade
  is quick on a large ``runs`` table. A worker still on r0001 code keeps working against
  the upgraded schema: it names its columns on insert and ignores the extra one on read.
- One index, ``(state, final_posted_at)``: the reconciler's "ended but the final message
  never made it" scan (``state IN (terminal) AND final_posted_at IS NULL``) reads only
  the matching entries. A plain ``(state)`` index would add nothing: it is the leading
  column of this one and of r0001's ``(state, lease_expires_at)``.

Revision ID: r0002
Revises: r0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0002"
down_revision: str | None = "r0001"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("runs")}
    if "final_posted_at" not in present:  # else an earlier run of this revision added it
        op.add_column("runs", sa.Column("final_posted_at", _TIME, nullable=True))
    # Outside a transaction, CONCURRENTLY on PostgreSQL: workers of the previous version
    # keep writing ``runs`` meanwhile (r0007 says why). IF NOT EXISTS: a build cut short
    # is run again.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_runs_state_final_posted",
            "runs",
            ["state", "final_posted_at"],
            if_not_exists=True,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    op.drop_index("ix_runs_state_final_posted", table_name="runs")
    # SQLite has had ALTER TABLE ... DROP COLUMN since 3.35 (2021).
    op.drop_column("runs", "final_posted_at")
