"""Stop, Abort, Resume now, Don't resume and Continue clicks, and any button this app does
not know.

A click is read into a :class:`~bot.stopping.stops.StopAsk` and handed to the stop service
(:mod:`bot.stopping.stops`): decided, checked against Slack's re-deliveries, committed and, if
this worker owns the run, applied, all before ``ack()`` (in the listener's middleware,
:mod:`bot.handlers.acking`) and within :data:`~bot.stopping.stops.ACK_BUDGET_S` of Slack's 3
seconds; then, in the listener, the click's effect on the status message (through the
click's ``response_url``, ahead of all progress, when this worker runs it), and the slow
part (audit event, ephemeral answer). The run emits ``StopRequested`` and the run's
session re-renders the message without buttons that no longer apply. ``Resume now``
and ``Don't resume`` (on an ended run whose resume is scheduled, docs/stopping.md), and
``Continue`` (on a run that spent its budget) go through the same service, in the same
order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import StopReason, StopSource
from bot import messages
from bot.access.stop_policy import Origin, StopAsk
from bot.access.trust import person_of
from bot.errors import SlackError
from bot.handlers.acking import control
from bot.handlers.sub_agent_steer import open_steer
from bot.inbound.dedupe import click_key
from bot.slack_api.click_answer import click_answer
from bot.stopping.resume_controls import ResumeAction, ResumeAsk, ResumeDecided
from bot.stopping.stops import ACK_BUDGET_S
from bot.views.status import (
    ACTION_ABORT,
    ACTION_CONTINUE,
    ACTION_DONT_RESUME,
    ACTION_RESUME_NOW,
    ACTION_STOP,
    ACTION_SUB_AGENT,
    SUB_AGENT_ABORT,
    SUB_AGENT_STEER,
    SUB_AGENT_STOP,
)

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

    from bot.handlers.context import BotContext
    from bot.slack_api.click_answer import ClickAnswer
    from bot.stopping.decisions import StopDecision

__all__ = ["ACK_BUDGET_S", "register"]

log = structlog.get_logger("bot.handlers.actions")

_OURS = (
    ACTION_STOP,
    ACTION_ABORT,
    ACTION_RESUME_NOW,
    ACTION_DONT_RESUME,
    ACTION_CONTINUE,
    ACTION_SUB_AGENT,
)
_NOT_OURS = re.compile(rf"^(?!(?:{'|'.join(re.escape(a) for a in _OURS)})$)")
"""Every action id but this module's. Bolt offers a click to the next listener that
matches when the first has not acked within 3 s; a Stop must never end up there."""


def register(app: AsyncApp, ctx: BotContext) -> None:
    def stop(action: StopReason, action_id: str) -> None:
        async def before(body: dict[str, Any]) -> StopDecision | None:
            return await _request(ctx, body, action)

        async def after(decision: StopDecision, respond: AsyncRespond) -> None:
            answer = click_answer(respond)
            await _show_effect(ctx, decision, answer)
            await _after(ctx, decision, action, answer)

        control(app, action_id, before, after)

    def resume(action: ResumeAction, action_id: str) -> None:
        async def before(body: dict[str, Any]) -> ResumeDecided | None:
            return await _resume_request(ctx, body, action)

        async def after(decided: ResumeDecided, respond: AsyncRespond) -> None:
            await _resume_after(ctx, decided, action, click_answer(respond))

        control(app, action_id, before, after)

    async def sub_agent_before(body: dict[str, Any]) -> SubAgentChoice | None:
        return await _sub_agent_request(ctx, body)

    async def sub_agent_after(chosen: SubAgentChoice, respond: AsyncRespond) -> None:
        await _sub_agent_after(ctx, chosen, click_answer(respond))

    async def on_unknown(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        action = payload_field(first_item(body.get("actions")), "action_id")
        log.warning("click.unknown_action", action_id=action)
        await _ephemeral(ctx, body, messages.UNKNOWN_ACTION)

    stop(StopReason.STOP, ACTION_STOP)
    stop(StopReason.ABORT, ACTION_ABORT)
    resume(ResumeAction.RESUME_NOW, ACTION_RESUME_NOW)
    resume(ResumeAction.DONT_RESUME, ACTION_DONT_RESUME)
    resume(ResumeAction.CONTINUE, ACTION_CONTINUE)
    control(app, ACTION_SUB_AGENT, sub_agent_before, sub_agent_after)
    app.action(_NOT_OURS)(on_unknown)


async def _sub_agent_request(ctx: BotContext, body: dict[str, Any]) -> SubAgentChoice | None:
    """A sub-agent's menu before the ack: its Stop or Abort through the stop service;
    Steer… only read (its modal opens after the ack)."""
    chosen = _sub_agent_choice(body)
    if chosen is None:
        log.warning("click.malformed", action=ACTION_SUB_AGENT)
        return None
    verb, ask = chosen
    if ask is None:
        return SubAgentChoice(verb, body, None)
    with structlog.contextvars.bound_contextvars(run_id=ask.run_id, user=ask.user):
        return SubAgentChoice(verb, body, await ctx.stops.request(ask))


async def _sub_agent_after(ctx: BotContext, chosen: SubAgentChoice, answer: ClickAnswer) -> None:
    """A sub-agent's menu after the ack: the Steer… modal, or the Stop's or Abort's effect."""
    if chosen.decision is None:
        await open_steer(ctx, chosen.body)
        return
    await _show_effect(ctx, chosen.decision, answer)
    await _after(ctx, chosen.decision, chosen.decision.ask.kind, answer)


