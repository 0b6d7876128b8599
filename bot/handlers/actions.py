"""Stop and Abort button clicks, and any button this app does not know.

Order of work for a click (SPEC.md section 2): decide and record the request (in memory,
immediate), then ``ack()`` well inside Slack's 3 seconds, then the slow part (ephemeral
replies). The status message changes by itself: the run emits ``StopRequested`` and the
run's session re-renders it without buttons that no longer apply.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import AuditEvent, RunResult, RunState, StopReason, StorageError
from agent_core.stop import utcnow
from bot import messages
from bot.errors import SlackError
from bot.handlers.clicks import Click, RunView, Verdict, decide, decide_for
from bot.views.status import ACTION_ABORT, ACTION_STOP

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from slack_bolt.async_app import AsyncAck, AsyncApp

    from agent_core import RunRecord, StopRequestRecord, ThreadKey
    from bot.context import BotContext
    from bot.supervisor import LiveRun

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.actions")

ACK_BUDGET_S = 2.0
"""Database work before a click's ack gets this long; Slack wants the ack within 3 s."""


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
    click = Click(user=user, action=action, at=time.monotonic())
    with structlog.contextvars.bound_contextvars(run_id=run_id, user=user):
        live = ctx.supervisor.get(run_id)
        record: RunRecord | None = None
        request: StopRequestRecord | None = None
        recorded = True
        if live is not None:
            verdict = decide(click, live, None, ctx.settings)
            result = live.run.result
            if verdict.changes_state:
                # Applied here at once, and made durable before the ack: if this worker
                # died right after, the reconciler must still see that a person stopped it.
                _apply(live, click, verdict)
                request = await _within_budget(_commit(ctx, run_id, live.run.thread, verdict, user))
        else:
            try:
                async with asyncio.timeout(ACK_BUDGET_S):
                    record = await ctx.store.get_run(run_id) if run_id else None
                    verdict, result = await _decide_remote(ctx, click, record)
                    if verdict.changes_state and record is not None:
                        # Durable before the ack (SPEC.md section 3): the owner picks it up.
                        request = await _commit(ctx, run_id, record.thread, verdict, user)
            except (StorageError, TimeoutError):
                log.exception("click.not_recorded")
                verdict, result, recorded = Verdict.NOT_FOUND, None, False
        await ack()
        if request is not None:
            await _audit(ctx, request, verdict)
        log.info(
            "click.handled", action=action.value, verdict=verdict.value, local=live is not None
        )
        if recorded and record is not None and verdict.changes_state and _owner_gone(record):
            # Its worker is gone: end it here, from the database, and say so in the thread.
            await ctx.worker.reconciler.end_orphan(record)
        requester = live.requester if live is not None else (record.requester if record else "")
        reply = _reply(verdict, requester, result, ctx) if recorded else messages.STOP_NOT_RECORDED
        if reply is not None:
            await _ephemeral(ctx, body, reply)


async def _within_budget(work: Awaitable[StopRequestRecord]) -> StopRequestRecord | None:
    """A write that must not delay the ack past Slack's 3 seconds: bounded, logged."""
    try:
        async with asyncio.timeout(ACK_BUDGET_S):
            return await work
    except (StorageError, TimeoutError):
        log.exception("click.not_recorded")
        return None


async def _decide_remote(
    ctx: BotContext, click: Click, record: RunRecord | None
) -> tuple[Verdict, RunResult | None]:
    """Decide a click on a run another worker owns, from what the database says."""
    if record is None:
        return Verdict.NOT_FOUND, None
    if record.state.is_terminal:
        result = RunResult.from_dict(record.result) if record.result else None
        return Verdict.FINISHED, result
    pending = await ctx.store.pending_stop_requests([record.id])
    reasons = [r.kind for r in pending]
    if record.state is RunState.STOPPING:
        reasons.append(StopReason.STOP)
    users_stops = [
        r.requested_at
        for r in pending
        if r.kind is StopReason.STOP and r.requested_by == click.user
    ]
    view = RunView(
        requester=record.requester,
        finished=False,
        pending=max(reasons, key=lambda r: r.rank, default=None),
        since_users_stop_s=(utcnow() - max(users_stops)).total_seconds() if users_stops else None,
    )
    return decide_for(click, view, ctx.settings), None


async def _commit(
    ctx: BotContext, run_id: str, thread: ThreadKey, verdict: Verdict, user: str
) -> StopRequestRecord:
    """Commit the stop request: durable when this returns (raises StorageError if not)."""
    kind = verdict.requests
    assert kind is not None
    return await ctx.store.add_stop_request(run_id, thread, kind, user)


async def _audit(ctx: BotContext, request: StopRequestRecord, verdict: Verdict) -> None:
    """The audit event, written after the ack: the stop request itself is the record that
    has to be durable first; this says who did what, and may trail it."""
    kind = "stop.escalated" if verdict is Verdict.ESCALATE else f"{request.kind.value}.requested"
    try:
        await ctx.store.record_event(
            AuditEvent(
                run_id=request.run_id,
                kind=kind,
                actor=request.requested_by,
                at=request.requested_at,
                detail={"request_id": request.id, "worker": ctx.worker.id, "source": "button"},
            )
        )
    except StorageError:
        log.exception("click.audit_not_recorded")


def _owner_gone(record: RunRecord) -> bool:
    return record.lease_expires_at is None or record.lease_expires_at <= utcnow()


def _apply(live: LiveRun, click: Click, verdict: Verdict) -> None:
    if verdict is Verdict.STOP:
        live.stop_clicks[click.user] = click.at
        live.run.request_stop(StopReason.STOP, click.user, source="button")
    else:
        source = "escalation" if verdict is Verdict.ESCALATE else "button"
        live.run.request_stop(StopReason.ABORT, click.user, source=source)


def _reply(
    verdict: Verdict, requester: str, finished: RunResult | None, ctx: BotContext
) -> str | None:
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
            return messages.not_allowed(ctx.settings.STOP_POLICY.value, requester)
        case Verdict.FINISHED:
            return messages.run_already_finished(finished)
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
