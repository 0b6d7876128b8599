"""How long to wait before retrying a failed model call.

Exponential backoff with full jitter, capped, and never shorter than the server's
``Retry-After``. The wait itself lives in the loop, where a Stop can end it early.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed model call is retried: how often, and how long to wait between."""

    max_attempts: int = 4
    """Attempts per model call, the first included."""
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0
    """A Retry-After longer than this is not waited out: the retries count as exhausted."""

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after_s is not None:
            return retry_after_s  # the server knows when it will accept us again
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return random.uniform(backoff / 2, backoff)
