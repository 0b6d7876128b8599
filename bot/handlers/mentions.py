"""Messages that start runs: an @mention in a channel, a DM, a reply in a finished run's
thread (docs/architecture.md, The path of a mention). Which events those are is
:func:`bot.inbound.person_messages.what_it_asks`, the rule steering and the once-only
check read too. A thread never gets a second live
run, and is never blocked by a row nobody runs: a live run whose lease has run out is
ended (as the reconciler would) instead of refusing the mention. Other apps' messages
start nothing: two agents mentioning each other would talk forever; nor do people the
trust boundary refuses (another organisation, guests: :mod:`bot.access.trust`), who are told why.

The run is *accepted* before Slack's event is acknowledged (:meth:`Mentions.before_ack`,
a listener middleware, within :data:`bot.stopping.stops.ACK_BUDGET_S`): its row is written, held
by this worker (:meth:`bot.runs.supervisor.Supervisor.accept`). Slack is told "received" only
once the run cannot be lost: if this process dies before it starts the run, the row goes
back in the queue and another worker runs it. A row that cannot be written in that time
(a database blip) is written after the ack, tried again for a bounded time
(:mod:`bot.handlers.late_admissions`). After the ack, the listener reads the
thread's history, and starts the run, or queues it when this worker already drives
``MAX_LIVE_RUNS`` runs (:mod:`bot.runs.run_queue`).

One person has at most ``MAX_RUNS_PER_USER`` runs live or queued per workspace: past it
their message gets an ephemeral saying so and starts nothing (no row, no status message);
the database counts, with the insert, so two mentions at once on two workers cannot both
take the last place (:meth:`bot.runs.supervisor.Supervisor.accept`). It also looks for a
live run in the thread in the same transaction: of two mentions at once in one thread,
on any workers, one starts a run and the other is told the thread is busy.

A reply (or a mention) in a thread whose run is still live (or queued) starts nothing: it
is guidance for that run, or a stop word (:mod:`bot.handlers.steering`, whose middleware
runs first, and decides and commits it before the event is acknowledged; the listeners
here then only finish what it began).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import LIVE_STATES, Admission, StorageError, ThreadKey
from agent_core.run.recording import abandon_run
from agent_core.values.clock import utcnow
from agent_core.values.records import is_accepted, is_waiting
from bot import messages
from bot.access.trust import Person, person_of
from bot.errors import BudgetNotRunning, SlackError
from bot.handlers.asked import Asked
from bot.handlers.late_admissions import LateAdmissions
from bot.handlers.steering import STEERED, Steering
from bot.inbound.person_messages import Asks, what_it_asks
from bot.inbound.thread_history import read_thread, stored_history, task_of
from bot.slack_api.identity import bot_user_of
from bot.stopping.stops import ACK_BUDGET_S

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from datetime import datetime

    from slack_bolt.async_app import AsyncApp
    from slack_bolt.context.async_context import AsyncBoltContext

    from agent_core import ChatMessage, RunRecord
    from bot.handlers.context import BotContext
    from bot.slack_api.surface import SlackSurface

__all__ = ["Mentions", "register"]

log = structlog.get_logger("bot.handlers.mentions")

ACCEPTED = "threadpilot_accepted"
"""The key under which the middleware leaves its :class:`Asked` in Bolt's context."""


