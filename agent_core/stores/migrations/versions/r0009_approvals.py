"""``approvals``: tool calls held for a person's decision (docs/tools.md, Approvals).

A run that calls a tool ``MCP_CONFIG`` marks for approval adds a ``requested`` row and
waits; a click on Approve or Deny, in whichever worker Slack hands it to, moves the row
once (``UPDATE ... WHERE status = 'requested'``: the first decision wins) before the
click is acknowledged, and the run's owner learns of it through the stop requests' wake-up.

Decisions:

- ``id`` is the run's (a fresh uuid per held call); no foreign keys, as in r0001.
- ``arguments`` is the model's JSON text as it was: what the person approved is what
  runs, and an audit can show it.
- ``message_ts`` is the approval message in the thread's channel, written once posted:
  a click must come from that message.
- ``decided_at`` is when it left ``requested``; the retention purge may drop decided rows
  by it and never a requested one.
- ``taken_at`` is when the run took the decision (the call ran, or the model read the
  refusal). A run resumed after a shutdown or a lost worker asks again for the same call
  and finds the row it had not taken yet: it waits on the same message, and a decision
  made meanwhile counts; a decision already taken is never used twice.
- One index ``(status, run_id)`` for "requested approvals of my runs" (App Home, a
  resumed run), and one on ``run_id`` for a run's history.

Revision ID: r0009
Revises: r0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0009"
down_revision: str | None = "r0008"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")
_SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_STATUSES = ("requested", "approved", "denied", "expired", "cancelled")


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("seq", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("id", sa.Text(), nullable=False, unique=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("thread_ts", sa.Text(), nullable=False),
        sa.Column("requester", sa.Text(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("call_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.Text()),
        sa.Column("message_ts", sa.Text()),
        sa.Column("requested_at", _TIME, nullable=False),
        sa.Column("decided_at", _TIME),
        sa.Column("taken_at", _TIME),
        sa.CheckConstraint(
            f"status IN ({', '.join(repr(s) for s in _STATUSES)})", name="ck_approvals_status"
        ),
    )
    op.create_index("ix_approvals_status_run_id", "approvals", ["status", "run_id"])
    op.create_index("ix_approvals_run_id", "approvals", ["run_id"])


def downgrade() -> None:
    op.drop_table("approvals")