async def _request(
    ctx: BotContext, body: dict[str, Any], action: StopReason
) -> StopDecision | None:
    """Before the ack: the stop service's decision, committed; None for a malformed click."""
    ask = _ask(body, action)
    if ask is None:
        log.warning("click.malformed", action=action.value)
        return None
    with structlog.contextvars.bound_contextvars(run_id=ask.run_id, user=ask.user):
        return await ctx.stops.request(ask)


async def _show_effect(ctx: BotContext, decision: StopDecision, answer: ClickAnswer) -> None:
    """First after the ack: a click that changed this worker's run shows its effect on
    the status message at once, through the click's own ``response_url``
    (:meth:`bot.runs.session.RunSession.answer_click`), ahead of every run's progress. A run
    that ends here after the click (a queued one) answers with its final message."""
    if not (decision.changed and decision.local and decision.run_id):
        return
    live = ctx.supervisor.reachable(decision.run_id)  # a sub-agent's: its parent's message
    if live is not None:
        await live.session.answer_click(answer)


async def _after(
    ctx: BotContext, decision: StopDecision, action: StopReason, answer: ClickAnswer
) -> None:
    ask = decision.ask
    with structlog.contextvars.bound_contextvars(run_id=ask.run_id, user=ask.user):
        await ctx.stops.after(decision, answer=answer)
        verdict = decision.verdict
        log.info(
            "click.handled",
            action=action.value,
            verdict=verdict.value if verdict is not None else "not_recorded",
            local=decision.local,
        )


async def _resume_request(
    ctx: BotContext, body: dict[str, Any], action: ResumeAction
) -> ResumeDecided | None:
    """Before the ack: the resume control decided and committed; None for a malformed click."""
    user = payload_field(body.get("user"), "id")
    pressed = first_item(body.get("actions"))
    action_ts = payload_field(pressed, "action_ts")
    if not isinstance(user, str) or not user or not isinstance(action_ts, str) or not action_ts:
        log.warning("click.malformed", action=action.value)
        return None
    ask = ResumeAsk(
        user=user,
        action=action,
        run_id=str(payload_field(pressed, "value") or ""),
        delivery=click_key(_workspace(body), action_ts, user),
        message=click_origin(body),
    )
    with structlog.contextvars.bound_contextvars(run_id=ask.run_id, user=user):
        return await ctx.stops.resume(ask)


async def _resume_after(
    ctx: BotContext, decided: ResumeDecided, action: ResumeAction, answer: ClickAnswer
) -> None:
    ask = decided.ask
    with structlog.contextvars.bound_contextvars(run_id=ask.run_id, user=ask.user):
        await ctx.stops.resume_after(decided, answer=answer)
        verdict = decided.verdict
        log.info(
            "click.handled",
            action=action.value,
            verdict=verdict.value if verdict is not None else "not_recorded",
        )


