"""Indexes for App Home and ``/threadpilot``: a team's runs, and the runs that changed.

App Home lists a person's (or, for an admin, everyone's) runs of one workspace, and each
worker with someone looking at App Home asks every second or so which runs changed
(docs/slack-setup.md, Home tab). ``runs`` keeps ``RETENTION_DAYS`` of history (it was
never purged when this was written), so both must stay index lookups as it grows.

Decisions:

- ``(team, requester, updated_at)`` serves a person's live and ended runs; an admin's
  listing (every requester) uses its ``team`` prefix.
- ``updated_at`` alone serves "changed since": the poll reads only the newest rows.
- No new table: what the dashboard shows is already in ``runs``, ``checkpoints`` and
  ``events`` (feedback presses are audit events).

Revision ID: r0006
Revises: r0005
"""

from __future__ import annotations

from alembic import op

revision = "r0006"
down_revision: str | None = "r0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Outside a transaction, CONCURRENTLY on PostgreSQL: workers of the previous version
    # keep writing ``runs`` meanwhile (r0007 says why). IF NOT EXISTS: a build cut short
    # is run again.
    with op.get_context().autocommit_block():
        for name, columns in (
            ("ix_runs_team_requester", ["team", "requester", "updated_at"]),
            ("ix_runs_updated_at", ["updated_at"]),
        ):
            op.create_index(name, "runs", columns, if_not_exists=True, postgresql_concurrently=True)


def downgrade() -> None:
    op.drop_index("ix_runs_updated_at", table_name="runs")
    op.drop_index("ix_runs_team_requester", table_name="runs")
