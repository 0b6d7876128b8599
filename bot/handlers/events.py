"""Slack's own lifecycle events: the native agent-session stop button."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from agent_core import LIVE_STATES, AuditEvent, StopReason, StorageError, ThreadKey
from bot.policy import may_stop

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

    from bot.context import BotContext

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.events")


def register(app: AsyncApp, ctx: BotContext) -> None:
    async def on_agent_session_stopped(body: dict[str, Any], event: dict[str, Any]) -> None:
        """Slack's native stop is a graceful Stop (SPEC.md section 2), wherever it lands."""
        thread = ThreadKey(body["team_id"], event["channel"], event["thread_ts"])
        user = event.get("user", "")
        live = ctx.supervisor.live_in_thread(thread)
        if live is not None:
            run_id, requester = live.run.id, live.requester
            participants: frozenset[str] = frozenset(live.participants)
        else:
            stored = await ctx.store.find_runs(states=LIVE_STATES, thread=thread, limit=1)
            if not stored:
                log.info("native_stop.no_live_run", thread=str(thread))
                return
            run_id, requester, participants = stored[0].id, stored[0].requester, frozenset()
        allowed = may_stop(
            user,
            policy=ctx.settings.STOP_POLICY,
            requester=requester,
            admins=ctx.settings.ADMIN_USER_IDS,
            participants=participants,
        )
        if not allowed:
            log.info("native_stop.not_allowed", run_id=run_id, user=user)
            return
        try:
            await ctx.store.add_stop_request(run_id, thread, StopReason.STOP, user)
            await ctx.store.record_event(
                AuditEvent(
                    run_id=run_id,
                    kind="stop.requested",
                    actor=user,
                    detail={"source": "native", "worker": ctx.worker.id},
                )
            )
        except StorageError:
            log.exception("native_stop.commit_failed", run_id=run_id)
        if live is not None:
            live.run.request_stop(StopReason.STOP, user, source="native")

    app.event("agent_session_stopped")(on_agent_session_stopped)
