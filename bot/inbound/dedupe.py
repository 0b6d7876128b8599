"""Drop repeated deliveries of one Slack event or click (docs/architecture.md).

Slack re-sends an event it thinks was not acknowledged in time (``X-Slack-Retry-Num``),
maybe to another worker, and may deliver an event or a click twice. A repeat must change
nothing: not start a second run, not turn one Stop into an escalation.

:class:`Deliveries` answers "is this the first delivery?" for a key: this process's memory
first (cheap; catches the common repeat to the same process), then the database's
delivery log, which every worker shares (``Store.first_delivery``). Keys:
``event:<team>:<event_id>`` for events (:class:`EventDeduper`, a Bolt middleware, before
any listener can start a run) and ``click:<team>:<action_ts>:<user>`` for button clicks
(:mod:`bot.handlers.actions`): a deliberate second press has a new ``action_ts``. Each
key carries the workspace the delivery came from, so one workspace's delivery can never
pass for another's. A
click or event that asks a run to stop has its key recorded by the stop request's own
transaction (:meth:`Deliveries.take`): the key is taken exactly when the request is
committed, never one without the other.

An event whose handling fails before Slack is answered (Slack will deliver it again) has
its key forgotten (:meth:`EventDeduper.forget`, from the app's error handler), so the
re-delivery is handled, on any worker.

The log records that a delivery was *taken*, not that its work was done: a worker killed
between the two (before the run's row is written, which is still before the ack) would
lose a mention to Slack's retries of it. So a repeated mention or message that another
process took at least :data:`RETAKE_AFTER` ago, and that left no run in its thread from
its time on, is taken again (Slack retries after about 3 s, 1 minute
and 5 minutes; the thread's one-live-run rule and guidance ids make a second taking
harmless). A repeat this process took itself is always dropped: its taker is alive.

Only events that can start or steer a run are recorded (:meth:`EventDeduper.can_act`):
mentions, DMs, Slack's native stop, and people's replies in threads the app has had a run
in. A busy workspace sends the app every message of its channels; a write for each would
queue clicks behind them on SQLite's one writer, and a repeat of one of them does nothing
anyway.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from slack_bolt.response import BoltResponse

from agent_core import StorageError, ThreadKey
from bot.inbound.person_messages import Asks, what_it_asks
from bot.slack_api.identity import bot_user_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.context.async_context import AsyncBoltContext

    from agent_core.ports import DeliveryLog, RunQueries
    from bot.slack_api.identity import AppIdentity

__all__ = ["CLOCK_SKEW", "Deliveries", "EventDeduper", "click_key", "event_key"]

log = structlog.get_logger("bot.inbound.dedupe")

T = TypeVar("T")

CLOCK_SKEW = timedelta(seconds=5)
"""Slack's clock (a message's ``ts``) and ours may differ by this much."""
RETAKE_AFTER = timedelta(seconds=10)
"""A live taker has started its run long before this; a repeat later than it with no run
to show means the taker died."""
_STARTS_RUNS = frozenset({"app_mention", "message"})
JOINED_MEMORY = 10_000
"""Threads known to have had a run (that never stops being true), remembered here."""


def event_key(team: str, event_id: str) -> str:
    return f"event:{team}:{event_id}"


def click_key(team: str, action_ts: str, user: str) -> str:
    return f"click:{team}:{action_ts}:{user}"


def _team_of(body: dict[str, Any]) -> str:
    """The workspace an event came from (``team_id``; the event's ``team`` otherwise)."""
    team = body.get("team_id")
    if not isinstance(team, str) or not team:
        event = body.get("event")
        team = event.get("team") if isinstance(event, dict) else None
    return team if isinstance(team, str) else ""


class Deliveries:
    """First deliveries, remembered here and recorded in the shared delivery log."""

    def __init__(self, store: DeliveryLog, capacity: int = 10_000) -> None:
        self._store = store
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def seen_here(self, key: str) -> bool:
        """True if this process already took ``key`` (no database involved)."""
        if key in self._seen:
            self._seen.move_to_end(key)
            return True
        return False

    def remember(self, key: str) -> None:
        self._seen[key] = None
        self._seen.move_to_end(key)
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    async def first(self, key: str) -> bool:
        """True for exactly one delivery of ``key`` among all workers.

        Raises :class:`agent_core.StorageError` when the database cannot say; the caller
        decides what a delivery it cannot check is worth. Callers bound the wait.
        """
        if self.seen_here(key):
            return False
        # Remembered only once the database has answered: a delivery whose check failed
        # was not taken, and its retry must get a real answer, not "seen".
        first = await self._store.first_delivery(key)
        self.remember(key)
        return first

    async def forget(self, key: str) -> None:
        """``key``'s delivery was not handled after all (it failed before Slack was
        answered, and Slack will deliver it again): its next delivery is a first one, on
        this worker or any other. Raises :class:`agent_core.StorageError` when the
        database cannot be told; callers bound the wait."""
        self._seen.pop(key, None)
        await self._store.forget_delivery(key)

    async def take(self, key: str, commit: Callable[[str], Awaitable[T | None]]) -> T | None:
        """What ``commit(key)`` committed, for exactly one delivery of ``key`` among all
        workers; None for every other (a repeat), and nothing committed for it.

        For a delivery whose work is durable with its key: ``commit`` records ``key`` and
        does the work in one transaction, and returns None when some worker had taken
        the key (:meth:`agent_core.ports.StopRequestStore.add_stop_request_once`). This
        process's own repeats are answered from memory, as by :meth:`first`; a commit
        that raises leaves the key untaken, for the delivery's retry.
        """
        if self.seen_here(key):
            return None
        done = await commit(key)
        self.remember(key)
        return done


class EventDeduper:
    """A Bolt middleware that acknowledges and drops every repeat of an Events API event.

    The check must fit in Slack's 3 s to acknowledge, so it gets ``budget_s``. When the
    database cannot answer in time (or at all), the event is processed: a duplicate run
    is the lesser harm than a mention nobody answers; the busy-thread check still
    catches most repeats, and it is logged.
    """

    def __init__(
        self, deliveries: Deliveries, runs: RunQueries, me: AppIdentity, *, budget_s: float
    ) -> None:
        self._deliveries = deliveries
        self._runs = runs
        self._me = me
        self._budget_s = budget_s
        self._joined: OrderedDict[ThreadKey, None] = OrderedDict()

    async def can_act(self, body: dict[str, Any], bot_user_id: str | None = None) -> bool:
        """True if the event may start or steer a run, so a repeat of it must be dropped:
        a mention, a DM or group DM, Slack's native stop, or a person's reply in a thread
        the app has had a run in (a database read, within the budget; a database that
        cannot say counts as yes). The handlers decide what it does; this only has to
        include everything they act on."""
        event = body.get("event")
        if not isinstance(event, dict):
            return False
        if event.get("type") == "agent_session_stopped":
            return True
        asks = what_it_asks(event, bot_user_id or self._me.user_id)
        if asks is not Asks.THREAD_REPLY:
            return asks is Asks.RUN
        thread_ts, channel, team = event.get("thread_ts"), event.get("channel"), body.get("team_id")
        if not all(isinstance(v, str) and v for v in (thread_ts, channel, team)):
            return False  # malformed: nothing acts on it
        return await self._had_run(ThreadKey(str(team), str(channel), str(thread_ts)))

    async def _had_run(self, thread: ThreadKey) -> bool:
        if thread in self._joined:
            self._joined.move_to_end(thread)
            return True
        try:
            async with asyncio.timeout(self._budget_s):
                had = bool(await self._runs.find_runs(thread=thread, limit=1))
        except (StorageError, TimeoutError):
            return True  # cannot tell: recorded, as every event was
        if had:
            self._joined[thread] = None
            if len(self._joined) > JOINED_MEMORY:
                self._joined.popitem(last=False)
        return had

    async def first_time(self, team: str, event_id: str) -> bool:
        key = event_key(team, event_id)
        try:
            async with asyncio.timeout(self._budget_s):
                return await self._deliveries.first(key)
        except (StorageError, TimeoutError) as exc:
            log.warning(
                "event.dedupe_unavailable",
                event_id=event_id,
                error=str(exc) or type(exc).__name__,
                action="processed",
            )
            self._deliveries.remember(key)
            return True

    async def forget(self, body: dict[str, Any]) -> None:
        """Handling ``body``'s event failed before Slack was answered: Slack delivers it
        again, and that delivery must be handled, not dropped as a repeat of one that
        was (an event counts as seen only once its handling got past the ack). A
        database that cannot be told within the budget is logged: the retry that
        comes after :data:`RETAKE_AFTER` is still taken again if no run came of it."""
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        key = event_key(_team_of(body), str(event_id))
        if not event_id or not self._deliveries.seen_here(key):
            return  # not taken here (not recorded, or dropped as a repeat)
        try:
            async with asyncio.timeout(self._budget_s):
                await self._deliveries.forget(key)
        except (StorageError, TimeoutError) as exc:
            log.error("event.not_forgotten", event_id=event_id, error=str(exc) or "timed out")
            return
        log.info("event.forgotten", event_id=event_id, reason="handling failed before the ack")

    async def work_lost(self, body: dict[str, Any]) -> bool:
        """For a repeat: True if it is a person's message whose taker left no run behind
        (killed between taking it and starting the run), so it must be taken again."""
        event = body.get("event")
        if not isinstance(event, dict) or event.get("type") not in _STARTS_RUNS:
            return False
        try:
            sent = datetime.fromtimestamp(float(event["ts"]), UTC)
            if datetime.now(UTC) - sent < RETAKE_AFTER:
                return False
            at = sent - CLOCK_SKEW
            thread = ThreadKey(
                str(body["team_id"]),
                str(event["channel"]),
                str(event.get("thread_ts") or event["ts"]),
            )
            async with asyncio.timeout(self._budget_s):
                runs = await self._runs.find_runs(thread=thread, limit=1_000)
        except (KeyError, ValueError, OverflowError, StorageError, TimeoutError):
            return False  # cannot tell: the log's answer stands
        return not any(r.created_at >= at for r in runs)

    async def middleware(
        self,
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Callable[[], Awaitable[None]],
    ) -> BoltResponse | None:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if event_id and not await self.can_act(body, bot_user_of(context, self._me)):
            await next()  # nothing a repeat could do twice: not recorded
            return None
        team = _team_of(body)
        taken_here = bool(event_id) and self._deliveries.seen_here(event_key(team, str(event_id)))
        if event_id and not await self.first_time(team, str(event_id)):
            if not taken_here and await self.work_lost(body):
                log.warning("event.retaken", event_id=event_id, reason="no run came of it")
                await next()
                return None
            event = body.get("event")
            log.info(
                "event.duplicate_dropped",
                event_id=event_id,
                event_type=event.get("type") if isinstance(event, dict) else None,
            )
            return BoltResponse(status=200, body="")
        await next()
        return None
