"""``thread_participants``: who wrote in which Slack thread.

With ``STOP_POLICY=participants`` the people who wrote in a run's thread may stop or
abort it (docs/stopping.md). A click lands on any worker, usually not the one that saw
those messages, so who wrote where is kept here and every worker decides alike (one stop
service, whichever worker it runs in). The requester needs no row: it is on the run.

Decisions:

- The key is the thread and the user, ``(team, channel, thread_ts, user_id)``: a person
  is a participant of a thread, not of one run in it, so a run started later in the same
  thread counts those who wrote before it. Writing again only moves ``seen_at``
  (``INSERT ... ON CONFLICT DO UPDATE``, one statement on both databases).
- ``seen_at`` is when they last wrote, for the retention purge (its own index, so the
  purge does not scan the table): a thread quiet for ``RETENTION_DAYS`` forgets its
  participants, and whoever writes there again is recorded again.
- No foreign keys, as in r0001: a thread is not a row of its own.

Revision ID: r0005
Revises: r0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0005"
down_revision: str | None = "r0004"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "thread_participants",
        sa.Column("team", sa.Text(), primary_key=True),
        sa.Column("channel", sa.Text(), primary_key=True),
        sa.Column("thread_ts", sa.Text(), primary_key=True),
        sa.Column("user_id", sa.Text(), primary_key=True),
        sa.Column("seen_at", _TIME, nullable=False),
    )
    op.create_index("ix_thread_participants_seen_at", "thread_participants", ["seen_at"])


def downgrade() -> None:
    op.drop_table("thread_participants")
