"""What the PostgreSQL store and its stop listener share: the driver's error types, the
NOTIFY channel, and a password-free way to name a database in messages."""

from __future__ import annotations

from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]

__all__ = ["DRIVER_ERRORS", "STOP_CHANNEL", "describe_dsn"]

STOP_CHANNEL = "threadpilot_stop"
"""``NOTIFY threadpilot_stop, '<run id>'`` goes out with every committed stop request."""

# What asyncpg raises for a failed query or connection. TimeoutError is an OSError.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
)


def describe_dsn(dsn: str) -> str:
    """``host:port/db`` for messages: never the user's password."""
    parts = urlsplit(dsn)
    return parts.netloc.rpartition("@")[2] + parts.path
