"""Waiting for a fake's state to change, without sleeping or polling.

A fake calls `Changes.notify()` whenever it records something; a test awaits
`Changes.until(predicate)`, which re-checks the predicate after every notification and
gives up with a `TimeoutError` that says what it was waiting for.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

_T = TypeVar("_T")


class Changes:
    """Wakes every waiter whenever the owner's state changes."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        # Swapping in a fresh Event (instead of set/clear) means a waiter that has not
        # been scheduled yet still sees this notification, and no waiter spins.
        self._event.set()
        self._event = asyncio.Event()

    async def until(
        self,
        predicate: Callable[[], _T | Literal[False] | None],
        *,
        # A bounded wait is this helper's whole job, so the deadline is a parameter.
        timeout: float,  # noqa: ASYNC109
        describe: Callable[[], str],
    ) -> _T:
        """Return the predicate's first truthy result; raise `TimeoutError` after `timeout`.

        `describe` is called only on timeout, so it can summarise the state at that point.
        """
        try:
            async with asyncio.timeout(timeout):
                while True:
                    result = predicate()
                    if result:
                        return result
                    await self._event.wait()
        except TimeoutError as exc:
            raise TimeoutError(f"gave up after {timeout}s: {describe()}") from exc
