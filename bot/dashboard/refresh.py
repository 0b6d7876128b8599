"""Keeps open App Home tabs current: a viewer's Home is published again when a run it
lists changed, coalesced, within ``views.publish``'s budget.

**Who is looking.** Slack says when someone opens the Home tab (``app_home_opened``),
never when they leave it. Whoever opened it through this worker (or pressed one of its
buttons here) is a *viewer* for :data:`VIEWER_TTL_S`; each worker keeps its own, and a
view is read from the database, so which worker publishes it does not matter.

**What changed.** Runs are written by every worker, so a change is learned from the
table, not from this process: while it has viewers, the worker asks the store every
:data:`POLL_S` for the runs whose ``updated_at`` moved (``runs_changed_since``; leases do
not move it, state changes, status messages and endings do). ``updated_at`` comes from
the writer's clock, so each poll reaches :data:`CLOCK_OVERLAP` back and skips what it
saw. No hook in the supervisor is needed, and a run another worker owns (or the
reconciler ended) refreshes the Home tabs here just the same.

**Coalescing.** A change marks the viewers who list that run (its requester, and every
admin of its workspace) *dirty*; one task publishes dirty viewers one at a time, oldest
first, each rendered from the database when its turn comes. However many runs changed
meanwhile, a viewer gets one publish; at most one per :data:`MIN_INTERVAL_S` (the
Home tab someone just opened, or just pressed a button in, goes first and at once).
Every call goes through the workspace budget (``views.publish`` is Tier 4, and safe to
send again), so the whole stays under Slack's limit however many viewers there are:
under load, views are published less often, never refused.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from agent_core import StorageError
from agent_core.values.clock import utcnow
from bot.errors import BudgetNotRunning, SlackError, SlackRefused
from bot.views.home import render_home

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from agent_core import RunRecord
    from agent_core.ports import DashboardQueries
    from bot.dashboard.listing import Dashboard
    from bot.slack_api.surface import Workspaces

__all__ = ["CLOCK_OVERLAP", "MIN_INTERVAL_S", "POLL_S", "VIEWER_TTL_S", "HomeRefresher"]

log = structlog.get_logger("bot.dashboard.refresh")

POLL_S = 1.0
MIN_INTERVAL_S = 1.0
VIEWER_TTL_S = 30 * 60.0
"""A viewer who neither opened the Home tab again nor pressed anything for this long is
no longer kept current (Slack never says the tab was left)."""
MAX_VIEWERS = 1_000
NOTICE_S = 30.0
"""How long an answer (to a Stop, Stop all) stays on top of a viewer's Home tab."""
CLOCK_OVERLAP = timedelta(seconds=5)
CHANGES_PER_POLL = 1_000
FAILURE_PAUSE_S = 1.0

_Key = tuple[str, str]  # (team, user)


@dataclass(eq=False)
class _Viewer:
    team: str
    user: str
    seen_at: float
    published_at: float = -math.inf
    notice: str | None = None
    notice_until: float = -math.inf


