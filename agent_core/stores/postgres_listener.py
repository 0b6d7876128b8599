"""Stop-request wake-ups over PostgreSQL ``LISTEN``, kept alive across lost connections.

:class:`PostgresStopListener` holds one dedicated connection (not from the query pool)
that listens on ``threadpilot_stop``, and one task it owns that:

- delivers each notification to ``on_stop`` as a :class:`~agent_core.values.records.Wakeup`,
  one at a time, in arrival order;
- notices a lost connection (asyncpg's termination callback, or a failed periodic ping
  for a silently dead TCP link) and reconnects with capped, jittered backoff;
- after every reconnect calls ``on_reconnect``, because notifications sent while the
  connection was down are gone for good: the caller re-scans the table, the truth.

A failing callback is logged and does not stop the listener. Leaving the ``async with``
cancels the task, waits for it (bounded) and closes the connection.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import asyncpg  # type: ignore[import-untyped]
import structlog

from agent_core.stores._pg import DRIVER_ERRORS, QUEUE_WAKEUP, STOP_CHANNEL
from agent_core.stores.dsn import describe_dsn
from agent_core.values.errors import StorageError
from agent_core.values.records import Wakeup

if TYPE_CHECKING:
    from collections.abc import Awaitable
    from types import TracebackType

    from agent_core.ports import Reconnected, StopWakeup

__all__ = ["LISTENER_APPLICATION_NAME", "PostgresStopListener"]

log = structlog.get_logger("agent_core.stores.postgres")

LISTENER_APPLICATION_NAME = "threadpilot-stop-listener"
"""Shown in ``pg_stat_activity``, so operators (and tests) can find the listener."""


@dataclass(frozen=True, slots=True)
class _Notified:
    payload: str


@dataclass(frozen=True, slots=True)
class _Lost:
    conn: Any


class PostgresStopListener:
    """``async with`` it to receive stop wake-ups; see the module docstring."""

    def __init__(
        self,
        dsn: str,
        on_stop: StopWakeup,
        *,
        on_reconnect: Reconnected | None = None,
        ping_interval_s: float = 15.0,
        max_backoff_s: float = 5.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._on_stop = on_stop
        self._on_reconnect = on_reconnect
        self._ping_interval_s = ping_interval_s
        self._max_backoff_s = max_backoff_s
        self._connect_timeout_s = connect_timeout_s
        self._queue: asyncio.Queue[_Notified | _Lost] = asyncio.Queue()
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0
        """How many times the connection was re-established."""

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def __aenter__(self) -> Self:
        """Returns once LISTEN is active, so a scan made now misses nothing after it.
        Raises :class:`StorageError` if the first connection fails."""
        self._conn = await self._connect()
        self._task = asyncio.create_task(self._supervise(), name="threadpilot-stop-listener")
        self._task.add_done_callback(_report_crash)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # asyncio.wait neither raises the task's CancelledError into us nor hides our
            # own cancellation; the task closes its connection as it unwinds.
            done, _ = await asyncio.wait({task}, timeout=5.0)
            if not done:
                log.warning("stop_listener.stop_timeout")
        await self._close()

    # -- the task ----------------------------------------------------------------------

    async def _supervise(self) -> None:
        try:
            while True:
                await self._serve(self._conn)
                await self._close()
                self._conn = await self._reconnect()
                self.reconnects += 1
                log.info("stop_listener.reconnected", reconnects=self.reconnects)
                if self._on_reconnect is not None:
                    await self._call("on_reconnect", self._on_reconnect())
        finally:
            await self._close()

    async def _serve(self, conn: Any) -> None:
        """Deliver notifications until ``conn`` is found dead."""
        while True:
            try:
                async with asyncio.timeout(self._ping_interval_s):
                    item = await self._queue.get()
            except TimeoutError:
                if not await self._alive(conn):
                    return
                continue
            if isinstance(item, _Lost):
                if item.conn is conn:  # not a late report about a connection we replaced
                    return
                continue
            wakeup = Wakeup(None if item.payload == QUEUE_WAKEUP else item.payload)
            await self._call("on_stop", self._on_stop(wakeup), run_id=wakeup.run_id)

    async def _alive(self, conn: Any) -> bool:
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await conn.fetchval("SELECT 1")
        except DRIVER_ERRORS as exc:  # includes TimeoutError (an OSError)
            log.warning("stop_listener.ping_failed", error=str(exc))
            return False
        return True

    async def _reconnect(self) -> Any:
        attempt = 0
        while True:
            try:
                return await self._connect()
            except StorageError as exc:
                # 0.1 s, 0.2 s, 0.4 s ... capped; jitter spreads out workers that lost the
                # server together.
                delay = min(self._max_backoff_s, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)
                log.warning("stop_listener.reconnect_failed", error=str(exc), retry_in_s=delay)
                attempt += 1
                await asyncio.sleep(delay)

    async def _call(self, name: str, call: Awaitable[None], **context: Any) -> None:
        try:
            await call
        except Exception:
            log.exception("stop_listener.callback_failed", callback=name, **context)

    # -- the connection ----------------------------------------------------------------

    async def _connect(self) -> Any:
        try:
            conn = await asyncpg.connect(
                self._dsn,
                timeout=self._connect_timeout_s,
                server_settings={"application_name": LISTENER_APPLICATION_NAME},
            )
        except DRIVER_ERRORS as exc:
            raise StorageError(
                f"cannot listen for stop requests on PostgreSQL at {describe_dsn(self._dsn)}: {exc}"
            ) from exc
        try:
            conn.add_termination_listener(self._on_terminated)
            await conn.add_listener(STOP_CHANNEL, self._on_notification)
        except BaseException as exc:
            conn.terminate()
            if isinstance(exc, DRIVER_ERRORS):
                raise StorageError(f"cannot LISTEN {STOP_CHANNEL}: {exc}") from exc
            raise
        return conn

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        conn.remove_termination_listener(self._on_terminated)
        try:
            await conn.close(timeout=2.0)
        except DRIVER_ERRORS:
            conn.terminate()  # a dead or slow link: drop it without the goodbye
        except asyncio.CancelledError:
            conn.terminate()
            raise

    # asyncpg calls these synchronously on the event loop (they are plain functions, so
    # asyncpg starts no task of its own); they only hand over to the listener's task.

    def _on_notification(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self._queue.put_nowait(_Notified(payload))

    def _on_terminated(self, conn: Any) -> None:
        self._queue.put_nowait(_Lost(conn))


def _report_crash(task: asyncio.Task[None]) -> None:
    # The task only ends by cancellation; anything else is a bug, reported as it happens
    # rather than when the context closes.
    if not task.cancelled() and task.exception() is not None:
        log.error("stop_listener.crashed", exc_info=task.exception())
