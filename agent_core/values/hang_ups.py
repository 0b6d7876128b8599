"""The model connections a run has open, so that an Abort can hang them up first.

An Abort (or a shutdown) cancels the run's task, and the task's unwinding closes the
model's connection (:mod:`agent_core.models.http_exchange`). But the unwinding only starts on the
event loop's next turn, behind every callback already waiting there: on a busy worker
the model server sees the connection go late (the Abort → close target in
bench/README.md). So the stop hangs up first, in its own call, and cancels after:

- each :class:`~agent_core.values.stop.RunControl` owns one :class:`HangUps`, and starts its
  run's task with it bound to that task's context (:func:`bind`), so whatever the task
  awaits (the model's turns, a compaction's summary request) finds it;
- while a streamed answer is read, the model registers how to hang up its connection
  (:func:`registered`): shut its socket down, so the FIN leaves at once. Only that: the
  reader is left as it was, so the cancellation is what ends it (an Abort may come from
  inside the reading itself, from a listener of its text), and the unwinding closes the
  connection;
- ``RunControl.request_stop`` calls :meth:`HangUps.hang_up` before it cancels the task.

A hang-up is synchronous and safe to repeat: the unwinding that follows closes the same
connection again (a no-op) and does the rest of the clean-up as before. A model call made
outside any run (no :class:`HangUps` bound) registers nothing and is closed by its
unwinding alone.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["HangUps", "bind", "registered"]

log = structlog.get_logger("agent_core.values.hang_ups")

_bound: contextvars.ContextVar[HangUps | None] = contextvars.ContextVar(
    "threadpilot_hang_ups", default=None
)


class HangUps:
    """The open model connections of one run, each with the call that hangs it up."""

    def __init__(self) -> None:
        self._open: dict[int, Callable[[], None]] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, hang_up: Callable[[], None]) -> int:
        """Register an open connection; returns the key that :meth:`discard` takes."""
        self._next += 1
        self._open[self._next] = hang_up
        return self._next

    def discard(self, key: int) -> None:
        """Forget a connection that was closed or handed back to the pool."""
        self._open.pop(key, None)

    def hang_up(self) -> int:
        """Hang up every open connection now; returns how many there were.

        A hang-up that fails is logged and the others still run: the run's unwinding
        closes that connection anyway, only later.
        """
        hang_ups = list(self._open.values())
        self._open.clear()
        for hang_up in hang_ups:
            try:
                hang_up()
            except Exception:
                log.exception("hang_up.failed")
        return len(hang_ups)


def bind(hang_ups: HangUps) -> None:
    """Make ``hang_ups`` the registry of the current context (a run's task, at its start)."""
    _bound.set(hang_ups)


@contextlib.contextmanager
def registered(hang_up: Callable[[], None]) -> Iterator[None]:
    """Keep ``hang_up`` registered with the current run's :class:`HangUps` for the block
    (nothing is registered outside a run)."""
    hang_ups = _bound.get()
    if hang_ups is None:
        yield
        return
    key = hang_ups.add(hang_up)
    try:
        yield
    finally:
        hang_ups.discard(key)
