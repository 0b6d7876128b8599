"""The wall clock every part of threadpilot reads: timezone-aware UTC, so stored times
compare alike whichever worker wrote them."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utcnow"]


def utcnow() -> datetime:
    """Now, in UTC (timezone-aware)."""
    return datetime.now(UTC)
