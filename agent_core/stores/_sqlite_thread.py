"""One sqlite3 connection and the one thread that uses it.

:class:`~agent_core.stores.sqlite.SqliteStore` hands each call to such a thread as one
piece of work: a query, or a whole transaction from ``BEGIN IMMEDIATE`` to ``COMMIT``.
The event loop makes one hop per call, and a transaction holds SQLite's write lock only
while SQLite works, never while the event loop is busy with something else: otherwise
every other writer, in this process or another, waits on this process's loop.

Calls run one after another, in the order they were made. A caller cancelled while its
work waits does not run it; one cancelled while its work runs gets its cancellation at
once, and the work sees :attr:`Work.abandoned` set (a transaction then rolls back
instead of committing, unless its ``COMMIT`` is already running).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["SqliteThread", "Work"]

T = TypeVar("T")


class Work:
    """What a piece of work is given: the connection, and whether its caller left."""

    __slots__ = ("abandoned", "conn")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.abandoned = threading.Event()


class SqliteThread:
    """A connection to ``path``, opened, used and closed in a thread of its own."""

    def __init__(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        """Use :meth:`open`."""
        self._executor = executor
        self._conn = conn
        self._closed = False

    @classmethod
    async def open(cls, path: str, *, name: str, timeout_s: float) -> SqliteThread:
        """Connect to ``path`` in a new thread; raises :class:`sqlite3.Error` if it cannot.

        The connection issues no ``BEGIN`` of its own (``isolation_level=None``), returns
        :class:`sqlite3.Row` rows and waits ``timeout_s`` for a locked file until its
        user sets a shorter busy timeout.
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(path, isolation_level=None, timeout=timeout_s)
            conn.row_factory = sqlite3.Row
            return conn

        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, conn)

    async def run(self, work: Callable[[Work], T]) -> T:
        """Run ``work`` in the thread, after whatever was handed over before it; once
        closed, raises :class:`sqlite3.ProgrammingError` as a closed connection does."""
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        job = Work(self._conn)
        future = asyncio.get_running_loop().run_in_executor(self._executor, work, job)
        try:
            return await future
        except asyncio.CancelledError:
            job.abandoned.set()  # if it already runs, it finishes in the thread by itself
            raise

    async def close(self) -> None:
        """Close the connection once the work handed over before has finished; again,
        nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        finally:
            self._executor.shutdown(wait=False)
