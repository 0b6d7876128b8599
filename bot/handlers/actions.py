"""Stop and Abort button clicks, and any button this app does not know.

Order of work for a click (SPEC.md sections 2-4): decide; check that this click was not
taken before (Slack re-delivers); commit the stop request; apply it here at once if this
worker owns the run; then ``ack()``, all within :data:`ACK_BUDGET_S` of Slack's
3 seconds; then the slow part (audit event, ephemeral replies). The status message
changes by itself: the run emits ``StopRequested`` and the run's session re-renders it
without buttons that no longer apply.

A click whose request cannot be made durable in the budget (the database is busy or
down) changes nothing, anywhere, and the person is told so: a stop that took effect
here but not in the table would be lost with this worker, and pressing again would then
read as an escalation.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import AuditEvent, RunResult, RunState, StopReason, StorageError
from agent_core.stop import utcnow
from bot import messages
from bot.dedupe import Deliveries, click_key
from bot.errors import SlackError
from bot.handlers.clicks import Click, Origin, RunHome, RunView, Verdict, decide, decide_for
from bot.views.status import ACTION_ABORT, ACTION_STOP

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncApp

    from agent_core import RunRecord, StopRequestRecord
    from bot.context import BotContext
    from bot.supervisor import LiveRun

__all__ = ["ACK_BUDGET_S", "register"]

log = structlog.get_logger("bot.handlers.actions")

ACK_BUDGET_S = 2.0
"""Database work before a click's ack gets this long; Slack wants the ack within 3 s."""

_NOT_OURS = re.compile(rf"^(?!(?:{re.escape(ACTION_STOP)}|{re.escape(ACTION_ABORT)})$)")
"""Every action id but Stop's and Abort's. Bolt offers a click to the next listener that
matches when the first has not acked within 3 s; a Stop must never end up there."""


