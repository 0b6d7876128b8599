"""Clean-up a store owns: what a cancelled (or finished) call leaves to complete.

A caller cancelled in the middle of a store call must get its cancellation at once
("requested" is not "took effect", and a click has an ack budget), yet the
connection it was using still needs tidying: handing an asyncpg connection back to its
pool. (The SQLite store needs none: a cancelled call's work finishes in the connection's
own thread, :mod:`agent_core.stores._sqlite_thread`.) That work runs in tasks the store
holds here and awaits in ``close()``, never in the cancelled caller and never fire-and-
forget.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from collections.abc import Coroutine

__all__ = ["Cleanups"]

log = structlog.get_logger("agent_core.stores")


class Cleanups:
    """The clean-up tasks of one store."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, cleanup: Coroutine[Any, Any, None], what: str) -> None:
        """Run ``cleanup`` in a task of this store's; its failure is logged, not raised
        (whoever needed the connection has gone)."""
        task = asyncio.get_running_loop().create_task(cleanup, name=f"store cleanup: {what}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.warning(
                "store.cleanup_failed",
                where=self._where,
                task=task.get_name(),
                error=f"{type(exc).__name__}: {exc}",
            )

    async def wait(self) -> None:
        """Wait for every clean-up spawned so far (and any they spawn)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
