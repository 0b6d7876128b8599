"""``installations``: the credentials of each workspace or organisation the app is in.

In OAuth mode the app is installed by each workspace (or, on Enterprise Grid, once for a
whole organisation) and keeps what Slack's ``oauth.v2.access`` answered here, beside the
runs it serves (docs/admin.md, Installations).

Decisions:

- One row per ``(enterprise_id, team_id)``, the primary key, written by an upsert: a
  re-install replaces the row, it never adds one. An org-wide install has ``team_id``
  ``''`` and a workspace outside any enterprise ``enterprise_id`` ``''`` (not NULL, so
  the key is a plain one on both databases).
- ``secret`` is the installation as the app encodes it (JSON, encrypted when the app
  has a key): the core neither reads nor decrypts it.
- ``expires_at`` is when the access token expires (token rotation); NULL when it does
  not. ``refresh_owner`` / ``refresh_until`` are a lease: the one worker refreshing the
  token holds it (a refresh token is single-use), and after a failed refresh
  ``refresh_until`` is when the next try is due. ``refresh_failures`` and
  ``refresh_error`` say what the last tries met, for ``--check``.
- One index on ``expires_at``, for "which tokens are due for a refresh".

Revision ID: r0011
Revises: r0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0011"
down_revision: str | None = "r0010"
branch_labels = None
depends_on = None

# As in r0001 (not imported: a revision stays as it was written).
_TIME = sa.DateTime(timezone=True).with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "installations",
        sa.Column("enterprise_id", sa.Text(), nullable=False, server_default=""),
        sa.Column("team_id", sa.Text(), nullable=False, server_default=""),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("expires_at", _TIME),
        sa.Column("installed_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.Column("refresh_owner", sa.Text()),
        sa.Column("refresh_until", _TIME),
        sa.Column("refresh_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("refresh_error", sa.Text()),
        sa.PrimaryKeyConstraint("enterprise_id", "team_id", name="pk_installations"),
    )
    op.create_index("ix_installations_expires_at", "installations", ["expires_at"])


def downgrade() -> None:
    op.drop_table("installations")
