"""A control's pre-ack work, run where Bolt answers the moment it is done.

Bolt starts an action's listener in a task and then polls every 10 ms for its ack, so a
listener that acknowledges itself is answered 10 ms late at best, and one loop turn per
poll later under load. A listener middleware is awaited before that: :func:`acking`
makes one that does the work, leaves its result in the request context and acks; the
listener then finds the ack done, and does the rest after the answer has gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncBoltContext

__all__ = ["acking", "before_ack"]

_DONE = "threadpilot_before_ack"
"""Where the middleware leaves the work's result, in Bolt's request context."""

Middleware = Callable[..., Awaitable[None]]


def acking(work: Callable[[dict[str, Any]], Awaitable[object]]) -> Middleware:
    """A listener middleware: ``work(body)``, then the ack, then the listener."""

    async def middleware(
        ack: AsyncAck,
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> None:
        context[_DONE] = await work(body)
        await ack()
        await next()

    return middleware


def before_ack(context: AsyncBoltContext) -> object:
    """What the :func:`acking` middleware's work returned (None if it returned nothing)."""
    return context.get(_DONE)
