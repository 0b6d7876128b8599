"""``deliveries``: which Slack deliveries (events, clicks) some worker already took.

Slack re-delivers an event it thinks was not acknowledged, maybe to another worker, and a
click can arrive twice; a worker records the delivery's key here before acting on it,
and acts only if its insert was the first (:meth:`agent_core.ports.DeliveryLog.first_delivery`).

Decisions:

- ``key`` is the primary key: ``INSERT ... ON CONFLICT DO NOTHING`` on it is the whole
  de-duplication, atomic on both databases, in one statement.
- ``token`` is a random value per call. A store that retries the insert after a
  connection loss cannot tell "someone else was first" from "my first attempt landed
  before the connection died"; the token it finds on the row tells it.
- ``seen_at`` lets the retention purge drop old keys (Slack re-delivers within minutes),
  by an index of its own so the purge does not scan the table.
- No foreign keys, as in r0001: a key names a delivery, not a run.

Revision ID: r0003
Revises: r0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0003"
down_revision: str | None = "r0002"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("token", sa.Text(), nullable=False),
        sa.Column("seen_at", _TIME, nullable=False),
    )
    op.create_index("ix_deliveries_seen_at", "deliveries", ["seen_at"])


def downgrade() -> None:
    op.drop_table("deliveries")