def register(app: AsyncApp, ctx: BotContext) -> None:
    deliveries = Deliveries(ctx.store)

    async def on_stop(ack: AsyncAck, body: dict[str, Any]) -> None:
        await _click(ctx, deliveries, ack, body, StopReason.STOP)

    async def on_abort(ack: AsyncAck, body: dict[str, Any]) -> None:
        await _click(ctx, deliveries, ack, body, StopReason.ABORT)

    async def on_unknown(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        action = _field(_first(body.get("actions")), "action_id")
        log.warning("click.unknown_action", action_id=action)
        await _ephemeral(ctx, body, messages.UNKNOWN_ACTION)

    app.action(ACTION_STOP)(on_stop)
    app.action(ACTION_ABORT)(on_abort)
    app.action(_NOT_OURS)(on_unknown)


@dataclass(frozen=True, slots=True)
class _Pressed:
    """One button press, read from a ``block_actions`` payload."""

    click: Click
    run_id: str
    action_ts: str


@dataclass(frozen=True, slots=True)
class _Handled:
    """What became of a click before its ack."""

    verdict: Verdict | None
    """None when it could not be decided or recorded (see ``failure``)."""
    requester: str = ""
    result: RunResult | None = None
    record: RunRecord | None = None
    """The stored run, when the click was decided from the database."""
    request: StopRequestRecord | None = None
    """The committed stop request, if the click made one."""
    failure: str | None = None
    """The reply saying the click was not recorded, and why."""


async def _click(
    ctx: BotContext, deliveries: Deliveries, ack: AsyncAck, body: dict[str, Any], action: StopReason
) -> None:
    pressed = _pressed(body, action)
    if pressed is None:
        await ack()
        log.warning("click.malformed", action=action.value)
        return
    user = pressed.click.user
    with structlog.contextvars.bound_contextvars(run_id=pressed.run_id, user=user):
        live = ctx.supervisor.get(pressed.run_id)
        handled = await _before_ack(ctx, deliveries, pressed, live)
        await ack()
        if handled.request is not None:
            await _audit(ctx, handled.request, handled.verdict)
        handled = await _answer_once(deliveries, pressed, handled)
        verdict = handled.verdict
        log.info(
            "click.handled",
            action=action.value,
            verdict=verdict.value if verdict is not None else "not_recorded",
            local=live is not None,
        )
        record = handled.record
        if handled.request is not None and record is not None and _owner_gone(record):
            # Its worker is gone: end it here, from the database, and say so in the thread.
            await ctx.worker.reconciler.end_orphan(record)
        reply = handled.failure
        if verdict is not None:
            reply = _reply(verdict, handled.requester, handled.result, ctx)
        if reply is not None:
            await _ephemeral(ctx, body, reply)


async def _before_ack(
    ctx: BotContext, deliveries: Deliveries, pressed: _Pressed, live: LiveRun | None
) -> _Handled:
    """Decide, check the delivery log, commit, apply: every store call in the budget."""
    click = pressed.click
    try:
        async with asyncio.timeout(ACK_BUDGET_S):
            handled = await _decide(ctx, click, pressed.run_id, live)
            verdict = handled.verdict
            if verdict is None or not verdict.changes_state:
                return handled
            if not await deliveries.first(click_key(pressed.action_ts, click.user)):
                return replace(handled, verdict=Verdict.REDELIVERED)
            if live is not None:
                thread = live.run.thread
            else:
                assert handled.record is not None  # only a stored run's click changes state
                thread = handled.record.thread
            kind = verdict.requests
            assert kind is not None
            # Durable before the ack (SPEC.md section 3): the owner, wherever it is, acts
            # on the table; if this worker died now the reconciler still sees it.
            request = await ctx.store.add_stop_request(pressed.run_id, thread, kind, click.user)
    except TimeoutError:
        log.warning("click.not_recorded", reason="database_busy", budget_s=ACK_BUDGET_S)
        return _Handled(None, failure=messages.STOP_NOT_RECORDED_BUSY)
    except StorageError:
        log.exception("click.not_recorded", reason="database_error")
        return _Handled(None, failure=messages.STOP_NOT_RECORDED)
    if live is not None:
        _apply(live, click, verdict)
    return replace(handled, request=request)


async def _answer_once(deliveries: Deliveries, pressed: _Pressed, handled: _Handled) -> _Handled:
    """After the ack: a click that changes nothing is still answered once, not once per
    delivery (those that change state were checked before their commit)."""
    verdict = handled.verdict
    if verdict is None or verdict.changes_state or verdict is Verdict.REDELIVERED:
        return handled
    try:
        async with asyncio.timeout(ACK_BUDGET_S):
            first = await deliveries.first(click_key(pressed.action_ts, pressed.click.user))
    except (StorageError, TimeoutError) as exc:
        # Answering twice is the lesser harm than not answering at all.
        log.warning("click.dedupe_unavailable", error=str(exc) or type(exc).__name__)
        return handled
    return handled if first else replace(handled, verdict=Verdict.REDELIVERED)


async def _decide(ctx: BotContext, click: Click, run_id: str, live: LiveRun | None) -> _Handled:
    if live is not None:
        verdict = decide(click, live, None, ctx.settings)
        return _Handled(verdict, live.requester, live.run.result)
    record = await ctx.store.get_run(run_id) if run_id else None
    verdict, result = await _decide_remote(ctx, click, record)
    return _Handled(verdict, record.requester if record else "", result, record)


async def _decide_remote(
    ctx: BotContext, click: Click, record: RunRecord | None
) -> tuple[Verdict, RunResult | None]:
    """Decide a click on a run another worker owns, from what the database says."""
    if record is None:
        return Verdict.NOT_FOUND, None
    finished = record.state.is_terminal
    pending = [] if finished else await ctx.store.pending_stop_requests([record.id])
    reasons = [r.kind for r in pending]
    if record.state is RunState.STOPPING:
        reasons.append(StopReason.STOP)
    users_stops = [
        r.requested_at
        for r in pending
        if r.kind is StopReason.STOP and r.requested_by == click.user
    ]
    thread = record.thread
    view = RunView(
        requester=record.requester,
        home=RunHome(thread.team, thread.channel, thread.thread_ts, record.status_ts),
        finished=finished,
        pending=max(reasons, key=lambda r: r.rank, default=None),
        since_users_stop_s=(utcnow() - max(users_stops)).total_seconds() if users_stops else None,
    )
    verdict = decide_for(click, view, ctx.settings)
    if verdict is Verdict.FINISHED and record.result:
        return verdict, RunResult.from_dict(record.result)
    return verdict, None


async def _audit(ctx: BotContext, request: StopRequestRecord, verdict: Verdict | None) -> None:
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
        case Verdict.REDELIVERED:
            return None  # the first delivery of this click was answered
        case Verdict.ESCALATE:
            return messages.ESCALATED_TO_ABORT
        case Verdict.DUPLICATE:
            return messages.ALREADY_STOPPING
        case Verdict.ALREADY_ABORTING:
            return messages.ALREADY_ABORTING
        case Verdict.NOT_ALLOWED:
            return messages.not_allowed(ctx.settings.STOP_POLICY.value, requester)
        case Verdict.NOT_THIS_RUN:
            return messages.CLICK_NOT_FROM_RUN
        case Verdict.FINISHED:
            return messages.run_already_finished(finished)
        case Verdict.NOT_FOUND:
            return messages.RUN_NOT_FOUND


# -- reading the payload ---------------------------------------------------------------


def _pressed(body: dict[str, Any], action: StopReason) -> _Pressed | None:
    """The press a ``block_actions`` payload describes; None if it names no user or
    button (Slack always sends both)."""
    user = _field(body.get("user"), "id")
    pressed = _first(body.get("actions"))
    action_ts = _field(pressed, "action_ts")
    if not isinstance(user, str) or not user or not isinstance(action_ts, str) or not action_ts:
        return None
    click = Click(user=user, action=action, at=time.monotonic(), origin=_origin(body))
    return _Pressed(click, str(_field(pressed, "value") or ""), action_ts)


def _origin(body: dict[str, Any]) -> Origin | None:
    """The team, channel and message a click came from; None if not from a message."""
    container = body.get("container")
    team = _field(body.get("team"), "id") or _field(body.get("user"), "team_id")
    channel = _field(container, "channel_id")
    message_ts = _field(container, "message_ts")
    if _field(container, "type") != "message" or not (team and channel and message_ts):
        return None
    thread_ts = _field(container, "thread_ts") or _field(body.get("message"), "thread_ts")
    return Origin(str(team), str(channel), str(message_ts), str(thread_ts) if thread_ts else None)


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else None


async def _ephemeral(ctx: BotContext, body: dict[str, Any], text: str) -> None:
    user = body.get("user")
    team = _field(body.get("team"), "id") or _field(user, "team_id") or ""
    container = body.get("container")
    channel = _field(container, "channel_id") or _field(body.get("channel"), "id")
    if not channel or not _field(user, "id"):
        return
    surface = await ctx.workspaces.get(str(team))
    kwargs: dict[str, Any] = {"channel": channel, "user": _field(user, "id"), "text": text}
    thread_ts = _field(container, "thread_ts") or _field(body.get("message"), "thread_ts")
    if thread_ts:
        kwargs["thread_ts"] = thread_ts
    try:
        await surface.budget.call("chat.postEphemeral", **kwargs)
    except SlackError as exc:
        log.warning("click.reply_failed", error=exc.error)
