"""Why a run ended, and its resume: the durable schedule any worker starts it from.

See docs/stopping.md: every run stores ``ended_because``; a run that may resume
has a decision (``resume``: scheduled, claimed, started, declined, cancelled) and, when
scheduled, the moment it is due (``resume_at``), so that any worker starts it on time,
even after the worker that decided it was restarted or killed.

Decisions:

- Columns on ``runs``, not a table of their own: a run has at most one resume ahead of
  it, and the compare-and-set that starts a resume in place moves the run's state in the
  same statement (``blocked`` -> ``queued``), which one row makes atomic on both
  databases. ``resume_reason`` and ``resume_by`` say why, and who (a person cancelling
  or hurrying it), for the status message.
- ``auto_resumes``: the thread's automatic resumes since a person last started a run
  there, carried from run to run (a continuation counts one more than the run it
  continues; a resume in place adds one to its own run). ``MAX_AUTO_RESUMES`` reads it
  without counting rows. ``NOT NULL DEFAULT 0``: code of an older revision inserting a
  run leaves it 0, which is what a person's run has.
- ``continued_from``: the run a continuation starts from the summary of (no foreign
  key, as in r0001).
- ``ended_because`` is filled in from the stored results of existing runs (they carry
  it since the classifier landed; older ones have none and stay NULL).
- Existing ended runs are decided as ``declined``: they ended before any policy looked
  at them, and resuming a run from days ago would surprise everyone. The exception is a
  run ``blocked`` by a shutdown (``EXIT-SHUTDOWN``): the previous version resumed those
  when it restarted, so a deploy that stopped runs still resumes them under this one.
- One partial index serves the schedule scan (``pending_resumes``): it holds only runs
  with a resume ahead, so its size does not grow with the history of ``runs``. And one
  on ``stop_requests`` by thread, for "when did a person last stop a run here"
  (``USER_EXIT_GRACE``).

Revision ID: r0007
Revises: r0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0007"
down_revision: str | None = "r0006"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")
_PENDING = "resume IN ('scheduled', 'claimed') OR (state = 'blocked' AND resume IS NULL)"
_LIVE = "('queued', 'running', 'stopping')"


def upgrade() -> None:
    for column in (
        sa.Column("ended_because", sa.Text(), nullable=True),
        sa.Column("continued_from", sa.Text(), nullable=True),
        sa.Column("auto_resumes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("resume", sa.Text(), nullable=True),
        sa.Column("resume_at", _TIME, nullable=True),
        sa.Column("resume_reason", sa.Text(), nullable=True),
        sa.Column("resume_by", sa.Text(), nullable=True),
    ):
        op.add_column("runs", column)
    if op.get_bind().dialect.name == "sqlite":
        reason = "json_extract(result, '$.ended_because')"
    else:
        reason = "result->>'ended_because'"
    op.execute(f"UPDATE runs SET ended_because = {reason} WHERE result IS NOT NULL")
    op.execute(
        f"UPDATE runs SET resume = 'declined' WHERE state NOT IN {_LIVE} "
        "AND NOT (state = 'blocked' AND exit_code = 'EXIT-SHUTDOWN')"
    )
    op.create_index(
        "ix_runs_resume_pending",
        "runs",
        ["resume_at"],
        postgresql_where=sa.text(_PENDING),
        sqlite_where=sa.text(_PENDING),
    )
    op.create_index(
        "ix_stop_requests_thread",
        "stop_requests",
        ["team", "channel", "thread_ts", "requested_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_stop_requests_thread", table_name="stop_requests")
    op.drop_index("ix_runs_resume_pending", table_name="runs")
    for name in (
        "resume_by",
        "resume_reason",
        "resume_at",
        "resume",
        "auto_resumes",
        "continued_from",
        "ended_because",
    ):
        op.drop_column("runs", name)
