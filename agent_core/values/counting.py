"""Counting things in words: "1 turn", "2 turns". The one place the rule lives, for the
core's own reports and the Slack app's text alike."""

from __future__ import annotations

__all__ = ["count"]


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, singular for exactly one (``plural`` defaults to
    ``noun + "s"``); thousands are separated: ``count(1200, "token")`` is "1,200 tokens"."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