def register(app: AsyncApp, ctx: BotContext) -> LateAdmissions:
    """The mention listeners; the late admissions they start, for the app to shut down
    first."""
    steering = Steering(ctx)
    mentions = Mentions(ctx)

    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if (steered := context.get(STEERED)) is not None:
            await steering.after_ack(steered)
        elif (asked := context.get(ACCEPTED)) is not None:
            await mentions.after_ack(asked)
        elif event.get("bot_id") or event.get("subtype") == "bot_message":
            log.info("mention.from_bot_ignored", bot_id=event.get("bot_id"))

    async def on_message(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if (steered := context.get(STEERED)) is not None:
            await steering.after_ack(steered)  # a reply to a live run (its middleware's)
            return
        if (asked := context.get(ACCEPTED)) is not None:
            if asked.ts != asked.thread.thread_ts:
                # A reply in a thread the app has had a run in: who wrote there may stop
                # its runs (STOP_POLICY=participants). Other threads are not recorded.
                await ctx.stops.note_participant(asked.thread, asked.user)
            await mentions.after_ack(asked)

    # The middleware runs before Bolt acknowledges the event, in this order; the
    # listener after.
    middleware = [steering.before_ack, mentions.before_ack]
    app.event("app_mention", middleware=middleware)(on_mention)
    app.event("message", middleware=middleware)(on_message)
    return mentions.late


class Mentions:
    def __init__(self, ctx: BotContext) -> None:
        self._me = ctx.me
        self._settings = ctx.settings
        self._store = ctx.store
        self._supervisor = ctx.supervisor
        self._trust = ctx.trust
        self._stops = ctx.stops
        self._workspaces = ctx.workspaces
        self._queue = ctx.worker.queue
        self._reconciler = ctx.worker.reconciler
        self.late = LateAdmissions(self)
        """Runs not recorded before the ack, recorded after it."""

    # -- before the ack ------------------------------------------------------------------

    async def before_ack(
        self,
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> None:
        """Bolt listener middleware: accept the run an event asks for (after
        :meth:`bot.handlers.steering.Steering.before_ack`, which took it if it steers a
        live run)."""
        asked = None
        if context.get(STEERED) is None:
            asked = await self._asked(body, bot_user_of(context, self._me))
        if asked is not None:
            with structlog.contextvars.bound_contextvars(
                thread=str(asked.thread), user=asked.user, message_ts=asked.ts
            ):
                context[ACCEPTED] = await self._admit(asked, person_of(body))
        await next()

    async def _admit(self, asked: Asked, person: Person | None) -> Asked:
        """Accept the run, unless its person may not use the app at all."""
        refusal = await self._trust.refusal(
            person or Person(asked.user, workspace=asked.thread.team)
        )
        if refusal is not None:
            return replace(asked, refusal=refusal)
        return await self._accept(asked)

    async def _asked(self, body: dict[str, Any], bot_user_id: str) -> Asked | None:
        """The new run ``body``'s event asks for, if any: a mention, a DM, or a reply in a
        thread that had a run."""
        event = body.get("event")
        team = body.get("team_id")
        if not isinstance(event, dict) or not isinstance(team, str) or not team:
            return None
        asks = what_it_asks(event, bot_user_id)
        if asks is Asks.NOTHING or not _strings(event, "user", "ts", "channel"):
            return None
        if asks is Asks.THREAD_REPLY and not await self._supervisor.had_run(_thread(team, event)):
            return None  # a thread the app was never part of
        task = task_of(str(event.get("text") or ""), bot_user_id)
        return Asked(_thread(team, event), event["user"], event["ts"], task)

    async def _accept(self, asked: Asked) -> Asked:
        """Store the run (held here), unless the thread has a live run already. A
        database that does not answer within the ack budget leaves it not stored: it
        is recorded after the ack (:mod:`bot.handlers.late_admissions`)."""
        run_id = uuid.uuid4().hex
        try:
            # One budget for every database call before the ack.
            async with asyncio.timeout(ACK_BUDGET_S):
                return await self._accept_once(replace(asked, run_id=run_id))
        except (TimeoutError, StorageError) as exc:
            log.warning("run.not_recorded_yet", run_id=run_id, error=str(exc) or "timed out")
            return replace(asked, run_id=run_id)

    async def admit_again(self, asked: Asked, *, earlier: Sequence[str]) -> Asked:
        """:class:`bot.handlers.late_admissions.Admitter`: another try, under a new run id
        (the rows of the tries before are ended first, had any landed unseen: a row
        left live would hold the thread, and be queued and run)."""
        for run_id in earlier:
            await abandon_run(self._store, run_id)  # StorageError: the try failed
        return await self._accept_once(asked)

    async def admitted(self, asked: Asked) -> None:
        await self.after_ack(asked)

    async def not_recorded(self, asked: Asked, *, earlier: Sequence[str]) -> None:
        surface = await self._workspaces.get(asked.thread.team)
        await _post(surface, asked.thread, messages.RUN_NOT_RECORDED)
        for run_id in earlier:
            await self._supervisor.abandon_row(run_id)

    async def _accept_once(self, asked: Asked) -> Asked:
        """One try at storing ``asked``'s run (its ``run_id``); raises StorageError when
        the database does not answer."""
        supervisor = self._supervisor
        run_id = asked.run_id
        assert run_id is not None
        if supervisor.thread_held(asked.thread):
            return replace(asked, busy=True)
        busy, orphans = await self._live_elsewhere(asked.thread)
        if busy:
            return replace(asked, busy=True)
        taken = await supervisor.accept(run_id, asked.thread, asked.user, asked.task)
        if taken is Admission.THREAD_BUSY:
            return replace(asked, busy=True)
        if taken is Admission.PERSON_FULL:
            limit = self._settings.MAX_RUNS_PER_USER
            log.info("run.refused", reason="MAX_RUNS_PER_USER", limit=limit)
            return replace(asked, refusal=messages.too_many_runs(limit))
        log.info("run.accepted", run_id=run_id)
        return replace(asked, run_id=run_id, stored=True, orphans=orphans)

    async def _live_elsewhere(self, thread: ThreadKey) -> tuple[bool, tuple[RunRecord, ...]]:
        """Whether another worker runs a live run in ``thread`` (one live run per thread), or
        one is queued for it; and, if not, the thread's live rows whose worker is gone.

        Otherwise only a live lease counts. A live row whose lease ran out lost its worker:
        it is ended after the ack, as the reconciler would, so the thread is not refused
        until a pass comes round. A row never leased (a sub-agent's) has a parent that
        answers for it; one this process holds has ended here (it left the thread) and is
        only writing its ending. A database that cannot say is taken as "none".
        """
        try:
            rows = await self._store.find_runs(states=LIVE_STATES, thread=thread)
        except StorageError:
            log.exception("thread.lookup_failed")
            return False, ()
        # Queued, or accepted by a worker (if it went away, it is queued again: it still runs).
        if any(is_waiting(r) or is_accepted(r) for r in rows):
            return True, ()
        now = utcnow()
        rows = [r for r in rows if not self._supervisor.holds(r.id) and r.lease_expires_at]
        if any(_leased(r, now) for r in rows):
            return True, ()
        return False, tuple(rows)

    # -- after the ack -------------------------------------------------------------------

    async def after_ack(self, asked: Asked) -> None:
        thread = asked.thread
        surface = await self._workspaces.get(thread.team)
        with structlog.contextvars.bound_contextvars(
            team=thread.team, channel=thread.channel, thread=thread.thread_ts, user=asked.user
        ):
            if asked.refusal is not None:
                await _ephemeral(surface, asked, asked.refusal)
            elif asked.busy or asked.run_id is None:
                await _ephemeral(surface, asked, messages.THREAD_BUSY)
            elif not asked.stored:
                self.late.admit(asked)  # recorded after the ack, then started
            else:
                await self._end_orphans(asked.orphans)
                await self._start(asked, asked.run_id, surface)

    async def _end_orphans(self, orphans: tuple[RunRecord, ...]) -> None:
        for record in orphans:
            log.warning("thread.orphan_found", run_id=record.id, previous_owner=record.owner)
            try:
                await self._reconciler.end_orphan(record)
            except StorageError:
                log.exception("thread.orphan_not_ended", run_id=record.id)

    async def _start(self, asked: Asked, run_id: str, surface: SlackSurface) -> None:
        thread = asked.thread
        history: list[ChatMessage] = []
        note = ""
        if thread.thread_ts != asked.ts:
            read = await read_thread(
                surface,
                thread,
                surface.me or self._me,
                self._trust,
                requester=asked.user,
                task=asked.task,
                asked_ts=asked.ts,
            )
            history = read.history
            if read.withheld:  # Slack's allowance is spent: what we kept, and say so
                history = await stored_history(self._store, thread, besides=run_id)
                note = messages.HISTORY_NOT_READ
            # Who wrote in the thread before the app was part of it takes part in its
            # runs too (STOP_POLICY=participants); only threads with a run are recorded.
            for person in sorted(read.people - {asked.user}):
                await self._stops.note_participant(thread, person)

        # The place is held until the run is launched: a resume or a queued run starting
        # here meanwhile cannot take it too.
        with self._supervisor.room() as held:
            live = (
                await self._supervisor.start(run_id, history=history, history_note=note)
                if held
                else None
            )
        if not held:
            await self._queue.enqueue(
                run_id,
                thread=thread,
                requester=asked.user,
                task=asked.task,
                history=history,
                surface=surface,
            )
            return
        if live is None:
            log.info(
                "run.not_started", run_id=run_id, reason="shutting down: it waits in the queue"
            )
            return
        log.info("run.started_here", run_id=run_id, history_messages=len(history))


def _thread(team: str, event: dict[str, Any]) -> ThreadKey:
    return ThreadKey(team, event["channel"], event.get("thread_ts") or event["ts"])


def _strings(event: dict[str, Any], *keys: str) -> bool:
    return all(isinstance(event.get(k), str) and event[k] for k in keys)


def _leased(record: RunRecord, now: datetime) -> bool:
    return record.lease_expires_at is not None and record.lease_expires_at > now


async def _ephemeral(surface: SlackSurface, asked: Asked, text: str) -> None:
    try:
        await surface.budget.call(
            "chat.postEphemeral",
            channel=asked.thread.channel,
            user=asked.user,
            text=text,
            thread_ts=asked.thread.thread_ts,
        )
    except SlackError as exc:
        log.warning("reply.failed", error=exc.error)
    except BudgetNotRunning:
        log.warning("reply.failed", error="shutting down")


async def _post(surface: SlackSurface, thread: ThreadKey, text: str) -> None:
    try:
        await surface.budget.post_message(thread.channel, text=text, thread_ts=thread.thread_ts)
    except SlackError as exc:
        log.error("reply.failed", error=exc.error)
    except BudgetNotRunning:
        log.error("reply.failed", error="shutting down")
