"""A run's life in this process, from its launch to its leaving (:class:`RunLife`), and
what the supervisor tells the worker on the way (:class:`RunLifecycle`).

The supervisor (:mod:`bot.runs.supervisor`) decides which runs start here and holds their
tasks; each task is :meth:`RunLife.drive`: the run is opened (an accepted run only if its
lease is still ours; its status message shown; what was committed for it before now
delivered), run, ended in Slack and in the database (unless another worker took it over:
then it writes nothing more), and gone, whatever happened. The thread is free as soon as
the run's loop has ended, before its last Slack writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agent_core import StorageError
from agent_core.run.recording import abandon_run, record_delivery, until_landed

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable, Iterator

    from agent_core import Run, RunRecord, RunResult
    from bot.runs.session import RunSession
    from bot.store_needs import SupervisorStore
    from bot.views.status import EndingView

__all__ = ["LiveRun", "RunLife", "RunLifecycle", "abandon_row", "descendants"]

log = structlog.get_logger("bot.runs.supervisor")


class RunLifecycle(Protocol):
    """What the supervisor tells this process's durable side as a run starts and ends,
    in this order (implemented by :class:`bot.workers.worker.Worker`)."""

    async def run_started(self, run_id: str) -> None:
        """The run is registered and shown: deliver what was committed for it before it
        started (stop requests, guidance)."""

    def room_freed(self) -> None:
        """A run here stopped working (its loop ended, or it left): look for queued work."""

    async def run_ending(self, record: RunRecord) -> EndingView | None:
        """Decide the resume of the run that just ended here (``record``: its row, read
        since); what its final message says of it."""

    async def run_ended(self, run_id: str) -> None:
        """The run's final message is written (or given up): its stop requests are
        handled."""

    def run_left(self) -> None:
        """The run is gone from this process: a resume it scheduled may be due, and its
        room is free."""


@dataclass(eq=False)
class LiveRun:
    run: Run
    session: RunSession
    requester: str
    task: asyncio.Task[None] | None = None
    registered: bool = False
    """True once the database holds the run with this worker as its owner."""
    lost: bool = False
    """True if another worker took the run over (our lease lapsed): we write nothing more."""
    auto_resumes: int = 0
    """The thread's automatic resumes so far, this run's start included (a continuation's)."""


class RunLife:
    """Drives the runs the supervisor launches, one task each (:meth:`drive`).

    ``free_thread``: the run's thread is free here (its loop ended, or it never starts);
    ``forget``: the run is gone from the supervisor's memory, its thread freed.
    """

    def __init__(
        self,
        store: SupervisorStore,
        lifecycle: RunLifecycle,
        *,
        worker_id: str,
        lease_ttl_s: float,
        free_thread: Callable[[Run], None],
        forget: Callable[[Run], None],
    ) -> None:
        self._store = store
        self._lifecycle = lifecycle
        self._worker_id = worker_id
        self._lease_ttl_s = lease_ttl_s
        self._free_thread = free_thread
        self._forget = forget

    async def drive(self, live: LiveRun, accepted: bool) -> None:
        """The run's life here: opened, run, ended in Slack and in the database, gone."""
        run = live.run
        bound = structlog.contextvars.bound_contextvars(
            run_id=run.id,
            team=run.thread.team,
            channel=run.thread.channel,
            thread=run.thread.thread_ts,
            user=live.requester,
        )
        with bound:
            try:
                if await self._opened(live, accepted=accepted):
                    await self._finish(live, await run.run())
            except Exception:
                log.exception("session.failed")
            finally:
                await self._gone(live)

    async def _opened(self, live: LiveRun, *, accepted: bool) -> bool:
        """Make the run ready to start: still ours, its status message shown, and what
        was committed for it before now delivered. False if it never starts."""
        run = live.run
        if accepted and not await self._still_ours(run.id):
            return False  # the queue has it, or another worker: nothing was shown here
        live.registered = True
        if not await live.session.open():
            await self._abandon(run)
            return False
        await self._record(run.id, status_ts=live.session.status_ts)
        await self._lifecycle.run_started(run.id)  # a stop that came before we started
        return True

    async def _finish(self, live: LiveRun, result: RunResult) -> None:
        """The run's loop has ended: its final message, its resume and its ending."""
        run = live.run
        # The thread is free as soon as the run has ended: a reply that arrives while the
        # last Slack writes are in flight starts the next run. So is its slot: the queue
        # need not wait for Slack either.
        self._free_thread(run)
        self._lifecycle.room_freed()
        stored = await self._stored(run.id)
        if live.lost or (stored is not None and stored.owner != self._worker_id):
            # Its new owner writes the Slack message; ours would contradict it.
            log.warning("run.ownership_lost", outcome=result.outcome.value)
            await live.session.abandon()
            return
        recorded = stored is not None and stored.state.is_terminal
        ending = await self._lifecycle.run_ending(stored) if stored is not None else None
        delivered = await live.session.close(result, ending=ending)
        await record_delivery(self._store, run.id, result, recorded=recorded, delivered=delivered)

    async def _gone(self, live: LiveRun) -> None:
        """Whatever happened: the run leaves this process, and its durable side is told."""
        run = live.run
        await live.session.discard()
        await _quietly(self._lifecycle.run_ended(run.id), "run_ended")
        for child in descendants(run):  # a sub-agent's own late requests are moot too
            await _quietly(self._lifecycle.run_ended(child.id), "run_ended")
        self._forget(run)
        self._lifecycle.run_left()

    async def _stored(self, run_id: str) -> RunRecord | None:
        """The run's row after it ended here; None if it cannot be read right now."""
        try:
            return await self._store.get_run(run_id)
        except StorageError:
            # Cannot tell whether it is still ours: the usual path, a correct final, is
            # the safer bet, and the terminal write below will not move a run that ended.
            log.exception("store.read_failed", step="still_ours")
            return None

    async def _still_ours(self, run_id: str) -> bool:
        """True if the accepted run's lease is still this worker's (renewed now); before
        anything of it is shown. While this worker was away (the database out of reach,
        or its loop stalled) longer than the lease, another worker's reconciler may have
        put the run back in the queue, and a worker may have taken it: then it is not
        started here too. Retried through a database outage; if the database cannot say
        in time, the run is left to the queue (its lease runs out and it is queued)."""

        async def renew() -> bool:
            ours = await self._store.heartbeat(self._worker_id, [run_id], self._lease_ttl_s)
            return run_id in ours

        try:
            if await until_landed(renew, step="accepted_lease", run_id=run_id):
                return True
        except StorageError:
            log.error("run.not_started", reason="the database could not confirm its lease")
            return False
        log.warning("run.not_started", reason="its lease lapsed: the queue has it")
        return False

    async def _record(self, run_id: str, **fields: Any) -> None:
        await _quietly(self._store.update_run(run_id, **fields), "update_run")

    async def _abandon(self, run: Run) -> None:
        """The run never starts: its thread is free at once, and its row (if any) is
        ended, retried through an outage."""
        self._free_thread(run)
        await abandon_row(self._store, run.id)


def descendants(run: Run) -> Iterator[Run]:
    """``run``'s sub-agents, and theirs, depth first."""
    for child in run.children:
        yield child
        yield from descendants(child)


async def abandon_row(store: SupervisorStore, run_id: str) -> None:
    """End the row of a run that never starts, if it was written at all (the thread was
    told so): :func:`agent_core.run.recording.abandon_run`."""
    await _quietly(abandon_run(store, run_id), "abandon")


async def _quietly(work: Awaitable[object], what: str) -> bool:
    """Run a database write whose failure must not stop the run: log it and go on."""
    try:
        await work
    except (StorageError, ValueError):
        log.exception("store.write_failed", step=what)
        return False
    return True
