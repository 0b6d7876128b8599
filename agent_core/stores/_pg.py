"""What the PostgreSQL store and its stop listener share: which errors are the driver's
and which of those mean the connection is gone, and the NOTIFY channel."""

from __future__ import annotations

from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

__all__ = ["DRIVER_ERRORS", "QUEUE_WAKEUP", "STOP_CHANNEL", "connection_lost", "is_driver_error"]

STOP_CHANNEL = "threadpilot_stop"
"""``NOTIFY threadpilot_stop, '<run id>'`` goes out with every committed stop request."""

QUEUE_WAKEUP = "queue"
"""The payload on :data:`STOP_CHANNEL` that says a run was queued: not a run id (those
are hex), so the listener hands a queued :class:`~agent_core.values.records.Wakeup` on."""

# What asyncpg raises for a failed query or connection. TimeoutError is an OSError.
# InternalClientError is neither a PostgresError nor an InterfaceError: asyncpg raises it
# when a connection the server dropped is used again ("cannot switch to state 12;
# another operation (2) is in progress"), from a query or from the pool's reset.
DRIVER_ERRORS: tuple[type[Exception], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)

# The connection is gone, or unusable: another connection may well succeed.
_LOST: tuple[type[Exception], ...] = (
    OSError,  # reset, refused, timed out
    asyncpg.InternalClientError,  # the protocol lost track of a dropped connection
    asyncpg.PostgresConnectionError,  # 08xxx, ConnectionDoesNotExistError
    asyncpg.AdminShutdownError,  # 57P01: pg_terminate_backend, a fast shutdown
    asyncpg.CrashShutdownError,  # 57P02
    asyncpg.CannotConnectNowError,  # 57P03: starting up, or in recovery
)

_ASYNCPG_DIR = str(Path(asyncpg.__file__).parent)


def is_driver_error(exc: BaseException) -> bool:
    """An error of the driver's: one of :data:`DRIVER_ERRORS`, or any other ``Exception``
    raised from inside asyncpg's own code (its internals raise built-in types on some
    connection-loss paths: BufferError, AttributeError...).

    Never a ``CancelledError`` (nor any ``BaseException`` that is not an ``Exception``):
    cancellation is not an error and must propagate as itself.
    """
    if isinstance(exc, DRIVER_ERRORS):
        return True
    return isinstance(exc, Exception) and _raised_in_asyncpg(exc)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error) says the connection is gone rather than that the
    statement was refused (a constraint, bad input), so a retry on another may succeed.
    (The store also asks the connection itself: ``is_closed()`` after the failure.)"""
    return isinstance(exc, _LOST)


def _raised_in_asyncpg(exc: BaseException) -> bool:
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    # Compiled (Cython) frames are named relative to the package: asyncpg/protocol/...
    return filename.startswith((_ASYNCPG_DIR, "asyncpg/"))
