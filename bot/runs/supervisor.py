"""The supervisor starts the runs of this process, holds their tasks and shuts them down.

What is held here (the live runs, the runs accepted and not started yet, the run holding
each thread, the room for more) is kept in a :class:`~bot.runs.run_registry.RunRegistry`;
the supervisor's lookups are its. A thread has at most one live run:
:meth:`Supervisor.accept` checks and holds the thread without an ``await`` in between, so
two deliveries of the same mention racing each other cannot both start a run.

A person's new run is *accepted* before Slack's event is acknowledged: its row is
written, ``queued`` and leased to this worker, so the acknowledgement never promises a
run that a ``kill -9`` could lose. It is written only if its person has fewer than
``MAX_RUNS_PER_USER`` runs live or queued in the workspace, counted by the database in
the same transaction (:meth:`agent_core.ports.QueueStore.admit_run`), so the limit holds
across workers. The heartbeat keeps the lease until the run starts
here (:meth:`Supervisor.start`) or is handed to the queue; if the process dies first,
any worker's reconciler puts the row back in the queue; if it shuts down first, it puts
the row back itself (:meth:`Supervisor.shutdown`). Every run task is created and held here (no
fire-and-forget); :meth:`Supervisor.shutdown` ends them with reason ``shutdown`` and
waits, bounded, for their Slack messages to say so.

A run is held here until its ending is in the database, not just in Slack, so the
heartbeat keeps its lease (:meth:`Supervisor.held_runs`) meanwhile. Every run is stored,
leased here, before it is launched (a person's when their message is accepted, a
continuation in the same transaction as its resume's start), so a run here is never
without its row.

What the supervisor tells this process's durable side as a run starts and ends is one
small protocol, :class:`RunLifecycle`, handed to it when it is built (the worker
implements it, :mod:`bot.workers.worker`). The supervisor makes each run's Slack session itself,
from the run; the run is made for the way it starts (:mod:`bot.runs.run_starts`).

When a run has ended here, its resume is decided (:mod:`bot.workers.resume`) before its final
message is written, so the message says why it ended and when it resumes. A run resumed
in place continues in its own status message; a continuation (its context filled up) is
a new run in the same thread, started from a summary and linked to the run it continues.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from agent_core import Admission, RunRecord, RunState, StopReason, StopSource, StorageError
from agent_core.run.recording import leased
from bot.runs.run_life import LiveRun, RunLife, RunLifecycle, abandon_row
from bot.runs.run_registry import Accepted, RunRegistry
from bot.runs.run_starts import (
    accepted_run,
    budget_continuation,
    queued_run,
    resumed_run,
    summary_continuation,
)
from bot.runs.session import RunSession
from bot.steering.guidance import to_guidance

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Sequence
    from contextlib import AbstractContextManager

    from agent_core import (
        Agent,
        ChatMessage,
        Checkpoint,
        Compacted,
        GuidanceRecord,
        Run,
        ThreadKey,
    )
    from bot.observe.loop_load import LoopLoad
    from bot.observe.metrics import Metrics
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import SupervisorStore

    StartContinuation = Callable[[RunRecord], Awaitable[bool]]
    """Stores a continuation's row in the transaction that starts its resume
    (:meth:`agent_core.ports.ResumeStore.start_continuation`); False if it lost."""

__all__ = ["Supervisor"]

log = structlog.get_logger("bot.runs.supervisor")


class Supervisor:
    def __init__(
        self,
        agent: Agent,
        store: SupervisorStore,
        workspaces: Workspaces,
        lifecycle: RunLifecycle,
        *,
        worker_id: str,
        lease_ttl_s: float,
        metrics: Metrics | None = None,
        max_live: int | None = None,
        max_per_user: int | None = None,
        load: LoopLoad | None = None,
        enterprise_of: Callable[[str], str | None] | None = None,
    ) -> None:
        """``enterprise_of``: the Enterprise Grid org of a workspace, as far as Slack has
        said (:meth:`bot.access.trust.TrustGate.enterprise_of`), written on each run."""
        self.agent = agent
        self._enterprise_of = enterprise_of or _no_enterprise
        self._max_per_user = max_per_user
        """``MAX_RUNS_PER_USER``: a person's runs live or queued per workspace (None: any)."""
        self._metrics = metrics
        self._store = store
        self._workspaces = workspaces
        self._lifecycle = lifecycle
        self._worker_id = worker_id
        self._lease_ttl_s = lease_ttl_s
        self._runs = RunRegistry(max_live=max_live, load=load)
        """The runs held here, by run and by thread, and the room for more."""
        self._life = RunLife(
            store,
            lifecycle,
            worker_id=worker_id,
            lease_ttl_s=lease_ttl_s,
            free_thread=self._runs.release_thread,
            forget=self._runs.forget,
        )
        if metrics is not None:
            metrics.count_live_runs(self._runs.count)

    # -- what is held here (bot.runs.run_registry) -------------------------------------

    def get(self, run_id: str) -> LiveRun | None:
        return self._runs.get(run_id)

    def reachable(self, run_id: str) -> LiveRun | None:
        """:meth:`RunRegistry.reachable`: the run, or sub-agent, a control names."""
        return self._runs.reachable(run_id)

    def live_children(self, run_id: str) -> list[Run]:
        """:meth:`RunRegistry.live_children`: the run's sub-agents still working."""
        return self._runs.live_children(run_id)

    def live_in_thread(self, thread: ThreadKey) -> LiveRun | None:
        return self._runs.live_in_thread(thread)

    def thread_held(self, thread: ThreadKey) -> bool:
        """:meth:`RunRegistry.thread_held`: live, or accepted and about to start."""
        return self._runs.thread_held(thread)

    def holds(self, run_id: str) -> bool:
        """:meth:`RunRegistry.holds`: live here, or accepted and not started."""
        return self._runs.holds(run_id)

    def held_runs(self) -> set[str]:
        """:meth:`RunRegistry.held_runs`: the runs whose leases this process keeps."""
        return self._runs.held_runs()

    @property
    def live_runs(self) -> list[LiveRun]:
        return self._runs.live_runs

    @property
    def accepting(self) -> bool:
        return self._runs.accepting

    def has_room(self) -> bool:
        """:meth:`RunRegistry.has_room`: a new run may start here now."""
        return self._runs.has_room()

    def hold_room(self) -> bool:
        """:meth:`RunRegistry.hold_room`: keep a place for a run about to start."""
        return self._runs.hold_room()

    def free_room(self) -> None:
        """Give back a place :meth:`hold_room` held."""
        self._runs.free_room()

    def room(self) -> AbstractContextManager[bool]:
        """:meth:`RunRegistry.room`: a place held for the block, if there is room."""
        return self._runs.room()

    def hand_over(self, run_id: str) -> None:
        """:meth:`RunRegistry.hand_over`: an accepted run is no longer ours to start."""
        self._runs.hand_over(run_id)

    def queuing(self, run_id: str) -> bool:
        """:meth:`RunRegistry.queuing`: the queue takes over an accepted run."""
        return self._runs.queuing(run_id)

    def guide(self, record: GuidanceRecord) -> bool:
        """Hand a committed reply to its run, if this worker runs it (and still owns it):
        the run gives it to the model at its next turn boundary, and the reply is marked
        as taken. False if the run is not here, has it already, or has ended."""
        live = self._runs.reachable(record.run_id)  # a sub-agent's own guidance, too
        if live is None or live.lost or not live.run.add_guidance(to_guidance(record)):
            return False
        live.session.guidance_received(record)
        return True

    async def had_run(self, thread: ThreadKey) -> bool:
        """True if any worker ever ran in ``thread`` (a reply there continues it).

        Asked of the database, not of this process: the run may have lived in another
        worker, or before a restart.
        """
        try:
            return bool(await self._store.find_runs(thread=thread, limit=1))
        except StorageError:
            log.exception("store.read_failed", step="had_run")
            return False

    # -- starting and ending -----------------------------------------------------------

    async def accept(self, run_id: str, thread: ThreadKey, requester: str, task: str) -> Admission:
        """Store ``run_id``, a person's new run for ``thread``, before their message is
        acknowledged, unless the thread has a live run (here, or any worker's: the
        database decides with the insert) or the person has ``MAX_RUNS_PER_USER`` runs
        live or queued (any worker's).

        While this worker takes work the row is leased here and the thread held for it,
        until :meth:`start` runs it or :meth:`hand_over` gives it to the queue. While
        shutting down it is stored waiting, for any worker to take. StorageError (and
        nothing held) if it could not be stored; the caller then ends any row that was
        written unseen (:meth:`abandon_row`).
        """
        if self._runs.thread_held(thread):
            return Admission.THREAD_BUSY
        record = RunRecord(
            id=run_id,
            thread=thread,
            requester=requester,
            task=task,
            enterprise_id=self._enterprise_of(thread.team),
        )
        if not self._runs.accepting:
            admission = await self._store.admit_run(record, limit=self._max_per_user)
            if admission is Admission.ACCEPTED:
                log.info("run.accepted_into_queue", run_id=run_id, reason="shutting down")
            return admission
        self._runs.hold_accepted(run_id, Accepted(thread, requester, task))
        try:
            mine = leased(record, owner=self._worker_id, lease_ttl_s=self._lease_ttl_s)
            admission = await self._store.admit_run(mine, limit=self._max_per_user)
        except BaseException:
            self._runs.hand_over(run_id)
            raise
        if admission is not Admission.ACCEPTED:
            self._runs.hand_over(run_id)
        return admission

    async def start(
        self, run_id: str, *, history: Sequence[ChatMessage], history_note: str = ""
    ) -> LiveRun | None:
        """Start the accepted run ``run_id``; None if it is not held here any more (this
        worker began shutting down and put it back in the queue). ``history_note``: said
        in its status (its thread was not read in full)."""
        held = self._runs.accepted(run_id)
        if held is None:
            return None
        surface = await self._workspaces.get(held.thread.team)
        accepted = self._runs.take_accepted(run_id)
        if accepted is None or not self._runs.accepting:
            return None
        run = accepted_run(self.agent, run_id, accepted, history)
        session = RunSession(run, surface, store=self._store, history_note=history_note)
        return self._launch(run, session, accepted=True)

    async def start_queued(
        self, record: RunRecord, history: Sequence[ChatMessage]
    ) -> LiveRun | None:
        """Start a run this worker took from the queue (already ``running`` and leased
        here) in its queued status message, starting (not resuming); None if we are
        closing or the thread is busy here, when the caller puts it back."""
        surface = await self._workspaces.get(record.thread.team)
        if not self._runs.room_in(record.thread):
            return None
        run = queued_run(self.agent, record, history)
        session = RunSession(run, surface, store=self._store, status_ts=record.status_ts)
        return self._launch(run, session)

    async def resume(self, record: RunRecord, checkpoint: Checkpoint | None) -> LiveRun | None:
        """Continue a stored run from its checkpoint, in its existing status message, with
        what its request had spent (``record``: the row as it ended, its result kept)."""
        surface = await self._workspaces.get(record.thread.team)
        if not self._runs.room_in(record.thread):
            return None
        run = resumed_run(self.agent, record, checkpoint)
        session = RunSession(
            run, surface, store=self._store, status_ts=record.status_ts, resumed=True
        )
        return self._launch(run, session)

    async def continue_run(
        self, previous: RunRecord, compacted: Compacted, run_id: str, start: StartContinuation
    ) -> LiveRun | None:
        """Start ``run_id`` in ``previous``'s thread from the summary of its conversation
        (its context filled up), in a status message of its own; None if it does not
        start (:meth:`_start_continuation`)."""
        surface = await self._workspaces.get(previous.thread.team)
        if not self._runs.room_in(previous.thread):
            return None
        run = summary_continuation(self.agent, previous, compacted, run_id)
        session = RunSession(run, surface, store=self._store)
        auto_resumes = previous.auto_resumes + 1
        return await self._start_continuation(run, session, start, auto_resumes=auto_resumes)

    async def continue_with_budget(
        self,
        previous: RunRecord,
        checkpoint: Checkpoint | None,
        run_id: str,
        start: StartContinuation,
    ) -> LiveRun | None:
        """Start ``run_id`` in ``previous``'s thread from its checkpoint, with one more
        budget (a person pressed Continue on a run that spent its own), in a status
        message of its own; None if it does not start (:meth:`_start_continuation`)."""
        surface = await self._workspaces.get(previous.thread.team)
        if not self._runs.room_in(previous.thread):
            return None
        run = budget_continuation(self.agent, previous, checkpoint, run_id)
        session = RunSession(run, surface, store=self._store)
        # A person asked for it: not one of the thread's automatic resumes.
        return await self._start_continuation(
            run, session, start, auto_resumes=previous.auto_resumes
        )

    async def _start_continuation(
        self, run: Run, session: RunSession, start: StartContinuation, *, auto_resumes: int
    ) -> LiveRun | None:
        """Launch the continuation ``run`` once ``start`` has stored it, leased here, in
        the same transaction as its resume's start (the thread is held here meanwhile).
        None, and nothing stored, if ``start`` is not called (the thread has a run here,
        or we are closing) or its compare-and-set lost."""
        if not self._runs.room_in(run.thread):
            return None
        self._runs.hold_thread(run)
        try:
            started = await start(self._row(run, auto_resumes))
        finally:
            self._runs.release_thread(run)
        if not started:
            return None
        return self._launch(run, session, auto_resumes=auto_resumes)

    def _launch(
        self,
        run: Run,
        session: RunSession,
        *,
        accepted: bool = False,
        auto_resumes: int = 0,
    ) -> LiveRun:
        """Run ``run``, its row stored and leased here, in a task held here;
        ``accepted``: stored before a person's message was acknowledged, and started only
        if the lease is still ours (:meth:`_still_ours`)."""
        live = LiveRun(run, session, run.requester, auto_resumes=auto_resumes)
        self._runs.add(live)
        if self._metrics is not None:
            self._metrics.watch_run(run)
        drive = self._life.drive(live, accepted)
        live.task = asyncio.create_task(drive, name=f"session:{run.id}")
        return live

    def lost_ownership(self, owned: set[str], *, among: Collection[str] | None = None) -> None:
        """Abort, quietly, every registered run the database no longer says we own.

        ``among``: only these runs were asked about (the ones :meth:`held_runs` gave the
        heartbeat); a run registered since then is not judged on an answer about others.
        """
        for live in self._runs.live_runs:
            if (
                live.registered
                and not live.lost
                and (among is None or live.run.id in among)
                and live.run.id not in owned
                and live.run.result is None
            ):
                live.lost = True
                log.error("run.lease_lost", run_id=live.run.id, worker=self._worker_id)
                live.run.request_stop(
                    StopReason.ABORT, "system:lease-lost", source=StopSource.LEASE
                )

    def _row(self, run: Run, auto_resumes: int) -> RunRecord:
        """The row of ``run``, about to start here: leased here already."""
        record = RunRecord(
            id=run.id,
            thread=run.thread,
            requester=run.requester,
            task=run.task,
            continued_from=run.continued_from,
            auto_resumes=auto_resumes,
            enterprise_id=self._enterprise_of(run.thread.team),
        )
        return leased(record, owner=self._worker_id, lease_ttl_s=self._lease_ttl_s)

    async def abandon_row(self, run_id: str) -> None:
        """End the row of a run that never starts (:func:`bot.runs.run_life.abandon_row`)."""
        await abandon_row(self._store, run_id)

    async def shutdown(self, timeout_s: float) -> None:
        """Put the runs accepted and not started back in the queue, end every live run
        with reason ``shutdown`` and wait for them, bounded."""
        self._runs.close()
        await self._release_accepted()
        live = self._runs.live_runs
        log.info("supervisor.shutting_down", live_runs=len(live))
        for entry in live:
            if entry.run.result is None:  # else it only has its Slack message left to write
                entry.run.request_stop(
                    StopReason.SHUTDOWN, "system:shutdown", source=StopSource.SIGNAL
                )
        tasks = [e.task for e in live if e.task is not None]
        if not tasks:
            return
        deadline = time.monotonic() + timeout_s
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.error("supervisor.runs_did_not_end", count=len(pending))
            await asyncio.wait(pending, timeout=max(0.1, deadline - time.monotonic()))
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("supervisor.run_task_failed", error=repr(task.exception()))

    async def _release_accepted(self) -> None:
        """Accepted runs not started yet wait in the queue for any worker: nothing of
        theirs ran or was shown here. One that cannot be written back is left to its
        lease, which runs out; a reconciler queues it then. (One the queue is queueing is
        let go by the queue, with its status message if Slack still takes it.)"""
        for run_id in self._runs.not_queuing():
            self._runs.hand_over(run_id)
            try:
                await self._store.set_state(
                    run_id,
                    RunState.QUEUED,
                    expected=[RunState.QUEUED],
                    owner=None,
                    lease_expires_at=None,
                )
            except StorageError:
                log.exception("run.not_released", run_id=run_id)
                continue
            log.info("run.released", run_id=run_id, reason="shutting down")


def _no_enterprise(team: str) -> str | None:
    return None
