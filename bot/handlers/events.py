"""Slack's own lifecycle events: the native agent-session stop button."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from agent_core import StopReason, ThreadKey
from bot.policy import may_stop

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

    from bot.context import BotContext

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.events")


def register(app: AsyncApp, ctx: BotContext) -> None:
    async def on_agent_session_stopped(body: dict[str, Any], event: dict[str, Any]) -> None:
        """Slack's native stop is a graceful Stop (SPEC.md section 2)."""
        thread = ThreadKey(body["team_id"], event["channel"], event["thread_ts"])
        user = event.get("user", "")
        live = ctx.supervisor.live_in_thread(thread)
        if live is None:
            log.info("native_stop.no_live_run", thread=str(thread))
            return
        allowed = may_stop(
            user,
            policy=ctx.settings.STOP_POLICY,
            requester=live.requester,
            admins=ctx.settings.ADMIN_USER_IDS,
            participants=live.participants,
        )
        if not allowed:
            log.info("native_stop.not_allowed", run_id=live.run.id, user=user)
            return
        live.run.request_stop(StopReason.STOP, user, source="native")

    app.event("agent_session_stopped")(on_agent_session_stopped)
