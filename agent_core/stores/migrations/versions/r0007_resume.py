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
- ``runs`` may hold a long history, and workers of the previous version keep writing it
  while this runs: the columns are added in a transaction of their own (no rewrite, a
  moment's lock), the backfill goes in batches of :data:`_BATCH` rows by id, each
  committed, and on PostgreSQL the indexes are built ``CONCURRENTLY`` (outside any
  transaction; SQLite builds them in one, which holds its writer for as long). Every
  step may be run again (a worker killed halfway): a column or index already there is
  kept, and the backfill writes only what is still unset.

Revision ID: r0007
Revises: r0006
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import sqlalchemy as sa
from alembic import op

if TYPE_CHECKING:
    from collections.abc import Iterator

revision = "r0007"
down_revision: str | None = "r0006"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")
_PENDING = "resume IN ('scheduled', 'claimed') OR (state = 'blocked' AND resume IS NULL)"
_LIVE = "('queued', 'running', 'stopping')"


_BATCH = 2000
"""Rows per committed batch of the backfill: a fraction of a second each."""


def upgrade() -> None:
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("runs")}
    for column in (
        sa.Column("ended_because", sa.Text(), nullable=True),
        sa.Column("continued_from", sa.Text(), nullable=True),
        sa.Column("auto_resumes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("resume", sa.Text(), nullable=True),
        sa.Column("resume_at", _TIME, nullable=True),
        sa.Column("resume_reason", sa.Text(), nullable=True),
        sa.Column("resume_by", sa.Text(), nullable=True),
    ):
        if column.name not in present:  # else an earlier run of this revision added it
            op.add_column("runs", column)
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.get_context().autocommit_block():
        _backfill(op.get_bind())
        if not sqlite:
            _create_indexes(concurrently=True)
    if sqlite:
        _create_indexes()


def _backfill(bind: sa.Connection) -> None:
    """``ended_because`` from the stored results, ``resume`` decided for ended runs (the
    module docstring), a batch of rows at a time, each batch committed."""
    if bind.dialect.name == "sqlite":
        reason = "json_extract(result, '$.ended_because')"
    else:
        reason = "result->>'ended_because'"
    upto = sa.text(
        "SELECT max(id) FROM (SELECT id FROM runs WHERE id > :after ORDER BY id LIMIT :n) b"
    )
    update = sa.text(
        f"UPDATE runs SET ended_because = COALESCE(ended_because, {reason}), "
        f"resume = CASE WHEN resume IS NULL AND state NOT IN {_LIVE} "
        "AND NOT (state = 'blocked' AND exit_code = 'EXIT-SHUTDOWN') "
        "THEN 'declined' ELSE resume END "
        "WHERE id > :after AND id <= :upto"
    )
    after = ""
    while True:
        with _committed(bind):
            last = bind.execute(upto, {"after": after, "n": _BATCH}).scalar()
            if last is None:
                return
            bind.execute(update, {"after": after, "upto": last})
        after = last


@contextlib.contextmanager
def _committed(bind: sa.Connection) -> Iterator[None]:
    """One batch, committed: on PostgreSQL each statement of an autocommit block commits
    by itself; SQLite's batch is a ``BEGIN IMMEDIATE`` transaction of its own."""
    if bind.dialect.name != "sqlite":
        yield
        return
    bind.exec_driver_sql("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        bind.exec_driver_sql("ROLLBACK")
        raise
    bind.exec_driver_sql("COMMIT")


def _create_indexes(*, concurrently: bool = False) -> None:
    op.create_index(
        "ix_runs_resume_pending",
        "runs",
        ["resume_at"],
        postgresql_where=sa.text(_PENDING),
        sqlite_where=sa.text(_PENDING),
        if_not_exists=True,
        postgresql_concurrently=concurrently,
    )
    op.create_index(
        "ix_stop_requests_thread",
        "stop_requests",
        ["team", "channel", "thread_ts", "requested_at"],
        if_not_exists=True,
        postgresql_concurrently=concurrently,
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
