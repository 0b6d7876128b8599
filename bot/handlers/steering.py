"""Replies in a live run's thread: guidance for the run, or a stop word (docs/stopping.md).

A reply is a person's message in a thread, as :mod:`bot.inbound.person_messages` tells
them (a reply also sent to the channel is one). A thread has at most one live run, and a
reply there is never a second run: it is
either a stop word (``stop``, ``abort``...; a Stop or Abort through the stop service) or
guidance for the run. Guidance is committed to the database before Slack's event is
acknowledged. Bolt acknowledges an Events API delivery *before* it runs the listener
(unless ``process_before_response`` is set, which would hold every listener's slow work
inside Slack's 3 s), but it runs a listener's middleware inside the dispatch, before the
listener runner acks: :meth:`Steering.before_ack` is that middleware, attached to the
``app_mention`` and ``message`` listeners of :mod:`bot.handlers.mentions`. In Socket Mode
the envelope is acknowledged once the dispatch returns, so the order is the same.

Before the ack, every database call within :data:`bot.stopping.stops.ACK_BUDGET_S`:

1. Only a stop word: the stop service finds the thread's live run, decides and commits
   (:meth:`bot.stopping.stops.StopService.request`); with no live run it does nothing (a bare
   stop word never starts a run).
2. Is the reply in a thread with a live run: this worker's, one another worker holds
   a live lease on, or one not started yet (accepted by a worker, or waiting in the
   queue: its guidance is delivered when it starts)? If not (or the database cannot
   say), nothing happens here and the listener carries on (a reply in a finished run's
   thread continues it, as before).
3. By someone who may not use the app at all (:mod:`bot.access.trust`), longer than
   ``GUIDANCE_MAX_CHARS``, or by someone who may not stop the run (``STOP_POLICY``,
   under ``participants`` whoever writes in the thread is one; and the workspace's
   admins): refused, nothing is queued.
4. Committed to ``guidance`` (on PostgreSQL the commit wakes the run's owner at once);
   on this worker's own run, handed to it at once. Guidance that cannot be committed in
   the budget is refused: "please send it again".

After the ack (:meth:`Steering.after_ack`): the ``guidance.queued`` audit event (author
and time), the stop service's own answer, or the ephemeral for a refused reply.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import (
    LIVE_STATES,
    AuditEvent,
    GuidanceRecord,
    StopSource,
    StorageError,
    ThreadKey,
)
from agent_core.values.clock import utcnow
from agent_core.values.records import is_accepted, is_waiting
from bot import messages
from bot.access.stop_policy import StopAsk, may_steer
from bot.access.trust import Person, person_of
from bot.errors import BudgetNotRunning, SlackError
from bot.inbound.person_messages import Asks, what_it_asks
from bot.slack_api.identity import bot_user_of
from bot.steering.guidance import guidance_id, reply_text, stop_word
from bot.stopping.stops import ACK_BUDGET_S

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.context.async_context import AsyncBoltContext

    from agent_core import StopReason
    from bot.handlers.context import BotContext
    from bot.stopping.decisions import StopDecision

__all__ = ["STEERED", "Reply", "Steered", "Steering"]

log = structlog.get_logger("bot.handlers.steering")

STEERED = "threadpilot_steered"
"""The key under which the middleware leaves its :class:`Steered` in Bolt's context."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A person's message inside a thread."""

    thread: ThreadKey
    user: str
    ts: str
    text: str
    """As written (with any mention of the app)."""
    user_team: str | None = None
    """The writer's own team (the event's ``user_team``)."""
    bot_user_id: str = ""
    """The app's bot user in the reply's workspace (its mention is not guidance)."""

    @property
    def delivery(self) -> str:
        """The message, for the stop service's de-duplication of re-deliveries."""
        return f"message:{self.thread.team}:{self.thread.channel}:{self.ts}"


@dataclass(frozen=True, slots=True)
class Steered:
    """What a reply in a live run's thread became before the ack."""

    reply: Reply
    run_id: str | None = None
    """The run steered (None for a stop word: the stop service found the run)."""
    queued: GuidanceRecord | None = None
    """The guidance committed (None: refused, a stop word, or already committed)."""
    local: bool = False
    """The run is this worker's, and has the guidance already."""
    stop: StopDecision | None = None
    refusal: str | None = None
    """The ephemeral answer when nothing was queued."""


