"""This process's durable side: its worker id, its leases, the stop watcher, the
reconciler, the resume schedule, the run queue and the purge (docs/operations.md). One
:class:`Worker` per process, owned by the app; every background task it starts is its own
and ends in :meth:`Worker.close`.

The worker builds this process's :class:`~bot.runs.supervisor.Supervisor` and is what the
supervisor tells as a run starts and ends (:class:`~bot.runs.run_life.RunLifecycle`): the
durable side is wired to it when it is built, and its own parts, which need the
supervisor, are built after it. The parts tell each other through the worker's methods
(a run queued elsewhere, or requeued, or the loop calm again: the queue looks for work).
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from agent_core.values.clock import utcnow
from bot.observe.loop_load import LoopLoad
from bot.runs.run_queue import RunQueue
from bot.runs.supervisor import Supervisor
from bot.workers.reconciler import Reconciler
from bot.workers.resume import Resumes
from bot.workers.stop_watch import StopWatcher

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent_core import Agent
    from agent_core.ports import Store
    from agent_core.values.records import Checkpoint, RunRecord
    from bot.access.trust import TrustGate
    from bot.approvals.desk import ApprovalDesk
    from bot.config.settings import Settings
    from bot.observe.metrics import Metrics
    from bot.slack_api.identity import AppIdentity
    from bot.slack_api.surface import Workspaces
    from bot.views.status import EndingView

__all__ = ["Worker", "default_worker_id"]

log = structlog.get_logger("bot.workers.worker")

RECONCILE_EVERY_S = 10.0
RESUME_POLL_S = 2.0
"""The resume schedule is re-read this often (or a third of LEASE_TTL, if shorter), for
resumes other workers decided; this worker's own wake it at once."""
PURGE_EVERY_S = 3600.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        store: Store,
        agent: Agent,
        workspaces: Workspaces,
        settings: Settings,
        *,
        worker_id: str,
        me: AppIdentity,
        trust: TrustGate,
        metrics: Metrics | None = None,
        approvals: ApprovalDesk | None = None,
    ) -> None:
        """``approvals``: where this process's held tool calls wait; the stop watcher
        hands them the decisions other workers commit. ``trust``: whose words in a thread
        a run reads as untrusted."""
        self.id = worker_id
        self.store = store
        self._settings = settings
        self.load = _loop_load(settings, metrics, on_calm=self._look_for_work)
        """How busy the event loop is (``BUSY_LOOP_LAG_MS``; None without it)."""
        self.supervisor = Supervisor(
            agent,
            store,
            workspaces,
            self,
            worker_id=worker_id,
            lease_ttl_s=settings.LEASE_TTL,
            metrics=metrics,
            max_live=settings.MAX_LIVE_RUNS,
            max_per_user=settings.MAX_RUNS_PER_USER or None,
            load=self.load,
            enterprise_of=trust.enterprise_of,
        )
        self.watcher = StopWatcher(
            store,
            self.supervisor,
            workspaces,
            poll_s=settings.STOP_POLL_INTERVAL,
            on_queued=self._look_for_work,
            approvals=approvals,
        )
        self.reconciler = self._reconciler(workspaces, approvals)
        self.resumes = self._resumes()
        self.queue = self._queue(workspaces, me, trust, metrics)
        self._task: asyncio.Task[None] | None = None
        self._reconciling: asyncio.Task[None] | None = None
        self._purging: asyncio.Task[None] | None = None

    def _reconciler(self, workspaces: Workspaces, approvals: ApprovalDesk | None) -> Reconciler:
        return Reconciler(
            self.store,
            workspaces,
            worker_id=self.id,
            lease_ttl_s=self._settings.LEASE_TTL,
            resume=self._resume,
            is_local=self.supervisor.holds,
            policy=self._settings.resume_settings,
            on_requeued=self._look_for_work,
            room=self.supervisor.room,
            approvals=approvals,
        )

    def _resumes(self) -> Resumes:
        ttl = self._settings.LEASE_TTL
        return Resumes(
            self.store,
            self.supervisor,
            self._settings.resume_settings,
            worker_id=self.id,
            lease_ttl_s=ttl,
            resume=self._resume,
            show=self.reconciler.post_final,
            poll_s=min(RESUME_POLL_S, ttl / 3),
        )

    def _queue(
        self,
        workspaces: Workspaces,
        me: AppIdentity,
        trust: TrustGate,
        metrics: Metrics | None,
    ) -> RunQueue:
        return RunQueue(
            self.store,
            self.supervisor,
            workspaces,
            worker_id=self.id,
            me=me,
            trust=trust,
            lease_ttl_s=self._settings.LEASE_TTL,
            reconciler=self.reconciler,
            watcher=self.watcher,
            policy=self._settings.resume_settings,
            metrics=metrics,
        )

    # -- what the supervisor tells it (RunLifecycle) -----------------------------------

    async def run_started(self, run_id: str) -> None:
        await self.watcher.scan([run_id])

    def room_freed(self) -> None:
        self._look_for_work()

    async def run_ending(self, record: RunRecord) -> EndingView | None:
        return await self.resumes.on_run_end(record)

    async def run_ended(self, run_id: str) -> None:
        await self.watcher.run_ended(run_id)

    def run_left(self) -> None:
        self.resumes.wake()  # a resume it scheduled may be due once it is gone
        self._look_for_work()

    def _look_for_work(self) -> None:
        """There may be room here, or a run waiting: the queue's taker looks, and the
        resume schedule (a due resume waits for room as a queued run does)."""
        self.queue.wake()
        self.resumes.wake()

    async def _resume(self, record: RunRecord, checkpoint: Checkpoint | None) -> None:
        """Continue an interrupted run here, in its existing status message."""
        await self.supervisor.resume(record, checkpoint)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.watcher.start()
        await self._reconcile(starting=True)  # orphans from before this start, at once
        await self.resumes.start()
        await self.queue.start()  # after the reconciler: leases of a previous life settled
        self._task = asyncio.create_task(self._housekeeping(), name="worker-housekeeping")
        log.info("worker.started", worker_id=self.id, lease_ttl_s=self._settings.LEASE_TTL)

    async def close(self) -> None:
        for task in (self._task, self._reconciling, self._purging):
            if task is not None:
                task.cancel()
                await asyncio.wait([task], timeout=2.0)
        self._task = self._reconciling = self._purging = None
        await self.queue.close()
        await self.resumes.close()
        await self.watcher.close()

    async def _housekeeping(self) -> None:
        beat = self._settings.LEASE_TTL / 3
        since_reconcile = since_purge = 0.0
        while True:
            await asyncio.sleep(beat)
            since_reconcile += beat
            since_purge += beat
            try:
                # Only the runs this process really holds: a live row naming us that we
                # no longer hold (its ending was never stored) must expire, not live on.
                held = self.supervisor.held_runs()
                renewed = await self.store.heartbeat(self.id, held, self._settings.LEASE_TTL)
                self.supervisor.lost_ownership(renewed, among=held)
                await self.queue.tick()
                if since_reconcile >= min(RECONCILE_EVERY_S, self._settings.LEASE_TTL):
                    since_reconcile = 0.0
                    # A task of its own: telling orphans' threads waits on Slack's rate
                    # limits, and the heartbeat must not (our own leases would lapse).
                    if self._reconciling is None or self._reconciling.done():
                        self._reconciling = asyncio.create_task(
                            self._reconcile(), name="worker-reconcile"
                        )
                if since_purge >= PURGE_EVERY_S:
                    since_purge = 0.0
                    # A task of its own too: a long history is purged in many batches,
                    # and the heartbeat must not wait for them.
                    if self._purging is None or self._purging.done():
                        self._purging = asyncio.create_task(self._purge(), name="worker-purge")
            except Exception:
                # The database may be briefly unreachable: keep beating, log each miss.
                log.exception("worker.housekeeping_failed")

    async def _purge(self) -> None:
        cutoff = utcnow() - timedelta(days=self._settings.RETENTION_DAYS)
        try:
            purged = await self.store.purge(cutoff)
        except Exception:
            log.exception("worker.purge_failed")
            return
        log.info("worker.purged", rows=purged)

    async def _reconcile(self, *, starting: bool = False) -> None:
        try:
            await self.reconciler.run_once(starting=starting)
        except Exception:
            log.exception("worker.reconcile_failed")


def _loop_load(
    settings: Settings, metrics: Metrics | None, *, on_calm: Callable[[], None]
) -> LoopLoad | None:
    """The event loop's load, when ``BUSY_LOOP_LAG_MS`` is set (its lag a metric)."""
    if not settings.BUSY_LOOP_LAG_MS:
        return None
    return LoopLoad(
        busy_lag_s=settings.BUSY_LOOP_LAG_MS / 1000,
        on_lag=metrics.loop_lag.set if metrics is not None else None,
        on_calm=on_calm,
    )