# -- reading the payload ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubAgentChoice:
    """An option chosen in a live sub-agent's menu: Stop and Abort decided (and
    committed) before the ack, like the run's own buttons; Steer… left for after it."""

    verb: str
    body: dict[str, Any]
    decision: StopDecision | None


def _sub_agent_choice(body: dict[str, Any]) -> tuple[str, StopAsk | None] | None:
    """What a sub-agent's menu asks (``stop:<id>``, ``abort:<id>``, ``steer:<id>``): a
    Stop or Abort as a :class:`StopAsk` of the sub-agent's own run; None if unreadable."""
    pressed = first_item(body.get("actions"))
    value = payload_field(payload_field(pressed, "selected_option"), "value")
    verb, _, child_id = str(value or "").partition(":")
    if not child_id or verb not in (SUB_AGENT_STOP, SUB_AGENT_ABORT, SUB_AGENT_STEER):
        return None
    if verb == SUB_AGENT_STEER:
        return verb, None
    kind = StopReason.STOP if verb == SUB_AGENT_STOP else StopReason.ABORT
    ask = _ask(body, kind, run_id=child_id)
    return None if ask is None else (verb, ask)


def _ask(body: dict[str, Any], action: StopReason, *, run_id: str | None = None) -> StopAsk | None:
    """The press a ``block_actions`` payload describes; None if it names no user or
    button (Slack always sends both). ``run_id``: the run asked about, when the button's
    ``value`` is not it (a sub-agent's menu)."""
    user = payload_field(body.get("user"), "id")
    pressed = first_item(body.get("actions"))
    action_ts = payload_field(pressed, "action_ts")
    if not isinstance(user, str) or not user or not isinstance(action_ts, str) or not action_ts:
        return None
    return StopAsk(
        user=user,
        kind=action,
        source=StopSource.BUTTON,
        run_id=run_id if run_id is not None else str(payload_field(pressed, "value") or ""),
        delivery=click_key(_workspace(body), action_ts, user),
        message=click_origin(body),
        user_team=presser_team(body),
    )


def presser_team(body: dict[str, Any]) -> str | None:
    """The presser's own team (:func:`bot.access.trust.person_of`)."""
    person = person_of(body)
    return person.team if person is not None else None


def _workspace(body: dict[str, Any]) -> str:
    """The workspace a click came from."""
    team = payload_field(body.get("team"), "id") or payload_field(body.get("user"), "team_id")
    return str(team or "")


def click_origin(body: dict[str, Any]) -> Origin | None:
    """The team, channel and message a click came from; None if not from a message."""
    container = body.get("container")
    team = payload_field(body.get("team"), "id") or payload_field(body.get("user"), "team_id")
    channel = payload_field(container, "channel_id")
    message_ts = payload_field(container, "message_ts")
    if payload_field(container, "type") != "message" or not (team and channel and message_ts):
        return None
    thread_ts = _thread_ts(body)
    return Origin(str(team), str(channel), str(message_ts), str(thread_ts) if thread_ts else None)


def _thread_ts(body: dict[str, Any]) -> Any:
    """The thread of the message a click came from, if it is in one."""
    return payload_field(body.get("container"), "thread_ts") or payload_field(
        body.get("message"), "thread_ts"
    )


def payload_field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def first_item(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else None


async def _ephemeral(ctx: BotContext, body: dict[str, Any], text: str) -> None:
    """Answer a click on a button this app does not know, where it was pressed."""
    user = body.get("user")
    team = payload_field(body.get("team"), "id") or payload_field(user, "team_id") or ""
    container = body.get("container")
    channel = payload_field(container, "channel_id") or payload_field(body.get("channel"), "id")
    if not channel or not payload_field(user, "id"):
        return
    surface = await ctx.workspaces.get(str(team))
    kwargs: dict[str, Any] = {"channel": channel, "user": payload_field(user, "id"), "text": text}
    thread_ts = _thread_ts(body)
    if thread_ts:
        kwargs["thread_ts"] = thread_ts
    try:
        await surface.budget.call("chat.postEphemeral", **kwargs)
    except SlackError as exc:
        log.warning("click.reply_failed", error=exc.error)
