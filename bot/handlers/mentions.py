"""Messages that start runs: an @mention in a channel, a DM, a reply in a finished run's
thread (docs/architecture.md, The path of a mention). A thread never gets a second live
run, and is never blocked by a row nobody runs: a live run whose lease has run out is
ended on the spot (as the reconciler would) instead of refusing the mention. Other apps'
messages start nothing: two agents mentioning each other would talk forever.

A worker already driving ``MAX_LIVE_RUNS`` runs queues the new one instead
(:mod:`bot.run_queue`): it waits, durably, for room on any worker, and its thread counts
as having a live run meanwhile.

A reply (or a mention) in a thread whose run is still live (or queued) starts nothing either: it is
guidance for that run, or a stop word (:mod:`bot.handlers.steering`, whose middleware
decides and commits it before the event is acknowledged; the listeners here then only
finish what it began).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import LIVE_STATES, StorageError, ThreadKey
from agent_core.ports import is_waiting
from agent_core.stop import utcnow
from bot import messages
from bot.errors import SlackError
from bot.handlers.steering import STEERED, Steering
from bot.session import RunSession

if TYPE_CHECKING:
    from datetime import datetime

    from slack_bolt.async_app import AsyncApp
    from slack_bolt.context.async_context import AsyncBoltContext

    from agent_core import ChatMessage, Run, RunRecord
    from bot.context import BotContext
    from bot.surface import SlackSurface

__all__ = ["history_from", "register"]

log = structlog.get_logger("bot.handlers.mentions")

_HISTORY_MESSAGES = 50
_HISTORY_CHARS = 20_000


def register(app: AsyncApp, ctx: BotContext) -> None:
    steering = Steering(ctx)

    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if event.get("bot_id") or event.get("subtype") == "bot_message":
            log.info("mention.from_bot_ignored", bot_id=event.get("bot_id"))
            return
        if (steered := context.get(STEERED)) is not None:
            await steering.after_ack(steered)
            return
        await _start(ctx, body, event)

    async def on_message(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if (steered := context.get(STEERED)) is not None:
            await steering.after_ack(steered)  # a reply to a live run (its middleware's)
            return
        if event.get("subtype") or event.get("bot_id") or event.get("user") == ctx.bot_user_id:
            return  # edits, joins, and our own posts
        if event.get("channel_type") in ("im", "mpim"):  # a DM, or a group DM with the app
            mentioned = f"<@{ctx.bot_user_id}>" in event.get("text", "")
            if event["channel_type"] == "mpim" and mentioned:
                return  # its app_mention event starts the run
            await _start(ctx, body, event)
            return
        if event.get("thread_ts"):  # who wrote in a thread may stop its runs (participants)
            where = ThreadKey(body["team_id"], event["channel"], event["thread_ts"])
            await ctx.stops.note_participant(where, event["user"])
        if f"<@{ctx.bot_user_id}>" in event.get("text", ""):
            return  # the app_mention event for the same message starts the run
        thread_ts = event.get("thread_ts")
        if not thread_ts:
            return
        thread = ThreadKey(body["team_id"], event["channel"], thread_ts)
        if ctx.supervisor.live_in_thread(thread) is not None:
            return
        if await ctx.supervisor.had_run(thread):
            await _start(ctx, body, event)

    # The middleware runs before Bolt acknowledges the event; the listener after.
    app.event("app_mention", middleware=[steering.before_ack])(on_mention)
    app.event("message", middleware=[steering.before_ack])(on_message)


async def _start(ctx: BotContext, body: dict[str, Any], event: dict[str, Any]) -> None:
    team = body["team_id"]
    channel = event["channel"]
    thread_ts = event.get("thread_ts") or event["ts"]
    thread = ThreadKey(team, channel, thread_ts)
    user = event["user"]
    task = _task_text(event.get("text", ""), ctx.bot_user_id)
    surface = await ctx.workspaces.get(team)
    with structlog.contextvars.bound_contextvars(
        team=team, channel=channel, thread=thread_ts, user=user
    ):
        busy = ctx.supervisor.live_in_thread(thread) or ctx.worker.queue.queuing(thread)
        if busy or await _live_elsewhere(ctx, thread):
            await _ephemeral(surface, channel, user, thread_ts, messages.THREAD_BUSY)
            return
        history: list[ChatMessage] = []
        if thread_ts != event["ts"]:
            history = await _thread_history(surface, channel, thread_ts, event["ts"], ctx)

        def make_session(run: Run) -> RunSession:
            return RunSession(
                run,
                surface,
                store=ctx.store,
                channel=channel,
                thread_ts=thread_ts,
                requester=user,
                team_id=team,
            )

        if not ctx.supervisor.has_room() and ctx.supervisor.accepting:
            await ctx.worker.queue.enqueue(
                thread=thread,
                requester=user,
                task=task or "Hello",
                history=history,
                surface=surface,
            )
            return
        live = ctx.supervisor.start(
            thread=thread,
            requester=user,
            task=task or "Hello",
            history=history,
            make_session=make_session,
        )
        if live is None:
            log.info("run.not_started", reason="thread busy or shutting down")
            return
        log.info("run.accepted", run_id=live.run.id, history_messages=len(history))


async def _live_elsewhere(ctx: BotContext, thread: ThreadKey) -> bool:
    """True if another worker runs a live run in ``thread`` (one live run per thread), or
    a run waits in the queue for it.

    Otherwise only a live lease counts. A live row whose lease ran out lost its worker: it is
    ended here, as the reconciler would, so the thread is not refused until a pass comes
    round. A row never leased (a sub-agent's) has a parent that answers for it; one this
    process holds has ended here (it left the thread) and is only writing its ending.
    """
    try:
        rows = await ctx.store.find_runs(states=LIVE_STATES, thread=thread)
    except StorageError:
        log.exception("thread.lookup_failed")
        return False
    if any(is_waiting(r) for r in rows):
        return True
    now = utcnow()
    rows = [r for r in rows if ctx.supervisor.get(r.id) is None and r.lease_expires_at]
    if any(_leased(r, now) for r in rows):
        return True
    for record in rows:
        log.warning("thread.orphan_found", run_id=record.id, previous_owner=record.owner)
        try:
            await ctx.worker.reconciler.end_orphan(record, now=now)
        except StorageError:
            log.exception("thread.orphan_not_ended", run_id=record.id)
    return False


def _leased(record: RunRecord, now: datetime) -> bool:
    return record.lease_expires_at is not None and record.lease_expires_at > now


def _task_text(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()


async def _thread_history(
    surface: SlackSurface, channel: str, thread_ts: str, current_ts: str, ctx: BotContext
) -> list[ChatMessage]:
    try:
        reply = await surface.budget.call(
            "conversations.replies", channel=channel, ts=thread_ts, limit=200
        )
    except SlackError as exc:
        log.warning("thread.history_unavailable", error=exc.error)
        return []
    return history_from(reply.get("messages", []), ctx.bot_user_id, exclude_ts=current_ts)


def history_from(
    slack_messages: list[dict[str, Any]], bot_user_id: str, *, exclude_ts: str
) -> list[ChatMessage]:
    """The thread as a chat history: our posts as the assistant, people as users."""
    history: list[ChatMessage] = []
    for message in slack_messages[-_HISTORY_MESSAGES:]:
        if message.get("ts") == exclude_ts or not message.get("text"):
            continue
        text = _task_text(str(message["text"]), bot_user_id)
        if message.get("bot_id") or message.get("user") == bot_user_id:
            history.append({"role": "assistant", "content": text})
        else:
            history.append({"role": "user", "content": f"<@{message.get('user')}>: {text}"})
    while sum(len(str(m["content"])) for m in history) > _HISTORY_CHARS and len(history) > 1:
        history.pop(0)
    return history


async def _ephemeral(
    surface: SlackSurface, channel: str, user: str, thread_ts: str, text: str
) -> None:
    try:
        await surface.budget.call(
            "chat.postEphemeral", channel=channel, user=user, text=text, thread_ts=thread_ts
        )
    except SlackError as exc:
        log.warning("reply.failed", error=exc.error)
