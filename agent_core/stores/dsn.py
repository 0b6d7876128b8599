"""Naming a PostgreSQL database in messages and logs without its password."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["describe_dsn"]


def describe_dsn(dsn: str) -> str:
    """``host:port/db`` for messages: never the user's password."""
    parts = urlsplit(dsn)
    return parts.netloc.rpartition("@")[2] + parts.path
