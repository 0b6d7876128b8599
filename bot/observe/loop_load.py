"""How busy this process's event loop is, so that a busy worker takes no new runs.

Every click, reply and Slack event this process answers waits its turn on one event loop,
a few turns each. The runs are what fills the loop: when it is full, each turn comes late
and a click's acknowledgement with it. So new runs are taken only while the loop keeps
up: a worker whose loop is late leaves queued runs to any worker with room, and queues
the mentions it receives (:meth:`bot.runs.supervisor.Supervisor.has_room`), until its loop is
calm again; then the queue's taker looks for work at once.

:class:`LoopLoad` measures it with one timer every ``PERIOD_S``: how much later than asked
the loop ran it, each sample counted up to twice the limit, smoothed over about
``SMOOTHING`` samples. So one long pause (a full garbage collection, a slow start-up
step) does not make the worker busy; a loop late tick after tick for a fifth of a second
does. The loop is busy once the smoothed lag is over ``BUSY_LAG_S`` and calm again once
it is under half of it (the gap between the two keeps a worker from flapping). The
smoothed lag is a ``/metrics`` gauge.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BUSY_LAG_S", "LoopLoad"]

log = structlog.get_logger("bot.observe.loop_load")

PERIOD_S = 0.025
SMOOTHING = 8
"""The samples the smoothed lag mostly reflects (about a fifth of a second of them)."""
BUSY_LAG_S = 0.01
"""A click takes about five turns of the loop from its request to its ack; a loop this
late on average keeps that well inside the 100 ms an ack is given here."""


class LoopLoad:
    """The smoothed lateness of this event loop, and whether it is too busy for new runs.

    ``on_calm`` is called each time the loop becomes calm again after being busy.
    """

    def __init__(
        self,
        *,
        busy_lag_s: float = BUSY_LAG_S,
        on_lag: Callable[[float], None] | None = None,
        on_calm: Callable[[], None] | None = None,
    ) -> None:
        self.busy_lag_s = busy_lag_s
        self.lag_s = 0.0
        """The smoothed lag, in seconds (each sample counted up to twice the limit)."""
        self.busy = False
        self._on_calm = on_calm
        self._on_lag = on_lag
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + PERIOD_S
        self._timer = loop.call_at(self._due, self._tick)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.sample(max(0.0, now - self._due))
        self._due = now + PERIOD_S
        self._timer = loop.call_at(self._due, self._tick)

    def sample(self, lag_s: float) -> None:
        """Take one measurement of the loop's lateness (the timer's; tests give their own)."""
        self.lag_s += (min(lag_s, 2 * self.busy_lag_s) - self.lag_s) / SMOOTHING
        if self._on_lag is not None:
            self._on_lag(self.lag_s)
        if not self.busy and self.lag_s > self.busy_lag_s:
            self.busy = True
            log.debug("worker.busy", lag_ms=round(self.lag_s * 1000, 1))
        elif self.busy and self.lag_s < self.busy_lag_s / 2:
            self.busy = False
            log.debug("worker.calm", lag_ms=round(self.lag_s * 1000, 1))
            if self._on_calm is not None:
                self._on_calm()
