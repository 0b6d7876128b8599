"""``guidance``: replies people wrote to a live run, until the model saw them or never will.

A reply in a live run's thread is committed here before Slack's event is acknowledged
(docs/stopping.md, Guidance); the run's owner, whichever worker it is, delivers it at
the run's next turn boundary and marks it ``delivered``, or ``undelivered`` when the run
ended first (a Stop won).

Decisions:

- ``id`` is the caller's and unique: the Slack layer derives it from the reply's own
  message (team, channel, ts), so a re-delivered event inserts nothing
  (``ON CONFLICT (id) DO NOTHING``) and a retried insert answers what really happened.
- ``seq`` only orders replies committed in the same microsecond, as in ``stop_requests``:
  several replies reach the model in the order they were written.
- ``message_ts`` is the reply's Slack message, where its reaction goes; nullable, since
  guidance may come from elsewhere than a Slack message.
- ``settled_at`` is when it became ``delivered`` or ``undelivered``; the retention purge
  drops settled rows by it and never a queued one.
- One index ``(status, run_id)`` for the owner's "queued guidance of my runs" scan, and
  one on ``run_id`` for a run's history; no foreign keys, as in r0001.

Revision ID: r0004
Revises: r0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0004"
down_revision: str | None = "r0003"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")
_SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_STATUSES = ("queued", "delivered", "undelivered")


def upgrade() -> None:
    op.create_table(
        "guidance",
        sa.Column("seq", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("id", sa.Text(), nullable=False, unique=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("thread_ts", sa.Text(), nullable=False),
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("message_ts", sa.Text()),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("queued_at", _TIME, nullable=False),
        sa.Column("settled_at", _TIME),
        sa.CheckConstraint(
            f"status IN ({', '.join(repr(s) for s in _STATUSES)})", name="ck_guidance_status"
        ),
    )
    op.create_index("ix_guidance_status_run_id", "guidance", ["status", "run_id"])
    op.create_index("ix_guidance_run_id", "guidance", ["run_id"])


def downgrade() -> None:
    op.drop_table("guidance")
