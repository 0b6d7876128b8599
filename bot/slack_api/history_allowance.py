"""How much of a thread Slack lets the app read, and when (``SLACK_HISTORY_LIMIT``).

An internal app reads a thread at Tier 3 (``tier3``): page after page, as much as
:mod:`bot.inbound.thread_history` wants. A commercially distributed app that is not in
the Slack Marketplace (``distributed``) gets one ``conversations.replies`` call a minute
per workspace, of at most 15 messages. Waiting a minute is never an option (a run would
start a minute late, and nothing may wait on a click's path), so :meth:`take` answers at
once: a call now, or none; a reader given none goes on from what the app has stored and
says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.config.settings import HistoryLimit

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DISTRIBUTED_MESSAGES", "DISTRIBUTED_WINDOW_S", "Grant", "HistoryAllowance"]

DISTRIBUTED_WINDOW_S = 60.0
"""One ``conversations.replies`` call per workspace in this many seconds."""
DISTRIBUTED_MESSAGES = 15
"""At most this many messages per call."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What a reader may ask Slack for now."""

    pages: int
    """How many ``conversations.replies`` calls (0: none, read what is stored)."""
    page_size: int | None
    """The ``limit`` of each (None: the reader's own)."""


class HistoryAllowance:
    """One workspace's allowance of thread reads, under ``limit``."""

    def __init__(self, limit: HistoryLimit, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._last: float | None = None

    def take(self, pages: int) -> Grant:
        """Up to ``pages`` calls, now: all of them under ``tier3``; under
        ``distributed`` one call of :data:`DISTRIBUTED_MESSAGES` once a minute, else
        none (taken at once: the minute counts from here)."""
        if self.limit is HistoryLimit.TIER3:
            return Grant(pages, None)
        now = self._clock()
        if self._last is not None and now - self._last < DISTRIBUTED_WINDOW_S:
            return Grant(0, DISTRIBUTED_MESSAGES)
        self._last = now
        return Grant(min(pages, 1), DISTRIBUTED_MESSAGES)
