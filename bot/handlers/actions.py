"""Stop and Abort button clicks, and any button this app does not know.

Order of work for a click (SPEC.md section 2): decide and record the request (in memory,
immediate), then ``ack()`` well inside Slack's 3 seconds, then the slow part (ephemeral
replies). The status message changes by itself: the run emits ``StopRequested`` and the
run's session re-renders it without buttons that no longer apply.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import StopReason
from bot import messages
from bot.errors import SlackError
from bot.handlers.clicks import Click, Verdict, decide
from bot.views.status import ACTION_ABORT, ACTION_STOP

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncApp

    from bot.context import BotContext
    from bot.supervisor import LiveRun

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.actions")


def register(app: AsyncApp, ctx: BotContext) -> None:
    async def on_stop(ack: AsyncAck, body: dict[str, Any]) -> None:
        await _click(ctx, ack, body, StopReason.STOP)

    async def on_abort(ack: AsyncAck, body: dict[str, Any]) -> None:
        await _click(ctx, ack, body, StopReason.ABORT)

    async def on_unknown(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0].get("action_id")
        log.warning("click.unknown_action", action_id=action)
        await _ephemeral(ctx, body, messages.UNKNOWN_ACTION)

    app.action(ACTION_STOP)(on_stop)
    app.action(ACTION_ABORT)(on_abort)
    # Registered last: Bolt runs the first listener that matches.
    app.action(re.compile(".*"))(on_unknown)


async def _click(ctx: BotContext, ack: AsyncAck, body: dict[str, Any], action: StopReason) -> None:
    user = body["user"]["id"]
    run_id = str((body.get("actions") or [{}])[0].get("value") or "")
    live = ctx.supervisor.get(run_id)
    finished = ctx.supervisor.finished(run_id)
    click = Click(user=user, action=action, at=time.monotonic())
    verdict = decide(click, live, finished, ctx.settings)
    with structlog.contextvars.bound_contextvars(run_id=run_id, user=user):
        if live is not None and verdict.changes_state:
            _apply(live, click, verdict)
        await ack()
        log.info("click.handled", action=action.value, verdict=verdict.value)
        reply = _reply(verdict, live, finished, ctx)
        if reply is not None:
            await _ephemeral(ctx, body, reply)


def _apply(live: LiveRun, click: Click, verdict: Verdict) -> None:
    if verdict is Verdict.STOP:
        live.stop_clicks[click.user] = click.at
        live.run.request_stop(StopReason.STOP, click.user, source="button")
    else:
        source = "escalation" if verdict is Verdict.ESCALATE else "button"
        live.run.request_stop(StopReason.ABORT, click.user, source=source)


def _reply(verdict: Verdict, live: LiveRun | None, finished: Any, ctx: BotContext) -> str | None:
    match verdict:
        case Verdict.STOP | Verdict.ABORT:
            return None  # the status message itself shows the change
        case Verdict.ESCALATE:
            return messages.ESCALATED_TO_ABORT
        case Verdict.DUPLICATE:
            return messages.ALREADY_STOPPING
        case Verdict.ALREADY_ABORTING:
            return messages.ALREADY_ABORTING
        case Verdict.NOT_ALLOWED:
            assert live is not None
            return messages.not_allowed(ctx.settings.STOP_POLICY.value, live.requester)
        case Verdict.FINISHED:
            result = finished if finished is not None else (live.run.result if live else None)
            return messages.run_already_finished(result)
        case Verdict.NOT_FOUND:
            return messages.RUN_NOT_FOUND


async def _ephemeral(ctx: BotContext, body: dict[str, Any], text: str) -> None:
    team = (body.get("team") or {}).get("id") or body["user"].get("team_id", "")
    container = body.get("container") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    if not channel:
        return
    surface = await ctx.workspaces.get(team)
    kwargs: dict[str, Any] = {"channel": channel, "user": body["user"]["id"], "text": text}
    thread_ts = container.get("thread_ts") or (body.get("message") or {}).get("thread_ts")
    if thread_ts:
        kwargs["thread_ts"] = thread_ts
    try:
        await surface.budget.call("chat.postEphemeral", **kwargs)
    except SlackError as exc:
        log.warning("click.reply_failed", error=exc.error)