class HomeRefresher:
    def __init__(
        self,
        dashboard: Dashboard,
        store: DashboardQueries,
        workspaces: Workspaces,
        *,
        poll_s: float = POLL_S,
        min_interval_s: float = MIN_INTERVAL_S,
        viewer_ttl_s: float = VIEWER_TTL_S,
        max_viewers: int = MAX_VIEWERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dashboard = dashboard
        self._store = store
        self._workspaces = workspaces
        self._poll_s = poll_s
        self._min_interval_s = min_interval_s
        self._viewer_ttl_s = viewer_ttl_s
        self._max_viewers = max_viewers
        self._clock = clock
        self._viewers: OrderedDict[_Key, _Viewer] = OrderedDict()  # least recently seen first
        self._dirty: OrderedDict[_Key, bool] = OrderedDict()  # oldest first; True: urgent
        self._wake = asyncio.Event()
        self._since = utcnow()
        self._seen: dict[str, datetime] = {}
        """Run id -> the ``updated_at`` last seen, for the rows the overlap reads again."""
        self._tasks: list[asyncio.Task[None]] = []
        self.published = 0
        """Views published (for logs and tests)."""

    async def start(self) -> None:
        self._since = utcnow()
        self._tasks = [
            asyncio.create_task(self._poll_loop(), name="home-refresh-poll"),
            asyncio.create_task(self._publish_loop(), name="home-refresh-publish"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        self._tasks = []

    # -- viewers -----------------------------------------------------------------------

    def show(self, team: str, user: str, *, notice: str | None = None) -> None:
        """Publish ``user``'s Home tab now (they opened it, or pressed a button in it),
        with ``notice`` on top, and keep it current from now on."""
        key = (team, user)
        now = self._clock()
        viewer = self._viewers.pop(key, None) or _Viewer(team, user, now)
        viewer.seen_at = now
        if notice is not None:
            viewer.notice, viewer.notice_until = notice, now + NOTICE_S
        self._viewers[key] = viewer
        while len(self._viewers) > self._max_viewers:
            dropped, _ = self._viewers.popitem(last=False)
            self._dirty.pop(dropped, None)
        self._dirty.pop(key, None)
        self._dirty[key] = True
        self._dirty.move_to_end(key, last=False)
        self._wake.set()

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    def _forget_stale(self) -> None:
        cutoff = self._clock() - self._viewer_ttl_s
        for key, viewer in list(self._viewers.items()):
            if viewer.seen_at < cutoff:
                del self._viewers[key]
                self._dirty.pop(key, None)

    # -- what changed ------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            self._forget_stale()
            if not self._viewers:
                # Nobody to keep current: changes until someone looks are moot (their
                # first view is read fresh).
                self._since, self._seen = utcnow(), {}
                continue
            try:
                while await self.poll_once() >= CHANGES_PER_POLL:
                    pass  # a burst of changes: read on at once
            except StorageError as exc:
                log.warning("home.poll_failed", error=str(exc))
            except Exception:  # a bug here must not stop every Home tab's refresh
                log.exception("home.poll_crashed")

    async def poll_once(self) -> int:
        """Read the runs changed since the last poll and mark their viewers; how many
        rows were read."""
        rows = await self._store.runs_changed_since(
            self._since - CLOCK_OVERLAP, limit=CHANGES_PER_POLL
        )
        for record in rows:
            if self._seen.get(record.id) == record.updated_at:
                continue
            self._seen[record.id] = record.updated_at
            self._since = max(self._since, record.updated_at)
            self._changed(record)
        floor = self._since - CLOCK_OVERLAP
        self._seen = {k: v for k, v in self._seen.items() if v >= floor}
        return len(rows)

    def _changed(self, record: RunRecord) -> None:
        if record.parent_id is not None:
            return  # sub-agents are not listed; their parent's row moves when it matters
        team = record.thread.team
        for key, viewer in self._viewers.items():
            if viewer.team == team and (
                viewer.user == record.requester or self._dashboard.is_admin(viewer.user, team)
            ):
                if key not in self._dirty:
                    self._dirty[key] = False
                self._wake.set()

    # -- publishing --------------------------------------------------------------------

    async def _publish_loop(self) -> None:
        while True:
            key, wait_s = self._next()
            if key is None:
                self._wake.clear()
                try:
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            viewer = self._viewers.get(key)
            if viewer is None:
                continue
            try:
                if not await self._publish(viewer):
                    await asyncio.sleep(FAILURE_PAUSE_S)
            except BudgetNotRunning:
                return  # shutting down
            except Exception:  # a bug here must not stop the other viewers' refreshes
                log.exception("home.publish_crashed", user=viewer.user)
                await asyncio.sleep(FAILURE_PAUSE_S)

    def _next(self) -> tuple[_Key | None, float | None]:
        """The next viewer to publish (taken off the dirty list), or how long until one
        may go (None: until something changes)."""
        now = self._clock()
        soonest: float | None = None
        for key, urgent in self._dirty.items():
            viewer = self._viewers.get(key)
            if viewer is None:
                del self._dirty[key]
                return None, 0.0
            ready_at = viewer.published_at + self._min_interval_s
            if urgent or ready_at <= now:
                del self._dirty[key]
                return key, None
            soonest = ready_at - now if soonest is None else min(soonest, ready_at - now)
        return None, soonest

    async def _publish(self, viewer: _Viewer) -> bool:
        """Render and publish one viewer's Home tab; False if it should be tried again
        (it is marked dirty again)."""
        key = (viewer.team, viewer.user)
        now = self._clock()
        notice = viewer.notice if viewer.notice_until > now else None
        try:
            listing = await self._dashboard.listing(viewer.team, viewer.user, notice=notice)
        except StorageError as exc:
            log.warning("home.not_listed", user=viewer.user, error=str(exc))
            self._dirty.setdefault(key, False)
            return False
        surface = await self._workspaces.get(viewer.team)
        try:
            await surface.budget.call(
                "views.publish", user_id=viewer.user, view=render_home(listing)
            )
        except SlackRefused as exc:
            # Sending it again would be refused again: not_enabled (the Home tab is off in
            # the app's settings), view_too_large, invalid_arguments.
            log.error("home.publish_refused", user=viewer.user, error=exc.error)
            if exc.error == "not_enabled":
                self._viewers.pop(key, None)
            return True
        except SlackError as exc:
            log.warning("home.publish_failed", user=viewer.user, error=exc.error)
            self._dirty.setdefault(key, False)
            return False
        viewer.published_at = self._clock()
        self.published += 1
        log.debug("home.published", user=viewer.user, live=len(listing.live))
        return True
