"""Alembic revisions, oldest first by ``down_revision``; alembic skips this file."""
