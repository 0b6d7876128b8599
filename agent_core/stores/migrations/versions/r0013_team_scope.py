"""``runs.enterprise_id``: the Enterprise Grid org of a run's workspace.

An org-wide install serves every workspace of an enterprise; a run already names its
workspace (``team``), and now its enterprise too, so what belongs to one organisation
can be found (and purged) by either.

Decisions:

- Nullable with no default: adding it rewrites no rows on either database; a run written
  before, or in a standalone workspace, reads as "no enterprise".
- No new index: a workspace's runs are found by ``team``, which leads ``ix_runs_thread``
  already.

Revision ID: r0013
Revises: r0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0013"
down_revision: str | None = "r0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("runs")}
    if "enterprise_id" not in present:  # else an earlier run of this revision added it
        op.add_column("runs", sa.Column("enterprise_id", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "enterprise_id")
