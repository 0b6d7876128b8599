"""Delivers stop requests and guidance committed by any worker to the runs this worker
owns.

Slack hands each click to one of the app's connections at random, so with several
workers a Stop usually lands in a process that does not own the run.
That worker commits the request to ``stop_requests`` before the ack; this watcher,
in the owner, notices it and calls ``run.request_stop`` locally:

- PostgreSQL: ``LISTEN`` wakes the watcher at once; a slower poll is the backstop and a
  full re-scan runs after every reconnect (a NOTIFY sent while disconnected is lost).
- SQLite (and memory): polled, every ``poll_s`` (250 ms by default).

The table is the truth; a wake-up is only a hint. Requests are marked handled when the
run they target has ended (see :meth:`StopWatcher.run_ended`), and for a while after: a
click that read the run while it was live may commit its request just after the run
ended (the click path has up to its ack budget to do so), and a request must never stay
``requested`` on a run that has ended.

Approvals decided in another worker (docs/tools.md, Approvals) are found by the same
scans, and the same wake-up (a decision's commit NOTIFYs on PostgreSQL). A sub-agent's
approval is stored under the sub-agent's run id, which no top-level list names: a full
scan hands over every call waiting here, and a wake-up for a run id this worker does not
hold at top level goes to the approval desk, which knows the sub-agents' waiting calls.

Guidance (replies to a live run, docs/stopping.md) travels the same way: committed to
the ``guidance`` table by whichever worker got the reply, found here by the same scans
(a commit on PostgreSQL sends the same wake-up) and handed to the run, which takes each
reply once (:meth:`bot.runs.supervisor.Supervisor.guide`), however often a scan finds it still
queued. Guidance committed as its run ended for good is settled ``undelivered`` by the
same late passes; a run interrupted by a shutdown keeps its guidance queued for the
resumed run, whose first scan delivers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import ExitCode, GuidanceStatus, StopSource, StorageError
from agent_core.ports import StopWakeups
from agent_core.values.clock import utcnow
from bot.steering.guidance import QUEUED, UNDELIVERED, react, settle

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from agent_core.values.records import GuidanceRecord, StopRequestRecord, Wakeup
    from bot.runs.supervisor import Supervisor
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import StopWatchStore

__all__ = ["ApprovalDecisions", "StopWatcher"]

log = structlog.get_logger("bot.workers.stop_watch")


class ApprovalDecisions(Protocol):
    """Hands decisions committed elsewhere to the calls waiting here."""

    async def deliver(self, run_ids: Collection[str] | None = None) -> int:
        """Hand over the decisions stored for calls waiting here (of ``run_ids``; None:
        every call waiting here); how many."""
        ...

    def waits_for(self, run_id: str) -> bool:
        """True if a call of ``run_id`` (a sub-agent's, say) waits here."""
        ...


POLL_BACKSTOP_S = 2.0
"""With LISTEN/NOTIFY, the table is still scanned this often in case a wake-up was lost."""
LATE_REQUESTS_S = 10.0
"""After a run ends here, its late stop requests are settled for this long: well past a
click's ack budget, the longest a click that saw the run live can take to commit."""


class StopWatcher:
    def __init__(
        self,
        store: StopWatchStore,
        supervisor: Supervisor,
        workspaces: Workspaces,
        *,
        poll_s: float = 0.25,
        on_queued: Callable[[], None] | None = None,
        approvals: ApprovalDecisions | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._workspaces = workspaces
        self._poll_s = poll_s
        self._delivered: set[str] = set()
        self._ended: dict[str, float] = {}
        """Runs that ended here, to the monotonic time until which late requests are settled."""
        self._listening = contextlib.AsyncExitStack()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._approvals = approvals
        """Where this worker's held tool calls wait (:class:`bot.approvals.desk.ApprovalDesk`):
        an approval decided in another worker reaches them through the same scans."""
        self._on_queued = on_queued
        """Called when the wake-up says a run was queued (:attr:`Wakeup.queued`): the
        same channel carries it, so one listener serves both."""

    async def start(self) -> None:
        interval = self._poll_s
        if isinstance(self._store, StopWakeups):
            await self._listening.enter_async_context(
                self._store.listen_stops(self._on_wakeup, on_reconnect=self._on_reconnect)
            )
            interval = POLL_BACKSTOP_S
        await self.scan()  # anything committed before we listened
        self._task = asyncio.create_task(self._poll(interval), name="stop-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=2.0)
            self._task = None
        await self._listening.aclose()

    async def scan(self, run_ids: list[str] | None = None) -> int:
        """Deliver every pending request, then every queued guidance, for the given
        (default: all local) runs; returns how many were delivered."""
        wanted = run_ids if run_ids is not None else [r.run.id for r in self._supervisor.live_runs]
        delivered = 0
        if wanted:
            pending = await self._store.pending_stop_requests(wanted)
            delivered += sum(self._deliver(request) for request in pending)
            for guidance in await self._store.pending_guidance(wanted):
                if self._supervisor.guide(guidance):
                    delivered += 1
                    log.info("guidance.taken", run_id=guidance.run_id, guidance_id=guidance.id)
        if self._approvals is not None:
            # A full scan: every call waiting here, sub-agents' included (their approvals
            # are stored under their own run ids, which ``wanted`` does not name).
            delivered += await self._approvals.deliver(run_ids)
        return delivered

    def applied_here(self, request_id: str) -> None:
        """This worker applies the request itself (the stop service, before committing
        it): the watcher must not apply it again when it finds it in the table."""
        self._delivered.add(request_id)

    def forget(self, request_id: str) -> None:
        """The request :meth:`applied_here` announced was not applied after all (its
        commit failed, maybe after landing): deliver it if it turns up."""
        self._delivered.discard(request_id)

    async def run_ended(self, run_id: str) -> None:
        """Mark every request for a finished run handled: it was honoured, or moot.

        Requests committed later (or missed now, the database failing) are settled by the
        next polls for :data:`LATE_REQUESTS_S`.
        """
        self._ended[run_id] = time.monotonic() + LATE_REQUESTS_S
        try:
            await self._settle([run_id])
        except StorageError:
            log.exception("stop_watch.settle_failed", run_id=run_id)

    async def _settle(self, run_ids: list[str]) -> int:
        """Mark handled the pending requests of those runs that the database says ended
        (one that lost its lease here may live on, resumed by another worker)."""
        settled = 0
        ended: dict[str, bool] = {}
        for request in await self._store.pending_stop_requests(run_ids):
            if request.run_id not in ended:
                record = await self._store.get_run(request.run_id)
                ended[request.run_id] = record is not None and record.state.is_terminal
            if not ended[request.run_id]:
                continue
            settled += await self._store.mark_stop_handled(request.id)
            self._delivered.discard(request.id)
            log.info("stop.settled", run_id=request.run_id, request_id=request.id)
        return settled + await self._settle_guidance(run_ids)

    async def _settle_guidance(self, run_ids: list[str]) -> int:
        """Mark undelivered the guidance still queued for those runs that the database
        says ended for good (not by a shutdown: a resumed run takes it), and say so on
        each reply. The run's own session settled what it saw; this is what was committed
        as it ended."""
        late: list[GuidanceRecord] = []
        over: dict[str, bool] = {}
        for guidance in await self._store.pending_guidance(run_ids):
            if guidance.run_id not in over:
                record = await self._store.get_run(guidance.run_id)
                over[guidance.run_id] = (
                    record is not None
                    and record.state.is_terminal
                    and record.exit_code is not ExitCode.SHUTDOWN
                )
            if over[guidance.run_id]:
                late.append(guidance)
        moved = await settle(self._store, late, GuidanceStatus.UNDELIVERED, utcnow())
        for guidance in late:
            if guidance.id in moved:
                surface = await self._workspaces.get(guidance.thread.team)
                await react(surface, [guidance], add=UNDELIVERED, remove=QUEUED)
        return len(moved)

    async def _settle_late(self) -> None:
        """Settle requests committed for runs that ended here a moment ago."""
        now = time.monotonic()
        for run_id, until in list(self._ended.items()):
            if until <= now:
                del self._ended[run_id]
        if self._ended:
            await self._settle(list(self._ended))

    def _deliver(self, request: StopRequestRecord) -> bool:
        live = self._supervisor.get(request.run_id)
        if live is None or request.id in self._delivered:
            return False
        self._delivered.add(request.id)
        changed = live.run.request_stop(request.kind, request.requested_by, source=StopSource.STORE)
        log.info(
            "stop.delivered",
            run_id=request.run_id,
            request_id=request.id,
            kind=request.kind.value,
            requested_by=request.requested_by,
            changed=changed,
        )
        return True

    async def _on_wakeup(self, wakeup: Wakeup) -> None:
        run_id = wakeup.run_id
        if run_id is None:  # a run was queued
            if self._on_queued is not None:
                self._on_queued()
            return
        if self._supervisor.get(run_id) is not None:
            await self.scan([run_id])
        elif self._approvals is not None and self._approvals.waits_for(run_id):
            await self._approvals.deliver([run_id])  # a sub-agent's call waits here
        elif run_id in self._ended:
            await self._settle([run_id])

    async def _on_reconnect(self) -> None:
        log.info("stop_watch.rescan_after_reconnect")
        await self.scan()

    async def _poll(self, interval: float) -> None:
        while True:
            try:
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.scan()
                await self._settle_late()
            except Exception:
                # A database hiccup must not end the watcher: the next poll retries.
                log.exception("stop_watch.scan_failed")
