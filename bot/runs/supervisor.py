"""The supervisor owns every live run of this process and shuts them down.

A thread has at most one live run: :meth:`Supervisor.accept` checks and
holds the thread without an ``await`` in between, so two deliveries of the same mention
racing each other cannot both start a run.

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

A run is held here until its ending is in the database, not just in Slack: while its
terminal write is being retried through an outage it stays in memory, so the heartbeat
keeps its lease (:meth:`Supervisor.held_runs`) and no reconciler takes it for an orphan.
Every run is stored, leased here, before it is launched (a person's when their message
is accepted, a continuation in the same transaction as its resume's start), so a run here
is never without its row.

What the supervisor tells this process's durable side as a run starts and ends is one
small protocol, :class:`RunLifecycle`, handed to it when it is built (the worker
implements it, :mod:`bot.workers.worker`). The supervisor makes each run's Slack session itself,
from the run.

When a run has ended here, its resume is decided (:mod:`bot.workers.resume`) before its final
message is written, so the message says why it ended and when it resumes. A run resumed
in place continues in its own status message; a continuation (its context filled up) is
a new run in the same thread, started from a summary and linked to the run it continues.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agent_core import (
    Admission,
    EndedBecause,
    RunRecord,
    RunState,
    StopReason,
    StopSource,
    StorageError,
    continue_from,
)
from agent_core.run.recording import abandon_run, leased, record_delivery, until_landed
from agent_core.values.clock import utcnow
from bot.runs.resume_decision import spent_of, stored_ended_because
from bot.runs.session import RunSession
from bot.steering.guidance import to_guidance

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence

    from agent_core import (
        Agent,
        ChatMessage,
        Checkpoint,
        Compacted,
        GuidanceRecord,
        Run,
        RunResult,
        ThreadKey,
    )
    from bot.observe.loop_load import LoopLoad
    from bot.observe.metrics import Metrics
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import SupervisorStore
    from bot.views.status import EndingView

    StartContinuation = Callable[[RunRecord], Awaitable[bool]]
    """Stores a continuation's row in the transaction that starts its resume
    (:meth:`agent_core.ports.ResumeStore.start_continuation`); False if it lost."""

__all__ = ["LiveRun", "RunLifecycle", "Supervisor"]

log = structlog.get_logger("bot.runs.supervisor")


@dataclass(frozen=True, slots=True)
class _Accepted:
    """A run accepted here (its row written before the ack) and not started yet."""

    thread: ThreadKey
    requester: str
    task: str


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
        self._max_live = max_live
        """``MAX_LIVE_RUNS``: runs beyond it wait in the queue (:mod:`bot.runs.run_queue`)."""
        self._max_per_user = max_per_user
        """``MAX_RUNS_PER_USER``: a person's runs live or queued per workspace (None: any)."""
        self._load = load
        """While this process's event loop is busy, no new run starts here."""
        self._metrics = metrics
        self._store = store
        self._workspaces = workspaces
        self._lifecycle = lifecycle
        self._worker_id = worker_id
        self._lease_ttl_s = lease_ttl_s
        self._live: dict[str, LiveRun] = {}
        self._by_thread: dict[ThreadKey, str] = {}
        """The run holding each thread here: live, or accepted and not started yet."""
        self._accepted: dict[str, _Accepted] = {}
        self._queuing: set[str] = set()
        """Accepted runs the queue is queueing: it lets them go itself, shutdown or not."""
        self._holding = 0
        """Places held for runs about to start here (:meth:`hold_room`)."""
        self._accepting = True
        if metrics is not None:
            metrics.count_live_runs(lambda: len(self._live))

    # -- lookups -----------------------------------------------------------------------

    def get(self, run_id: str) -> LiveRun | None:
        return self._live.get(run_id)

    def live_in_thread(self, thread: ThreadKey) -> LiveRun | None:
        run_id = self._by_thread.get(thread)
        return self._live.get(run_id) if run_id else None

    def thread_held(self, thread: ThreadKey) -> bool:
        """True if ``thread`` has a run here: live, or accepted and about to start."""
        return thread in self._by_thread

    def holds(self, run_id: str) -> bool:
        """True if the run is this process's: live here, or accepted and not started."""
        return run_id in self._live or run_id in self._accepted

    def guide(self, record: GuidanceRecord) -> bool:
        """Hand a committed reply to its run, if this worker runs it (and still owns it):
        the run gives it to the model at its next turn boundary, and the reply is marked
        as taken. False if the run is not here, has it already, or has ended."""
        live = self._live.get(record.run_id)
        if live is None or live.lost or not live.run.add_guidance(to_guidance(record)):
            return False
        live.session.guidance_received(record)
        return True

    def held_runs(self) -> set[str]:
        """The runs whose leases this process must keep: accepted and not started yet, or
        registered here, not lost, and still in memory (running, or writing their
        ending)."""
        live = {live.run.id for live in self._live.values() if live.registered and not live.lost}
        return live | self._accepted.keys()

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

    @property
    def live_runs(self) -> list[LiveRun]:
        return list(self._live.values())

    @property
    def accepting(self) -> bool:
        return self._accepting

    def has_room(self) -> bool:
        """True if a new run may start here now: accepting, the event loop not busy
        (:mod:`bot.observe.loop_load`), and fewer than ``max_live`` runs still working (a run
        whose loop has ended, only waiting for Slack to take its final message, no longer
        counts) or about to start (:meth:`hold_room`).

        Resumes and continuations are held to it as new runs are: they wait in the
        schedule until a worker has room (:mod:`bot.workers.resume`).
        """
        if not self._accepting:
            return False
        if self._load is not None and self._load.busy:
            return False
        if self._max_live is None:
            return True
        working = sum(1 for live in self._live.values() if live.run.result is None)
        return working + self._holding < self._max_live

    def hold_room(self) -> bool:
        """Keep one place for a run about to start here (a resume or a continuation: it
        is claimed in the database first), if there is room; True if one is held. Free it
        with :meth:`free_room` once the run is launched (it counts itself then) or will
        not be: without it, two starts looking at once could both take the last place."""
        if not self.has_room():
            return False
        self._holding += 1
        return True

    def free_room(self) -> None:
        """Give back a place :meth:`hold_room` held."""
        self._holding = max(0, self._holding - 1)

    @contextlib.contextmanager
    def room(self) -> Iterator[bool]:
        """:meth:`hold_room` for the block: True inside it if a place is held."""
        held = self.hold_room()
        try:
            yield held
        finally:
            if held:
                self.free_room()

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
        if thread in self._by_thread:
            return Admission.THREAD_BUSY
        record = RunRecord(
            id=run_id,
            thread=thread,
            requester=requester,
            task=task,
            enterprise_id=self._enterprise_of(thread.team),
        )
        if not self._accepting:
            admission = await self._store.admit_run(record, limit=self._max_per_user)
            if admission is Admission.ACCEPTED:
                log.info("run.accepted_into_queue", run_id=run_id, reason="shutting down")
            return admission
        self._by_thread[thread] = run_id
        self._accepted[run_id] = _Accepted(thread, requester, task)
        try:
            leased = replace(
                record,
                owner=self._worker_id,
                lease_expires_at=utcnow() + timedelta(seconds=self._lease_ttl_s),
            )
            admission = await self._store.admit_run(leased, limit=self._max_per_user)
        except BaseException:
            self.hand_over(run_id)
            raise
        if admission is not Admission.ACCEPTED:
            self.hand_over(run_id)
        return admission

    def hand_over(self, run_id: str) -> None:
        """An accepted run is no longer this process's to start (it was queued, or not
        stored): the thread is free here and its lease no longer renewed."""
        accepted = self._accepted.pop(run_id, None)
        self._queuing.discard(run_id)
        if accepted is not None and self._by_thread.get(accepted.thread) == run_id:
            del self._by_thread[accepted.thread]

    def queuing(self, run_id: str) -> bool:
        """The queue takes over the accepted run ``run_id`` (:meth:`hand_over` when it is
        done); False if it is not held here (shutdown put it back in the queue)."""
        if run_id not in self._accepted:
            return False
        self._queuing.add(run_id)
        return True

    async def start(
        self, run_id: str, *, history: Sequence[ChatMessage], history_note: str = ""
    ) -> LiveRun | None:
        """Start the accepted run ``run_id``; None if it is not held here any more (this
        worker began shutting down and put it back in the queue). ``history_note``: said
        in its status (its thread was not read in full)."""
        held = self._accepted.get(run_id)
        if held is None:
            return None
        surface = await self._workspaces.get(held.thread.team)
        accepted = self._accepted.pop(run_id, None)
        if accepted is None or not self._accepting:
            return None
        run = self.agent.new_run(
            accepted.task,
            run_id=run_id,
            requester=accepted.requester,
            thread=accepted.thread,
            history=history,
        )
        session = RunSession(run, surface, store=self._store, history_note=history_note)
        return self._launch(run, session, accepted=True)

    async def start_queued(
        self, record: RunRecord, history: Sequence[ChatMessage]
    ) -> LiveRun | None:
        """Start a run this worker took from the queue (already ``running`` and leased
        here) in its queued status message, starting (not resuming); None if we are
        closing or the thread is busy here, when the caller puts it back."""
        surface = await self._workspaces.get(record.thread.team)
        if not self._room_in(record.thread):
            return None
        run = self._stored_run(record, history=history)
        session = RunSession(run, surface, store=self._store, status_ts=record.status_ts)
        return self._launch(run, session)

    async def resume(self, record: RunRecord, checkpoint: Checkpoint | None) -> LiveRun | None:
        """Continue a stored run from its checkpoint, in its existing status message, with
        what its request had spent (``record``: the row as it ended, its result kept)."""
        surface = await self._workspaces.get(record.thread.team)
        if not self._room_in(record.thread):
            return None
        run = self._stored_run(
            record,
            restore=checkpoint,
            resumed_because=stored_ended_because(record),
            spent=spent_of(record),  # the same request: its budget goes on
        )
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
        if not self._room_in(previous.thread):
            return None
        run = continue_from(
            self.agent,
            compacted,
            task=previous.task,
            previous_run_id=previous.id,
            run_id=run_id,
            requester=previous.requester,
            thread=previous.thread,
            spent=spent_of(previous),  # the same request: its budget goes on
        )
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
        if not self._room_in(previous.thread):
            return None
        run = self.agent.new_run(
            previous.task,
            run_id=run_id,
            requester=previous.requester,
            thread=previous.thread,
            # A run of its own: its turns count from one, its budget from zero.
            restore=replace(checkpoint, turn=0) if checkpoint else None,
            resumed_because=EndedBecause.BUDGET_EXHAUSTED,
            continued_from=previous.id,
        )
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
        if not self._room_in(run.thread):
            return None
        self._by_thread[run.thread] = run.id
        try:
            started = await start(self._row(run, auto_resumes))
        finally:
            self._release_thread(run)
        if not started:
            return None
        return self._launch(run, session, auto_resumes=auto_resumes)

    def _room_in(self, thread: ThreadKey) -> bool:
        """True if a stored run may start in ``thread`` here: we are not closing, and no
        run holds the thread here."""
        return self._accepting and thread not in self._by_thread

    def _stored_run(self, record: RunRecord, **more: Any) -> Run:
        """A run in memory for the stored ``record`` (``more``: how it starts)."""
        return self.agent.new_run(
            record.task,
            run_id=record.id,
            requester=record.requester,
            thread=record.thread,
            **more,
        )

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
        self._live[run.id] = live
        self._by_thread[run.thread] = run.id
        if self._metrics is not None:
            self._metrics.watch_run(run)
        drive = self._drive(live, accepted)
        live.task = asyncio.create_task(drive, name=f"session:{run.id}")
        return live

    async def _drive(self, live: LiveRun, accepted: bool) -> None:
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
        self._release_thread(run)
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
        self._live.pop(run.id, None)
        self._release_thread(run)
        self._lifecycle.run_left()

    def lost_ownership(self, owned: set[str], *, among: Collection[str] | None = None) -> None:
        """Abort, quietly, every registered run the database no longer says we own.

        ``among``: only these runs were asked about (the ones :meth:`held_runs` gave the
        heartbeat); a run registered since then is not judged on an answer about others.
        """
        for live in list(self._live.values()):
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

    async def _record(self, run_id: str, **fields: Any) -> None:
        await _quietly(self._store.update_run(run_id, **fields), "update_run")

    async def _abandon(self, run: Run) -> None:
        """The run never starts: its thread is free at once, and its row (if any) is
        ended, retried through an outage."""
        self._release_thread(run)
        await self.abandon_row(run.id)

    async def abandon_row(self, run_id: str) -> None:
        """End the row of a run that never starts, if it was written at all (the thread
        was told so): :func:`agent_core.run.recording.abandon_run`."""
        await _quietly(abandon_run(self._store, run_id), "abandon")

    def _release_thread(self, run: Run) -> None:
        if self._by_thread.get(run.thread) == run.id:
            del self._by_thread[run.thread]

    async def shutdown(self, timeout_s: float) -> None:
        """Put the runs accepted and not started back in the queue, end every live run
        with reason ``shutdown`` and wait for them, bounded."""
        self._accepting = False
        await self._release_accepted()
        live = list(self._live.values())
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
        for run_id in [r for r in self._accepted if r not in self._queuing]:
            self.hand_over(run_id)
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


async def _quietly(work: Awaitable[object], what: str) -> bool:
    """Run a database write whose failure must not stop the run: log it and go on."""
    try:
        await work
    except (StorageError, ValueError):
        log.exception("store.write_failed", step=what)
        return False
    return True


def _no_enterprise(team: str) -> str | None:
    return None