@dataclass(frozen=True, slots=True)
class _Target:
    run_id: str
    requester: str
    local: bool


class Steering:
    def __init__(self, ctx: BotContext) -> None:
        self._me = ctx.me
        self._settings = ctx.settings
        self._store = ctx.store
        self._supervisor = ctx.supervisor
        self._trust = ctx.trust
        self._admins = ctx.admins
        self._stops = ctx.stops
        self._workspaces = ctx.workspaces
        self._worker_id = ctx.worker.id

    # -- before the ack ------------------------------------------------------------------

    async def before_ack(
        self,
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> None:
        """Bolt listener middleware: steer the run if the event is a reply in its thread."""
        reply = self._reply(body, bot_user_of(context, self._me))
        if reply is not None:
            with structlog.contextvars.bound_contextvars(
                thread=str(reply.thread), user=reply.user, message_ts=reply.ts
            ):
                steered = await self.steer(reply)
            if steered is not None:
                context[STEERED] = steered
        await next()

    def _reply(self, body: dict[str, Any], bot_user_id: str) -> Reply | None:
        """The reply an event carries, if it is a person's message inside a thread."""
        event = body.get("event")
        if not isinstance(event, dict):
            return None
        if what_it_asks(event, bot_user_id) is Asks.NOTHING or not body.get("team_id"):
            return None  # edits, joins, other apps, our own, a mention's twin
        user, ts, thread_ts = _text(event, "user"), _text(event, "ts"), _text(event, "thread_ts")
        channel, text = _text(event, "channel"), event.get("text")
        if not (user and ts and thread_ts and channel) or not isinstance(text, str):
            return None
        if thread_ts == ts:
            return None  # a new thread
        thread = ThreadKey(str(body["team_id"]), channel, thread_ts)
        person = person_of(body)
        return Reply(
            thread, user, ts, text, person.team if person is not None else None, bot_user_id
        )

    async def steer(self, reply: Reply) -> Steered | None:
        """Decide and commit ``reply``; None if its thread has no live run (or the
        database cannot say which), for the listener to carry on as before."""
        kind = stop_word(reply.text, reply.bot_user_id or self._me.user_id)
        if kind is not None:
            # The stop service finds the thread's live run itself, wherever it runs; in a
            # thread with none, a bare stop word starts nothing and is answered nothing.
            return Steered(reply, stop=await self._stop(reply, kind))
        target: _Target | None = None
        try:
            # One budget for every database call before the ack.
            async with asyncio.timeout(ACK_BUDGET_S):
                target = await self._target(reply.thread)
                if target is None:
                    return None
                return await self._queue(reply, target)
        except (TimeoutError, StorageError) as exc:
            busy = isinstance(exc, TimeoutError)
            if target is None:
                log.warning("guidance.thread_lookup_failed", error=str(exc) or "timed out")
                return None
            log.warning(
                "guidance.not_recorded",
                reason="database_busy" if busy else "database_error",
                error=str(exc) or "timed out",
            )
            refusal = (
                messages.GUIDANCE_NOT_RECORDED_BUSY if busy else messages.GUIDANCE_NOT_RECORDED
            )
            return Steered(reply, target.run_id, refusal=refusal)

    async def _queue(self, reply: Reply, target: _Target) -> Steered:
        """Guidance for ``target``: checked, committed, and handed over if it runs here."""
        text = reply_text(reply.text, reply.bot_user_id or self._me.user_id)
        limit = self._settings.GUIDANCE_MAX_CHARS
        if not text:
            return Steered(reply, target.run_id)  # only our mention: nothing to pass on
        person = Person(reply.user, reply.user_team, reply.thread.team)
        refusal = await self._trust.refusal(person)
        if refusal is not None:
            return Steered(reply, target.run_id, refusal=refusal)
        if len(text) > limit:
            log.info("guidance.refused", reason="too_long", chars=len(text), limit=limit)
            refusal = messages.guidance_too_long(len(text), limit)
            return Steered(reply, target.run_id, refusal=refusal)
        if not await self._allowed(reply, target):
            log.info("guidance.refused", reason="not_allowed", run_id=target.run_id)
            policy = self._settings.STOP_POLICY.value
            refusal = messages.guidance_not_allowed(policy, target.requester)
            return Steered(reply, target.run_id, refusal=refusal)
        record = GuidanceRecord(
            id=guidance_id(reply.thread, reply.ts),
            run_id=target.run_id,
            thread=reply.thread,
            author=reply.user,
            text=text,
            message_ts=reply.ts,
        )
        if not await self._store.add_guidance(record):
            log.info("guidance.redelivered", guidance_id=record.id)
            return Steered(reply, target.run_id)
        # Our own run takes it now; another worker's learns of it through the table (its
        # watcher: NOTIFY on PostgreSQL, the poll on SQLite).
        local = target.local and self._supervisor.guide(record)
        log.info("guidance.committed", run_id=target.run_id, guidance_id=record.id, local=local)
        return Steered(reply, target.run_id, queued=record, local=local)

    async def _target(self, thread: ThreadKey) -> _Target | None:
        """The live run of ``thread``: this worker's, else one another worker holds a live
        lease on, or one waiting in the queue (a row whose lease ran out has no worker: a
        reply there is a new run, which ends the orphan first)."""
        live = self._supervisor.live_in_thread(thread)
        if live is not None and not live.lost:
            return _Target(live.run.id, live.requester, local=True)
        now = utcnow()
        for row in await self._store.find_runs(states=LIVE_STATES, thread=thread):
            if is_waiting(row) or is_accepted(row):
                # Not started yet, by any worker: its first scan delivers the guidance.
                return _Target(row.id, row.requester, local=False)
            leased = row.lease_expires_at is not None and row.lease_expires_at > now
            # A sub-agent's row shares its parent's thread and has no lease of its own.
            if leased and row.parent_id is None and row.owner != self._worker_id:
                return _Target(row.id, row.requester, local=False)
        return None

    async def _allowed(self, reply: Reply, target: _Target) -> bool:
        """Who may stop the run may steer it (:func:`bot.access.stop_policy.may_steer`).
        Under a ``participants`` policy (stop or approval) the reply makes its author one
        (they wrote in the thread)."""
        settings = self._settings
        if reply.user != target.requester and reply.user not in settings.ADMIN_USER_IDS:
            await self._stops.note_participant(reply.thread, reply.user)
        return await may_steer(
            reply.user,
            target.requester,
            reply.thread,
            store=self._store,
            settings=settings,
            admins=self._admins,
        )

    async def _stop(self, reply: Reply, kind: StopReason) -> StopDecision:
        """A stop word is a Stop (``abort``: an Abort), decided and committed by the stop
        service like a button press, before the ack."""
        log.info("stop_word.received", kind=kind.value)
        ask = StopAsk(
            reply.user,
            kind,
            StopSource.STOP_WORD,
            thread=reply.thread,
            delivery=reply.delivery,
            user_team=reply.user_team,
        )
        return await self._stops.request(ask)

    # -- after the ack -------------------------------------------------------------------

    async def after_ack(self, steered: Steered) -> None:
        if steered.stop is not None:
            await self._stops.after(steered.stop)
        if steered.queued is not None:
            await self._audit(steered.queued, local=steered.local)
        if steered.refusal is not None:
            await self._ephemeral(steered.reply, steered.refusal)

    async def _audit(self, record: GuidanceRecord, *, local: bool) -> None:
        """``guidance.queued``: who wrote what to which run, when (the guidance row is what
        had to be durable before the ack; this may trail it)."""
        detail = {
            "guidance_id": record.id,
            "message_ts": record.message_ts,
            "chars": len(record.text),
            "worker": self._worker_id,
            "local": local,
        }
        try:
            await self._store.record_event(
                AuditEvent(
                    record.run_id, "guidance.queued", record.author, record.queued_at, detail
                )
            )
        except StorageError:
            log.exception("guidance.audit_not_recorded", run_id=record.run_id)

    async def _ephemeral(self, reply: Reply, text: str) -> None:
        thread = reply.thread
        try:
            surface = await self._workspaces.get(thread.team)
            await surface.budget.call(
                "chat.postEphemeral",
                channel=thread.channel,
                user=reply.user,
                text=text,
                thread_ts=thread.thread_ts,
            )
        except SlackError as exc:
            log.warning("guidance.reply_failed", error=exc.error)
        except BudgetNotRunning:
            log.warning("guidance.reply_failed", error="shutting down")


def _text(event: dict[str, Any], key: str) -> str:
    value = event.get(key)
    return value if isinstance(value, str) else ""
