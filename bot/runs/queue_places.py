"""Queued runs' place in line: the "Queued: n ahead" of the messages this worker posted.

One task of this worker keeps them current. It is fed by the queue's changes as this
worker sees them (:meth:`QueuePlaces.changed`): a run it queued, a run it took or ended,
and the worker's periodic tick, for runs other workers took meanwhile. Each change is
coalesced into one read of the queue; a message whose count moved meaningfully (see
:func:`worth_refreshing`) is rewritten through the workspace's Slack budget as progress:
coalesced per message, behind every final, and dropped once the run's own ending is
written. Nothing here runs on the worker's heartbeat, which must never wait on Slack.

A run taken by another worker can have its message rewritten by this one just after it
started or ended there: a started run's next progress puts its own status back, and a
run found ended once it left the queue has its final message written again here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agent_core import StorageError
from agent_core.values.records import is_waiting
from bot.errors import BudgetNotRunning
from bot.views.status import StatusSnapshot, render_status

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agent_core import RunRecord, ThreadKey
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import QueueOrderStore

__all__ = ["QueuePlaces", "queued_snapshot", "worth_refreshing"]

log = structlog.get_logger("bot.runs.queue_places")

REFRESH_PER_PASS = 20
"""At most this many "n ahead" updates per pass, nearest the head of the queue first."""
REFRESH_SCAN = 2000
"""How far into the queue a pass reads to place this worker's queued runs."""
_CLOSE_S = 2.0


def worth_refreshing(shown: int, now: int) -> bool:
    """True if a queued run's message showing ``shown`` ahead should now say ``now``:
    near the head every step counts, further back only a move by a quarter or more."""
    if now >= shown:
        return False
    return now < 10 or shown - now >= max(1, shown // 4)


def queued_snapshot(run_id: str, requester: str, ahead: int) -> StatusSnapshot:
    """The status message of a run waiting with ``ahead`` runs before it."""
    return StatusSnapshot(run_id=run_id, requester=requester, phase="queued", queued_ahead=ahead)


@dataclass
class _Posted:
    """A queued run whose status message this worker posted."""

    thread: ThreadKey
    requester: str
    status_ts: str
    ahead: int
    """The count the message shows (or will, once its queued update is written)."""
    rewritten: bool = False
    """This worker rewrote its count: if the run ended elsewhere, that may have landed
    over its final message."""


class QueuePlaces:
    """The task that keeps this worker's queued messages' counts current."""

    def __init__(
        self,
        store: QueueOrderStore,
        workspaces: Workspaces,
        *,
        post_final: Callable[[RunRecord], Awaitable[bool]],
    ) -> None:
        self._store = store
        self._workspaces = workspaces
        self._post_final = post_final
        self._posted: dict[str, _Posted] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="queue-places")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=_CLOSE_S)
            self._task = None

    def posted(
        self, run_id: str, thread: ThreadKey, requester: str, status_ts: str, ahead: int
    ) -> None:
        """This worker queued ``run_id`` in the message ``status_ts``, showing ``ahead``."""
        self._posted[run_id] = _Posted(thread, requester, status_ts, ahead)

    def left(self, run_id: str) -> None:
        """``run_id`` left the queue here (taken or ended): its message is its own now,
        and the runs behind it moved up."""
        self._posted.pop(run_id, None)
        self.changed()

    def changed(self) -> None:
        """The queue may have moved: count again (coalesced: one pass covers many)."""
        if self._posted:
            self._changed.set()

    # -- the task ----------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self.refresh()
            except (StorageError, BudgetNotRunning) as exc:
                # The database or the budget, briefly: the next change counts again.
                log.warning("queue.places_not_refreshed", error=str(exc) or type(exc).__name__)
            except Exception:
                # A bug: logged, and the task lives on for the next change.
                log.exception("queue.places_failed")

    async def refresh(self) -> None:
        """Read the queue once; rewrite the counts that moved, forget the runs that left."""
        if not self._posted:
            return
        waiting = await self._store.queued_runs(limit=REFRESH_SCAN)
        place = {record.id: ahead for ahead, record in enumerate(waiting) if is_waiting(record)}
        if len(waiting) < REFRESH_SCAN:  # the whole queue was read: the others left it
            for run_id in [r for r in self._posted if r not in place]:
                await self._gone(run_id, self._posted.pop(run_id))
        due = sorted(
            (place[run_id], run_id)
            for run_id, posted in self._posted.items()
            if run_id in place and worth_refreshing(posted.ahead, place[run_id])
        )
        for ahead, run_id in due[:REFRESH_PER_PASS]:
            if (posted := self._posted.get(run_id)) is not None:  # not taken meanwhile
                await self._show(run_id, posted, ahead)

    async def _show(self, run_id: str, posted: _Posted, ahead: int) -> None:
        rendered = render_status(queued_snapshot(run_id, posted.requester, ahead))
        surface = await self._workspaces.get(posted.thread.team)
        surface.budget.update_progress(
            posted.thread.channel, posted.status_ts, text=rendered.text, blocks=rendered.blocks
        )
        posted.ahead, posted.rewritten = ahead, True

    async def _gone(self, run_id: str, posted: _Posted) -> None:
        """A run that left the queue elsewhere: if it has ended and our count may have
        landed over its final message, write that message again (ahead of progress)."""
        if not posted.rewritten:
            return
        record = await self._store.get_run(run_id)
        if record is not None and record.state.is_terminal and record.final_posted_at is not None:
            await self._post_final(record)
