"""A control's pre-ack work, run where Bolt answers the moment it is done.

Bolt starts an action's listener in a task and then polls every 10 ms for its ack, so a
listener that acknowledges itself is answered 10 ms late at best, and one loop turn per
poll later under load. A listener middleware is awaited before that: :func:`control`
registers a button whose ``before`` work runs in such a middleware, which then acks; the
listener, started after, hands what ``before`` returned to ``after``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond

__all__ = ["control"]

_DONE = "threadpilot_before_ack"
"""Where the middleware leaves ``before``'s result, in Bolt's request context."""

T = TypeVar("T")


def control(
    app: AsyncApp,
    action_id: str,
    before: Callable[[dict[str, Any]], Awaitable[T | None]],
    after: Callable[[T, AsyncRespond], Awaitable[None]],
) -> None:
    """Register the button ``action_id``: ``before(body)`` (decide and commit), the ack,
    then ``after(result, respond)``. ``before`` returns None for a press it cannot read
    (and logs it): that press is acknowledged and nothing follows."""

    async def middleware(
        ack: AsyncAck,
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> None:
        context[_DONE] = await before(body)
        await ack()
        await next()

    async def listener(context: AsyncBoltContext, respond: AsyncRespond) -> None:
        done = context.get(_DONE)
        if done is not None:
            await after(done, respond)

    app.action(action_id, middleware=[middleware])(listener)
