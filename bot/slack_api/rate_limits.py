"""Slack's rate limits as threadpilot budgets them, and the token bucket that enforces one.

One table: Slack's documented limit per method (calls per minute, per workspace and app),
sourced below. A bucket saves a burst of ``BURST_SHARE`` of that limit (at most
``MAX_BURST`` calls) and refills at what is left of ``WINDOW_SHARE`` of it, so a full
bucket followed by steady use never puts more than 95 % of Slack's limit in any 60-second
window. The burst is what Slack's bursty moments need (a restart telling ten threads at
once, many runs ending together); the steady rate pays for it. :mod:`bot.slack_api.rate_budget`
decides what to send through them.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "LIMITS_PER_MINUTE",
    "UNLISTED_LIMIT",
    "WINDOW_SHARE",
    "TokenBucket",
    "backoff_s",
    "retry_after_s",
]

TIER_2, TIER_3, TIER_4 = 20.0, 50.0, 100.0
# Slack's limit in calls per minute. Source: Slack's rate-limit docs;
# for the streaming and agent-session methods, slackapi/java-slack-sdk's tier registry
# (MethodsRateLimits, and PR #1633 which adds agents.sessions.* as Tier 3).
LIMITS_PER_MINUTE: dict[str, float] = {
    "chat.update": TIER_3,  # every run's status message: the budget that matters most
    "chat.postMessage": 60.0,  # per channel: "about 1 a second, short bursts"
    "chat.postEphemeral": TIER_4,
    "chat.delete": TIER_3,
    "chat.startStream": TIER_2,
    "chat.appendStream": TIER_4,
    "chat.stopStream": TIER_2,
    "reactions.add": TIER_3,
    "reactions.remove": TIER_2,
    "views.publish": TIER_4,
    "views.open": TIER_4,  # Show all: a modal with a held call's arguments
    "agents.sessions.setStatus": TIER_3,
    "assistant.threads.setStatus": TIER_3,  # Slack: "like chat.postMessage"; 3 is safe
    "conversations.replies": TIER_3,
    "conversations.info": TIER_3,
    "users.info": TIER_4,
    "auth.test": TIER_4,
}
UNLISTED_LIMIT = TIER_2  # the cautious guess for a method missing above
WINDOW_SHARE = 0.95  # of Slack's limit: the most any 60 s of our calls may hold
BURST_SHARE, MAX_BURST = 0.15, 10

DEFAULT_RETRY_AFTER_S = 1.0  # slack_sdk's default too, for a 429 without the header
BACKOFF_BASE_S, BACKOFF_CAP_S = 0.25, 4.0


class TokenBucket:
    """When the next call may go: ``rate`` per second, up to ``capacity`` saved up.

    ``capacity + 60 * rate`` is ``WINDOW_SHARE`` of ``per_minute``, except for a limit
    so small (about 2 a minute) that one saved call is over half of that: it keeps half.

    ``pause()`` is how a 429 reaches everyone sharing the bucket: nothing goes until
    Retry-After has passed, then one call (the retry), then the steady rate; never a burst
    into a limiter that has just refused us.
    """

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"a rate limit must be positive, got {per_minute}/min")
        window = WINDOW_SHARE * per_minute
        self.capacity = float(max(1, min(MAX_BURST, int(per_minute * BURST_SHARE))))
        self.rate = max(window - self.capacity, window / 2) / 60.0
        self._clock = clock
        self._tokens, self._updated = self.capacity, clock()
        self._paused_until = -math.inf
        self._turns = asyncio.Lock()  # FIFO: concurrent callers are served in arrival order

    def wait_s(self) -> float:
        """Seconds until a call may go; 0 means now."""
        now = self._clock()
        if now < self._paused_until:
            return self._paused_until - now
        since = max(self._updated, self._paused_until)
        if now > since:
            self._tokens = min(self.capacity, self._tokens + (now - since) * self.rate)
            self._updated = now
        return max(0.0, (1.0 - self._tokens) / self.rate)

    def take(self) -> None:
        self._tokens -= 1.0

    def pause(self, seconds: float) -> None:
        now = self._clock()
        self._paused_until = max(self._paused_until, now + seconds)
        self._tokens, self._updated = 1.0, now

    async def acquire(self) -> None:
        """Wait for a token and take it."""
        async with self._turns:
            # Not polling: each sleep is the computed refill time, re-checked because a
            # 429 may have paused the bucket meanwhile.
            while (delay := self.wait_s()) > 0:  # noqa: ASYNC110
                await asyncio.sleep(delay)
            self.take()


def retry_after_s(headers: Any) -> float:
    # aiohttp's headers are case-insensitive; a missing or odd value gets slack_sdk's default.
    try:
        return max(0.0, float(headers.get("Retry-After", DEFAULT_RETRY_AFTER_S)))
    except (AttributeError, TypeError, ValueError):
        return DEFAULT_RETRY_AFTER_S


def backoff_s(attempt: int) -> float:
    """Exponential backoff with jitter, so workers that failed together retry apart."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)
