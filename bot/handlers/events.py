"""Slack's own lifecycle events: the native agent-session stop button.

Slack's native stop is a Stop (docs/stopping.md) like any other: it goes through the
stop service (:mod:`bot.stopping.stops`), with the same policy, double-press and escalation rules
as the buttons, wherever it lands. Bolt acknowledges an event before its listener runs,
so the part that must come before the ack (decide, commit, apply) runs in a listener
middleware, which Bolt awaits before acknowledging; the listener does the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from agent_core import StopReason, StopSource, ThreadKey
from bot.access.stop_policy import StopAsk
from bot.inbound.dedupe import event_key
from bot.stopping.decisions import StopDecision

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncApp, AsyncBoltContext

    from bot.handlers.context import BotContext

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.events")

_DECISION = "threadpilot_stop_decision"
"""Where the middleware leaves its decision for the listener, in Bolt's request context."""


def register(app: AsyncApp, ctx: BotContext) -> None:
    async def stop_before_ack(
        body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[None]]
    ) -> None:
        ask = _native_stop(body)
        if ask is not None:
            context[_DECISION] = await ctx.stops.request(ask)
        await next()

    async def on_agent_session_stopped(context: AsyncBoltContext) -> None:
        decision = context.get(_DECISION)
        if not isinstance(decision, StopDecision):
            log.warning("native_stop.malformed")
            return
        await ctx.stops.after(decision)
        verdict = decision.verdict
        log.info(
            "native_stop.handled",
            run_id=decision.run_id,
            user=decision.ask.user,
            verdict=verdict.value if verdict is not None else "not_recorded",
            local=decision.local,
        )

    app.event("agent_session_stopped", middleware=[stop_before_ack])(on_agent_session_stopped)


def _native_stop(body: dict[str, Any]) -> StopAsk | None:
    """The Stop an ``agent_session_stopped`` event asks for; None if it names no user or
    thread (Slack always sends both)."""
    event = body.get("event")
    if not isinstance(event, dict):
        return None
    team, channel = body.get("team_id"), event.get("channel")
    thread_ts, user = event.get("thread_ts"), event.get("user")
    if not all(isinstance(v, str) and v for v in (team, channel, thread_ts, user)):
        return None
    event_id = body.get("event_id")
    return StopAsk(
        user=str(user),
        kind=StopReason.STOP,
        source=StopSource.NATIVE,
        thread=ThreadKey(str(team), str(channel), str(thread_ts)),
        delivery=event_key(str(team), event_id) if isinstance(event_id, str) and event_id else None,
    )
