"""This process's durable side: its worker id, its leases, the stop watcher, the
reconciler, the resume schedule, the run queue and the purge (docs/operations.md). One
:class:`Worker` per process, owned by the app; every background task it starts is its own
and ends in :meth:`Worker.close`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from agent_core.clock import utcnow
from bot.reconciler import Reconciler
from bot.resume import Resumes
from bot.run_queue import RunQueue
from bot.stop_watch import StopWatcher

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agent_core.ports import Store
    from agent_core.records import Checkpoint, RunRecord
    from bot.identity import AppIdentity
    from bot.metrics import Metrics
    from bot.settings import Settings
    from bot.supervisor import Supervisor
    from bot.surface import Workspaces

__all__ = ["Worker", "default_worker_id"]

log = structlog.get_logger("bot.worker")

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
        supervisor: Supervisor,
        workspaces: Workspaces,
        settings: Settings,
        *,
        resume: Callable[[RunRecord, Checkpoint | None], Awaitable[None]],
        worker_id: str,
        me: AppIdentity,
        metrics: Metrics | None = None,
    ) -> None:
        self.id = worker_id
        self.store = store
        self._supervisor = supervisor
        self._settings = settings
        self.watcher = StopWatcher(
            store, supervisor, workspaces, poll_s=settings.STOP_POLL_INTERVAL
        )
        self.reconciler = Reconciler(
            store,
            workspaces,
            worker_id=worker_id,
            lease_ttl_s=settings.LEASE_TTL,
            resume=resume,
            is_local=supervisor.holds,
            policy=settings.resume_settings,
        )
        self.resumes = Resumes(
            store,
            supervisor,
            workspaces,
            settings.resume_settings,
            worker_id=worker_id,
            lease_ttl_s=settings.LEASE_TTL,
            resume=resume,
            show=self.reconciler.post_final,
            poll_s=min(RESUME_POLL_S, settings.LEASE_TTL / 3),
        )
        supervisor.resumes = self.resumes
        self.queue = RunQueue(
            store,
            supervisor,
            workspaces,
            worker_id=worker_id,
            me=me,
            lease_ttl_s=settings.LEASE_TTL,
            reconciler=self.reconciler,
            watcher=self.watcher,
            policy=settings.resume_settings,
            metrics=metrics,
        )
        self.watcher.on_queued = self.queue.wake
        self.reconciler.on_requeued = self.queue.wake
        self._task: asyncio.Task[None] | None = None
        self._reconciling: asyncio.Task[None] | None = None
        self._purging: asyncio.Task[None] | None = None

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
                held = self._supervisor.held_runs()
                renewed = await self.store.heartbeat(self.id, held, self._settings.LEASE_TTL)
                self._supervisor.lost_ownership(renewed, among=held)
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
