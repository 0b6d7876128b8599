"""Steer… on a live sub-agent: a modal whose text is guidance for that sub-agent alone
(docs/stopping.md, Sub-agents people can reach).

1. Steer… in a sub-agent's menu (:mod:`bot.handlers.actions`), or on App Home under its
   parent, is acknowledged at once;
   then, if the person may steer the run (the trust gate, then ``STOP_POLICY``, as for a
   reply in the thread) and the sub-agent still works, its modal opens with the click's
   ``trigger_id`` (``views.open``). Otherwise they are told why, as an ephemeral reply.
2. The submission (``view_submission``) is checked again, the same way, then, before it is
   acknowledged: the text is posted in the thread ("<@U…> → sub-agent «task»: text") and
   committed to the ``guidance`` table under the sub-agent's own run id, with that post as
   its message. Whichever worker runs the sub-agent hands it over: this one at once,
   another through its stop watcher (a wake-up on PostgreSQL, its poll on SQLite). The
   post gets the marks every guidance gets (:mod:`bot.steering.guidance`): eyes once the
   sub-agent has it, a check mark when its next model request carries it, a minus sign
   if it ended first (its
   report then lists it as guidance it never saw). The parent run never sees it.
3. After the ack: the ``guidance.queued`` audit event (naming the sub-agent and its
   parent), or the ephemeral reply saying why nothing was queued.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import AuditEvent, GuidanceRecord, StorageError, ThreadKey
from bot import messages
from bot.access.stop_policy import may_steer
from bot.access.trust import Person, person_of
from bot.errors import BudgetNotRunning, SlackError
from bot.steering.guidance import guidance_id
from bot.stopping.stops import ACK_BUDGET_S
from bot.views.blocks import plain
from bot.views.home import ACTION_HOME_STEER

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

    from bot.handlers.context import BotContext

__all__ = ["CALLBACK_STEER", "STEER_INPUT", "open_steer", "register"]

log = structlog.get_logger("bot.handlers.sub_agent_steer")

CALLBACK_STEER = "threadpilot_steer_sub_agent"
"""The modal's ``callback_id``; its ``private_metadata`` names the sub-agent."""
STEER_INPUT = "threadpilot_steer_text"
"""The block id, and the action id, of the modal's one text input."""
_DONE = "threadpilot_steer_before_ack"


@dataclass(frozen=True, slots=True)
class _SubAgent:
    """The sub-agent a person wants to steer, as far as steering needs it."""

    run_id: str
    parent_id: str | None
    task: str
    thread: ThreadKey
    requester: str
    live: bool
    local: bool


@dataclass(frozen=True, slots=True)
class _Submitted:
    """What a submission became before its ack."""

    user: str
    thread: ThreadKey | None
    queued: GuidanceRecord | None = None
    parent_id: str | None = None
    local: bool = False
    refusal: str | None = None


