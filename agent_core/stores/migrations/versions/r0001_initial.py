"""The first schema: runs, stop requests, checkpoints, audit events.

Decisions:

- Timestamps are ``timestamptz`` on PostgreSQL and fixed-width UTC ISO-8601 text on
  SQLite, which has no timestamp type; the adapters' codec writes that text so that
  text order is time order (lease expiry and purge compare it directly).
- JSON is PostgreSQL ``json`` (kept as written, accepts any valid JSON text) rather than
  ``jsonb``; nothing queries inside it and checkpoints are written every turn.
- No foreign keys: a stop request or an audit event may arrive for a run this database
  does not hold (yet), exactly as the memory store allows, and audit rows outlive runs.
- ``checkpoints`` keeps one row per run, the latest: resuming only ever needs that, and
  every checkpoint already holds the whole conversation.
- ``stop_requests.seq`` only orders requests committed in the same microsecond.

Revision ID: r0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0001"
down_revision: str | None = None
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")
_JSON = sa.JSON().with_variant(sa.Text(), "sqlite")
# BIGINT on PostgreSQL; SQLite autoincrements only an ``INTEGER PRIMARY KEY``.
_SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_RUN_STATES = (
    "queued",
    "running",
    "stopping",
    "finished",
    "blocked",
    "failed",
    "userinterlude",
    "askuserQuestion",
)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("thread_ts", sa.Text(), nullable=False),
        sa.Column("requester", sa.Text(), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("parent_id", sa.Text()),
        sa.Column("owner", sa.Text()),
        sa.Column("lease_expires_at", _TIME),
        sa.Column("status_ts", sa.Text()),
        sa.Column("outcome", sa.Text()),
        sa.Column("stop_reason", sa.Text()),
        sa.Column("exit_code", sa.Text()),
        sa.Column("stopped_by", sa.Text()),
        sa.Column("result", _JSON),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.CheckConstraint(_in("state", _RUN_STATES), name="ck_runs_state"),
    )
    # Reconciliation scans live runs by lease expiry; heartbeats update by owner.
    op.create_index("ix_runs_state_lease", "runs", ["state", "lease_expires_at"])
    op.create_index("ix_runs_owner", "runs", ["owner"])
    # "A thread has at most one live run" and child lookups (stop reaches children).
    op.create_index("ix_runs_thread", "runs", ["team", "channel", "thread_ts"])
    op.create_index("ix_runs_parent_id", "runs", ["parent_id"])

    op.create_table(
        "stop_requests",
        sa.Column("seq", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("id", sa.Text(), nullable=False, unique=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("thread_ts", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("requested_at", _TIME, nullable=False),
        sa.Column("handled_at", _TIME),
        sa.CheckConstraint(_in("status", ("requested", "handled")), name="ck_stop_status"),
        sa.CheckConstraint(_in("kind", ("stop", "abort", "shutdown")), name="ck_stop_kind"),
    )
    # The owner's poll asks for pending requests of its runs; the audit view by run.
    op.create_index("ix_stop_requests_status_run_id", "stop_requests", ["status", "run_id"])
    op.create_index("ix_stop_requests_run_id", "stop_requests", ["run_id"])

    op.create_table(
        "checkpoints",
        sa.Column("run_id", sa.Text(), primary_key=True),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("messages", _JSON, nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
    )

    op.create_table(
        "events",
        sa.Column("id", _SERIAL, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.Column("detail", _JSON, nullable=False),
    )
    op.create_index("ix_events_run_id", "events", ["run_id"])
    op.create_index("ix_events_at", "events", ["at"])


def downgrade() -> None:
    for table in ("events", "checkpoints", "stop_requests", "runs"):
        op.drop_table(table)
