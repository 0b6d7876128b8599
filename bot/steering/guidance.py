"""Steering a live run from its thread (docs/stopping.md, Guidance): the rules, and the
marks one run's guidance leaves in Slack and in the database.

A reply in a live run's thread is either a stop word (a Stop or Abort through the stop
service) or guidance: committed to the ``guidance`` table before Slack's event is
acknowledged (:mod:`bot.handlers.steering`), handed to the run by its owner
(:meth:`bot.runs.supervisor.Supervisor.guide`), and given to the model at the next turn
boundary by the core. What a person sees on their reply tells them where it is::

    eyes               the run has it, for its next model request
    white_check_mark   it went out with a model request
    heavy_minus_sign   the run ended first (a Stop or Abort won); the handoff lists it

:class:`GuidanceMarks` writes those marks for one run, in order, in a task of its own:
the reaction, the guidance's status in the table and its audit event.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from typing import TYPE_CHECKING

import structlog

from agent_core import AuditEvent, Guidance, GuidanceStatus, StopReason, StorageError
from agent_core.values.clock import utcnow
from bot import messages
from bot.errors import BotError, SlackError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from datetime import datetime

    from agent_core import GuidanceRecord, ThreadKey
    from bot.slack_api.surface import SlackSurface
    from bot.store_needs import GuidanceMarksStore

__all__ = [
    "DELIVERED",
    "MARKS_TIMEOUT_S",
    "QUEUED",
    "STOP_WORDS",
    "UNDELIVERED",
    "GuidanceMarks",
    "guidance_id",
    "react",
    "reply_text",
    "settle",
    "stop_word",
    "to_guidance",
]

log = structlog.get_logger("bot.steering.guidance")

QUEUED = "eyes"
DELIVERED = "white_check_mark"
UNDELIVERED = "heavy_minus_sign"

STOP_WORDS: dict[str, StopReason] = {
    "stop": StopReason.STOP,
    "cancel": StopReason.STOP,
    "exit": StopReason.STOP,
    "quit": StopReason.STOP,
    "/bye": StopReason.STOP,
    "abort": StopReason.ABORT,
}
"""A reply that is only one of these (any case, optionally with the app's mention) is a Stop
or an Abort, not guidance."""

MARKS_TIMEOUT_S = 10.0
"""How long the run's end waits for its last marks (statuses, then reactions) to be
written: a few reactions to swap take seconds at Slack's ``reactions.remove`` rate."""
_READ_TIMEOUT_S = 2.0


# -- the rules, pure ---------------------------------------------------------------------


def reply_text(text: str, bot_user_id: str) -> str:
    """What a reply says to the agent: the app's own mention taken out, NULs dropped (no
    database stores them), surrounding whitespace trimmed."""
    without = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", " ", text)
    return without.replace("\x00", "").strip()


def stop_word(text: str, bot_user_id: str) -> StopReason | None:
    """The stop a reply asks for if it is only a stop word, in any case, with or without
    the app's mention, whitespace and punctuation around it (``Stop!``, ``*abort*``,
    ``@threadpilot quit.``); None for anything else (``please stop the build``)."""
    word = _strip_punctuation(reply_text(text, bot_user_id)).casefold()
    return STOP_WORDS.get(word)


def _strip_punctuation(text: str) -> str:
    """Whitespace and punctuation (Unicode's P* and the symbols people wrap words in)
    trimmed from both ends; a leading ``/`` is kept, it is part of ``/bye``."""
    start, end = 0, len(text)
    while start < end and _trimmed(text[start]) and text[start] != "/":
        start += 1
    while end > start and _trimmed(text[end - 1]):
        end -= 1
    return text[start:end]


def _trimmed(char: str) -> bool:
    return char.isspace() or unicodedata.category(char)[0] in "PS"


def guidance_id(thread: ThreadKey, message_ts: str) -> str:
    """One id per Slack message: a re-delivered event is the same guidance."""
    return f"{thread.team}:{thread.channel}:{message_ts}"


def to_guidance(record: GuidanceRecord) -> Guidance:
    """The core's view of a stored reply; the model is told its author as a mention."""
    return Guidance(
        id=record.id,
        author=record.author,
        text=record.text,
        queued_at=record.queued_at,
        author_label=messages.mention(record.author),
    )


# -- one run's marks ---------------------------------------------------------------------


class GuidanceMarks:
    """Reactions, statuses and audit events for one run's guidance.

    The run's events arrive synchronously (:meth:`delivered` is called from the
    session's listener), so the work goes to two queues, each emptied in order by a task
    of its own: the database's (quick) and Slack's reactions (``reactions.remove`` is
    Tier 2: a few replies take seconds to swap, and must not hold up their statuses). A
    reply's ``eyes`` is always added before it is swapped. :meth:`drain` waits for both
    (bounded), :meth:`cancel` drops them.
    """

    def __init__(self, run_id: str, store: GuidanceMarksStore, surface: SlackSurface) -> None:
        self._run_id = run_id
        self._store = store
        self._surface = surface
        self._records: dict[str, GuidanceRecord] = {}
        self._delivered: set[str] = set()
        self._writes = _Jobs(f"guidance-writes:{run_id}")
        self._reactions = _Jobs(f"guidance-reactions:{run_id}")

    def received(self, record: GuidanceRecord) -> None:
        """The run took the reply into its inbox: it is marked ``eyes``."""
        self._records[record.id] = record
        self._reactions.put(lambda: react(self._surface, [record], add=QUEUED))

    def delivered(self, guidance: Sequence[Guidance], turn: int) -> None:
        """The replies went out with the model request of ``turn``."""
        at = utcnow()
        records = [self._records[g.id] for g in guidance if g.id in self._records]
        self._delivered.update(g.id for g in guidance)
        self._settle(records, GuidanceStatus.DELIVERED, at, turn=turn)

    async def undelivered(self, leftovers: Sequence[Guidance]) -> tuple[Guidance, ...]:
        """The run ended for good: what it never gave the model is undelivered.

        That is the inbox's ``leftovers`` and whatever is still queued for the run in the
        table (committed as it ended, or never taken in). Returned in order, for the
        handoff; the marks follow in the background (see :meth:`drain`).
        """
        queued: list[GuidanceRecord] = []
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                queued = await self._store.pending_guidance([self._run_id])
        except (StorageError, TimeoutError):
            log.exception("guidance.read_failed", run_id=self._run_id)
        # Delivered here but not marked yet (its write is still queued): not undelivered.
        queued = [r for r in queued if r.id not in self._delivered]
        for record in queued:
            self._records.setdefault(record.id, record)
        ids = dict.fromkeys([*(g.id for g in leftovers), *(r.id for r in queued)])
        self._settle(
            [self._records[i] for i in ids if i in self._records],
            GuidanceStatus.UNDELIVERED,
            utcnow(),
        )
        known = {g.id: g for g in leftovers} | {r.id: to_guidance(r) for r in queued}
        return tuple(known[i] for i in ids)

    async def drain(self, timeout_s: float = MARKS_TIMEOUT_S) -> None:
        """Wait until every mark asked for so far is written (bounded), then stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for jobs in (self._writes, self._reactions):
            if not await jobs.drain(max(0.0, deadline - loop.time())):
                log.warning("guidance.marks_timed_out", run_id=self._run_id, queue=jobs.name)

    async def cancel(self) -> None:
        await self._writes.cancel()
        await self._reactions.cancel()

    def _settle(
        self,
        records: list[GuidanceRecord],
        status: GuidanceStatus,
        at: datetime,
        *,
        turn: int | None = None,
    ) -> None:
        """Record the status (with each reply's audit event), and swap the reactions."""
        if not records:
            return
        self._writes.put(lambda: settle(self._store, records, status, at, turn=turn))
        mark = DELIVERED if status is GuidanceStatus.DELIVERED else UNDELIVERED
        self._reactions.put(lambda: react(self._surface, records, add=mark, remove=QUEUED))


class _Jobs:
    """Work done in order by one owned task, started with the first job."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: asyncio.Queue[Callable[[], Awaitable[object]] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def put(self, job: Callable[[], Awaitable[object]]) -> None:
        self._queue.put_nowait(job)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def drain(self, timeout_s: float) -> bool:
        """True once every job so far is done (the task then ends); False after
        ``timeout_s``, the rest being dropped."""
        if self._task is None:
            return True
        self._queue.put_nowait(None)
        done, _ = await asyncio.wait([self._task], timeout=timeout_s)
        await self.cancel()
        return bool(done)

    async def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task], timeout=MARKS_TIMEOUT_S)
        self._task = None

    async def _run(self) -> None:
        while (job := await self._queue.get()) is not None:
            try:
                await job()
            except Exception:
                # One lost mark must not stop the others: each is a best effort.
                log.exception("guidance.mark_failed", queue=self.name)


async def settle(
    store: GuidanceMarksStore,
    records: Sequence[GuidanceRecord],
    status: GuidanceStatus,
    at: datetime,
    *,
    turn: int | None = None,
) -> set[str]:
    """Mark ``records`` settled and write one audit event (author and time) for each
    this call moved; returns those ids. Failures are logged."""
    if not records:
        return set()
    try:
        moved = await store.mark_guidance([r.id for r in records], status, at=at)
        for record in records:
            if record.id not in moved:
                continue
            detail: dict[str, object] = {
                "guidance_id": record.id,
                "queued_at": record.queued_at.isoformat(),
            }
            if turn is not None:
                detail["turn"] = turn
            await store.record_event(
                AuditEvent(
                    record.run_id, f"guidance.{status.value}", record.author, at, detail=detail
                )
            )
    except StorageError:
        log.exception("guidance.not_marked", status=status.value)
        return set()
    log.info("guidance.marked", status=status.value, guidance_ids=sorted(moved))
    return moved


async def react(
    surface: SlackSurface,
    records: Sequence[GuidanceRecord],
    *,
    add: str,
    remove: str | None = None,
) -> None:
    """Put reaction ``add`` on each reply, then take ``remove`` off each: the new marks
    first (``reactions.add`` is the faster tier), so no reply is left without one. Slack
    refusing a call is logged, not raised: a reaction shows where guidance is, it is not
    the record of it."""
    calls = [("reactions.add", add, "already_reacted")]
    if remove is not None:
        calls.append(("reactions.remove", remove, "no_reaction"))
    for method, name, harmless in calls:
        for record in records:
            if record.message_ts is None:
                continue
            where = {"channel": record.thread.channel, "timestamp": record.message_ts}
            try:
                await surface.budget.call(method, name=name, **where)
            except SlackError as exc:
                if exc.error != harmless:
                    log.warning(
                        "guidance.reaction_failed", method=method, name=name, error=exc.error
                    )
            except BotError as exc:  # the budget is closing (shutdown)
                log.warning("guidance.reaction_failed", method=method, name=name, error=str(exc))