def register(app: AsyncApp, ctx: BotContext) -> None:
    """The modal's submission: decided and committed before its ack, the rest after."""

    async def middleware(
        ack: AsyncAck,
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> None:
        context[_DONE] = await _submitted(ctx, body)
        await ack()
        await next()

    async def listener(context: AsyncBoltContext) -> None:
        done = context.get(_DONE)
        if isinstance(done, _Submitted):
            await _after(ctx, done)

    app.view(CALLBACK_STEER, middleware=[middleware])(listener)

    async def on_home_steer(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await open_steer(ctx, body)

    app.action(ACTION_HOME_STEER)(on_home_steer)


# -- the menu's Steer… (after its ack) -------------------------------------------------


async def open_steer(ctx: BotContext, body: dict[str, Any]) -> None:
    """Open the modal for the sub-agent the click names (a status message's menu option
    ``steer:<run id>``, or App Home's button, whose value is the run id), if the presser
    may steer it."""
    person = person_of(body)
    pressed = _first(body.get("actions"))
    option = _field(_field(pressed, "selected_option"), "value")
    if option is not None:
        run_id = str(option).partition(":")[2]
    else:
        run_id = str(_field(pressed, "value") or "")
    trigger = body.get("trigger_id")
    channel = _field(body.get("container"), "channel_id")
    if person is None or not run_id or not isinstance(trigger, str):
        log.warning("steer.malformed")
        return
    with structlog.contextvars.bound_contextvars(run_id=run_id, user=person.user):
        target, refusal = await _checked(ctx, person, run_id)
        if refusal is not None or target is None:
            where = target.thread if target is not None else None
            said = refusal or messages.SUB_AGENT_NOT_LIVE
            await _ephemeral(ctx, person.user, where, said, channel)
            return
        view = _modal(target)
        try:
            surface = await ctx.workspaces.get(target.thread.team)
            await surface.budget.call("views.open", trigger_id=trigger, view=view)
        except SlackError as exc:
            log.warning("steer.modal_not_opened", error=exc.error)
        except BudgetNotRunning:
            log.warning("steer.modal_not_opened", error="shutting down")


def _modal(target: _SubAgent) -> dict[str, Any]:
    task = " ".join(target.task.split())
    return {
        "type": "modal",
        "callback_id": CALLBACK_STEER,
        "private_metadata": json.dumps({"run_id": target.run_id}),
        "title": plain(messages.STEER_TITLE),
        "submit": plain(messages.STEER_SUBMIT),
        "close": plain(messages.STEER_CLOSE),
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": messages.steer_intro(task)},
            },
            {
                "type": "input",
                "block_id": STEER_INPUT,
                "label": plain(messages.STEER_LABEL_TEXT),
                "element": {
                    "type": "plain_text_input",
                    "action_id": STEER_INPUT,
                    "multiline": True,
                },
            },
        ],
    }


# -- the submission (before its ack) ---------------------------------------------------


async def _submitted(ctx: BotContext, body: dict[str, Any]) -> _Submitted | None:
    """Check, post and commit the guidance; never raises for a database or Slack fault
    (the person is told instead)."""
    person = person_of(body)
    view = body.get("view")
    if person is None or not isinstance(view, dict):
        log.warning("steer.malformed")
        return None
    try:
        run_id = str(json.loads(str(view.get("private_metadata") or "{}")).get("run_id") or "")
    except (ValueError, AttributeError):
        run_id = ""
    text = _submitted_text(view).replace("\x00", "").strip()
    if not run_id:
        log.warning("steer.malformed")
        return None
    with structlog.contextvars.bound_contextvars(run_id=run_id, user=person.user):
        try:
            async with asyncio.timeout(ACK_BUDGET_S):
                return await _commit(ctx, person, run_id, text)
        except (TimeoutError, StorageError) as exc:
            busy = isinstance(exc, TimeoutError)
            log.warning("steer.not_recorded", error=str(exc) or "timed out")
            refusal = (
                messages.GUIDANCE_NOT_RECORDED_BUSY if busy else messages.GUIDANCE_NOT_RECORDED
            )
            return _Submitted(person.user, None, refusal=refusal)


async def _commit(ctx: BotContext, person: Person, run_id: str, text: str) -> _Submitted:
    target, refusal = await _checked(ctx, person, run_id)
    thread = target.thread if target is not None else None
    if refusal is not None or target is None:
        return _Submitted(person.user, thread, refusal=refusal or messages.SUB_AGENT_NOT_LIVE)
    limit = ctx.settings.GUIDANCE_MAX_CHARS
    if not text:
        return _Submitted(person.user, thread)
    if len(text) > limit:
        return _Submitted(person.user, thread, refusal=messages.guidance_too_long(len(text), limit))
    posted = await _post(ctx, target, person.user, text)
    if posted is None:
        return _Submitted(person.user, thread, refusal=messages.GUIDANCE_NOT_RECORDED)
    record = GuidanceRecord(
        id=guidance_id(target.thread, posted),
        run_id=target.run_id,
        thread=target.thread,
        author=person.user,
        text=text,
        message_ts=posted,
    )
    if not await ctx.store.add_guidance(record):
        return _Submitted(person.user, thread)  # the same post, committed already
    local = target.local and ctx.supervisor.guide(record)
    log.info("guidance.committed", run_id=run_id, guidance_id=record.id, local=local)
    return _Submitted(person.user, thread, queued=record, parent_id=target.parent_id, local=local)


