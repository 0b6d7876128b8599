"""Thumbs up or down on a run's terminal message (Slack's ``feedback_buttons``).

A press is recorded as an audit event (kind ``feedback``: who, and ``value`` positive or
negative) and counted in App Home's history of ended runs: one vote per person per run,
their latest press (:func:`bot.views.home.latest_votes`). It counts only on the run's own
status message, like the Stop button (:func:`bot.access.stop_policy.comes_from`): the run id in the
button's value can be copied, where it was pressed cannot. Someone who may not use the
app at all (:mod:`bot.access.trust`) is told so, and nothing is recorded. Nothing here must be
durable before the ack, so the press is acknowledged first; a delivery Slack sends again
is recorded once (the shared delivery log), and the person is told whether it counted.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import AuditEvent, StorageError
from bot import messages
from bot.access.stop_policy import Origin, RunHome, comes_from
from bot.access.trust import Person, person_of
from bot.errors import BudgetNotRunning, SlackError
from bot.stopping.stops import ACK_BUDGET_S
from bot.views.home import FEEDBACK_KIND
from bot.views.status import ACTION_FEEDBACK

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncApp

    from agent_core import RunRecord
    from bot.handlers.context import BotContext
    from bot.inbound.dedupe import Deliveries

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.feedback")

_VALUES = frozenset({"positive", "negative"})


def register(app: AsyncApp, ctx: BotContext) -> None:
    deliveries = ctx.deliveries

    async def on_feedback(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        press = _press(body)
        if press is None:
            log.warning("feedback.malformed")
            return
        user, value, run_id, origin, action_ts = press
        with structlog.contextvars.bound_contextvars(run_id=run_id, user=user):
            person = person_of(body) or Person(user)
            answer = await ctx.trust.refusal(person)
            if answer is None:
                answer = await _record(ctx, deliveries, user, value, run_id, origin, action_ts)
            if answer is not None:
                await _ephemeral(ctx, origin, user, answer)

    app.action(ACTION_FEEDBACK)(on_feedback)


async def _record(
    ctx: BotContext,
    deliveries: Deliveries,
    user: str,
    value: str,
    run_id: str,
    origin: Origin,
    action_ts: str,
) -> str | None:
    """Record one press; what to tell the person (None: a re-delivery, answered once)."""
    try:
        async with asyncio.timeout(ACK_BUDGET_S):
            record = await ctx.store.get_run(run_id)
            if record is None or not comes_from(origin, _home(record)):
                log.warning("feedback.not_from_run", found=record is not None)
                return messages.FEEDBACK_NOT_FROM_RUN
            if not await deliveries.first(f"feedback:{origin.team}:{action_ts}:{user}"):
                return None
            await ctx.store.record_event(
                AuditEvent(
                    run_id=run_id,
                    kind=FEEDBACK_KIND,
                    actor=user,
                    detail={"value": value, "worker": ctx.worker.id},
                )
            )
    except (StorageError, TimeoutError) as exc:
        log.warning("feedback.not_recorded", error=str(exc) or type(exc).__name__)
        return messages.FEEDBACK_NOT_RECORDED
    log.info("feedback.recorded", value=value)
    return messages.FEEDBACK_RECORDED


def _home(record: RunRecord) -> RunHome:
    thread = record.thread
    return RunHome(thread.team, thread.channel, thread.thread_ts, record.status_ts)


def _press(body: dict[str, Any]) -> tuple[str, str, str, Origin, str] | None:
    """(user, value, run id, where pressed, action_ts) of a feedback press; None if the
    payload is not one (Slack always sends all of it)."""
    user = _field(body.get("user"), "id")
    actions = body.get("actions")
    pressed = actions[0] if isinstance(actions, list) and actions else None
    action_ts = _field(pressed, "action_ts")
    value, _, run_id = str(_field(pressed, "value") or "").partition(":")
    container = body.get("container")
    team = _field(body.get("team"), "id") or _field(body.get("user"), "team_id")
    channel = _field(container, "channel_id")
    message_ts = _field(container, "message_ts")
    if not all(isinstance(v, str) and v for v in (user, action_ts, team, channel, message_ts)):
        return None
    if value not in _VALUES or not run_id:
        return None
    thread_ts = _field(container, "thread_ts") or _field(body.get("message"), "thread_ts")
    origin = Origin(str(team), str(channel), str(message_ts), str(thread_ts) if thread_ts else None)
    return str(user), value, run_id, origin, str(action_ts)


async def _ephemeral(ctx: BotContext, origin: Origin, user: str, text: str) -> None:
    kwargs: dict[str, Any] = {"channel": origin.channel, "user": user, "text": text}
    if origin.thread_ts:
        kwargs["thread_ts"] = origin.thread_ts
    try:
        surface = await ctx.workspaces.get(origin.team)
        await surface.budget.call("chat.postEphemeral", **kwargs)
    except SlackError as exc:
        log.warning("feedback.reply_failed", error=exc.error)
    except BudgetNotRunning:
        log.warning("feedback.reply_failed", error="shutting down")


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None