async def _post(ctx: BotContext, target: _SubAgent, user: str, text: str) -> str | None:
    """The guidance, shown in the thread; its ``ts`` (None if Slack did not take it)."""
    thread = target.thread
    try:
        surface = await ctx.workspaces.get(thread.team)
        return await surface.budget.post_message(
            thread.channel,
            thread_ts=thread.thread_ts,
            text=messages.steered_sub_agent(user, target.task, text),
        )
    except SlackError as exc:
        log.warning("steer.post_failed", error=exc.error)
        return None
    except BudgetNotRunning:
        return None


# -- who may, and what is there --------------------------------------------------------


async def _checked(
    ctx: BotContext, person: Person, run_id: str
) -> tuple[_SubAgent | None, str | None]:
    """The sub-agent, and why ``person`` may not steer it (None: they may). Refused
    first when they may not act at all, then when it is not a live sub-agent, then by
    who may steer its run (:func:`bot.access.stop_policy.may_steer`)."""
    refusal = await ctx.trust.refusal(person)
    if refusal is not None:
        return None, refusal
    target = await _sub_agent(ctx, run_id)
    if target is None or not target.live:
        return target, messages.SUB_AGENT_NOT_LIVE
    settings = ctx.settings
    allowed = await may_steer(
        person.user,
        target.requester,
        target.thread,
        store=ctx.store,
        settings=settings,
        admins=ctx.admins,
    )
    if not allowed:
        log.info("guidance.refused", reason="not_allowed")
        return target, messages.guidance_not_allowed(settings.STOP_POLICY.value, target.requester)
    return target, None


async def _sub_agent(ctx: BotContext, run_id: str) -> _SubAgent | None:
    """This worker's sub-agent (memory), else the database's; None if it is no
    sub-agent at all."""
    live = ctx.supervisor.reachable(run_id)
    if live is not None and not live.lost:
        run = live.run
        if run.parent is None:
            return None
        return _SubAgent(
            run.id,
            run.parent.id,
            run.task,
            run.thread,
            live.requester,
            live=run.result is None,
            local=True,
        )
    record = await ctx.store.get_run(run_id)
    if record is None or record.parent_id is None:
        return None
    return _SubAgent(
        record.id,
        record.parent_id,
        record.task,
        record.thread,
        record.requester,
        live=not record.state.is_terminal,
        local=False,
    )


# -- after the ack ---------------------------------------------------------------------


async def _after(ctx: BotContext, done: _Submitted) -> None:
    if done.queued is not None:
        record = done.queued
        detail = {
            "guidance_id": record.id,
            "message_ts": record.message_ts,
            "chars": len(record.text),
            "worker": ctx.worker.id,
            "local": done.local,
            "sub_agent_of": done.parent_id,
        }
        author, at = record.author, record.queued_at
        event = AuditEvent(record.run_id, "guidance.queued", author, at, detail)
        try:
            await ctx.store.record_event(event)
        except StorageError:
            log.exception("guidance.audit_not_recorded", run_id=record.run_id)
    if done.refusal is not None:
        await _ephemeral(ctx, done.user, done.thread, done.refusal, None)


async def _ephemeral(
    ctx: BotContext, user: str, thread: ThreadKey | None, text: str, channel: Any
) -> None:
    """Tell ``user`` in the sub-agent's thread (or the channel they clicked in)."""
    if thread is None and not isinstance(channel, str):
        return
    team = thread.team if thread is not None else ctx.me.team_id
    kwargs: dict[str, Any] = {"user": user, "text": text}
    if thread is not None:
        kwargs |= {"channel": thread.channel, "thread_ts": thread.thread_ts}
    else:
        kwargs["channel"] = channel
    try:
        surface = await ctx.workspaces.get(team)
        await surface.budget.call("chat.postEphemeral", **kwargs)
    except SlackError as exc:
        log.warning("steer.reply_failed", error=exc.error)
    except BudgetNotRunning:
        log.warning("steer.reply_failed", error="shutting down")


def _submitted_text(view: dict[str, Any]) -> str:
    values = _field(_field(view.get("state"), "values"), STEER_INPUT)
    value = _field(_field(values, STEER_INPUT), "value")
    return value if isinstance(value, str) else ""


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else None
