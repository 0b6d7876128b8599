"""The durable run queue: runs that arrive while this worker is full (``MAX_LIVE_RUNS``)
wait in the database, and any worker with room takes the next in fair order (docs/operations.md,
Queue and MAX_LIVE_RUNS).

- **Queueing** (:meth:`RunQueue.enqueue`). A run arrives here accepted (its row written,
  held by this worker, before the ack: :meth:`bot.runs.supervisor.Supervisor.accept`). Its
  status message is posted first, showing "Queued: n ahead" with Stop and Abort, its
  starting conversation is stored (a turn-0 checkpoint: the thread's history as it was
  when the person asked), and then it is let go: no owner, its status message recorded.
  A worker that takes it therefore finds the message to continue in. On PostgreSQL that
  wakes the other workers. A run accepted by a worker that went away (or shut down)
  before it started or queued it is let go the same way, with neither: the worker that
  takes it posts its status message and reads the thread itself.
- **Taking** (:meth:`RunQueue.wake`, one task of this worker). When one of this worker's
  runs ends, on the worker's periodic tick, and on a wake-up from another worker's
  queueing, the taker claims queued runs while the supervisor has room: each claim makes
  the next waiting run (the oldest of the person with the fewest runs going: fair order,
  :class:`agent_core.ports.QueueStore`) ``running`` under this worker's lease in one
  transaction, so no run is taken twice. The run then starts in its queued status
  message and streams as any other; guidance written to it while it waited is delivered
  by its first scan.
- **Ending a queued run** (:meth:`RunQueue.end_queued`). A Stop or Abort (through the
  one stop service, :mod:`bot.stopping.stops`) ends it by compare-and-set from ``queued``: it
  never reached the model, its status message becomes the terminal report ("User
  interlude: stopped by ..."), and its guidance is marked undelivered. A queued run with
  a pending stop request is never claimed; one whose ending was not written (the worker
  that took the click died) is ended by the taker after the next tick of any worker.
- **Its place in line** is kept current by the worker that posted it, in a task of its
  own fed by the queue's changes (:mod:`bot.runs.queue_places`), never on the heartbeat.
  After a restart the counts shown are left until each run starts.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import (
    RunRecord,
    RunResult,
    RunState,
    StopReason,
    StorageError,
    Timings,
    ended_by_person,
    strongest,
)
from agent_core.run.recording import record_ending
from agent_core.values.clock import utcnow
from agent_core.values.records import Checkpoint
from bot import messages
from bot.errors import BudgetNotRunning, SlackError
from bot.inbound.thread_history import read_thread
from bot.runs.queue_places import QueuePlaces, queued_snapshot
from bot.runs.resume_decision import settle_resume
from bot.views.status import render_status

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from agent_core import ChatMessage, ResumeSettings, ThreadKey
    from agent_core.values.records import StopRequestRecord
    from bot.access.trust import TrustGate
    from bot.observe.metrics import Metrics
    from bot.runs.supervisor import Supervisor
    from bot.slack_api.click_answer import ClickAnswer
    from bot.slack_api.identity import AppIdentity
    from bot.slack_api.surface import SlackSurface, Workspaces
    from bot.store_needs import RunQueueStore

__all__ = ["RunQueue", "history_of", "queued_result", "starting_conversation"]

log = structlog.get_logger("bot.runs.run_queue")


def starting_conversation(
    system_prompt: str, history: Sequence[ChatMessage], task: str
) -> tuple[ChatMessage, ...]:
    """The conversation a run starts from, as its turn-0 checkpoint stores it: what the
    loop would build (system prompt, the thread's history, the task), so a queued run
    resumed after losing its worker restores a whole conversation."""
    return (
        {"role": "system", "content": system_prompt},
        *history,
        {"role": "user", "content": task},
    )


def history_of(checkpoint: Checkpoint | None, task: str) -> list[ChatMessage]:
    """The thread history in a turn-0 checkpoint written by :func:`starting_conversation`
    (none if there is no such checkpoint)."""
    if checkpoint is None or checkpoint.turn != 0:
        return []
    conversation = list(checkpoint.messages)
    while conversation and conversation[0].get("role") == "system":
        conversation.pop(0)
    if conversation and conversation[-1] == {"role": "user", "content": task}:
        conversation.pop()
    return conversation


def queued_result(record: RunRecord, kind: StopReason, stopped_by: str, now: datetime) -> RunResult:
    """The ending of a run stopped (or aborted) while it waited: it never started."""
    return ended_by_person(
        record.id,
        kind,
        stopped_by,
        evidence=messages.QUEUED_NEVER_STARTED,
        next_step=messages.QUEUED_NEXT_STEP,
        turns=0,
        timings=Timings(record.created_at, now, now, now),
    )


class FinalWriter(Protocol):
    """Writes a stored run's terminal message (the worker's reconciler)."""

    async def post_final(
        self,
        record: RunRecord,
        now: datetime | None = None,
        *,
        answer: ClickAnswer | None = None,
    ) -> bool: ...


class EndedRuns(Protocol):
    """Settles the stop requests of a run that ended (the worker's stop watcher)."""

    async def run_ended(self, run_id: str) -> None: ...


class RunQueue:
    """This worker's side of the queue: it queues, takes, ends and re-counts."""

    def __init__(
        self,
        store: RunQueueStore,
        supervisor: Supervisor,
        workspaces: Workspaces,
        *,
        worker_id: str,
        me: AppIdentity,
        trust: TrustGate,
        lease_ttl_s: float,
        reconciler: FinalWriter,
        watcher: EndedRuns,
        policy: ResumeSettings,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._workspaces = workspaces
        self._worker_id = worker_id
        self._me = me
        self._trust = trust
        self._ttl = lease_ttl_s
        self._reconciler = reconciler
        self._watcher = watcher
        self._policy = policy
        self._metrics = metrics
        self.places = QueuePlaces(store, workspaces, post_final=reconciler.post_final)
        self._wake = asyncio.Event()
        self._ticked = False
        """The worker ticked since the taker last ended the runs stopped in the queue."""
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.places.start()
        self._task = asyncio.create_task(self._take_loop(), name="run-queue-taker")
        self.wake()  # runs left queued before this start

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=2.0)
            self._task = None
        await self.places.close()

    def wake(self) -> None:
        """Look for queued runs to take (coalesced: one look covers many wake-ups)."""
        self._wake.set()

    # -- queueing ----------------------------------------------------------------------

    async def enqueue(
        self,
        run_id: str,
        *,
        thread: ThreadKey,
        requester: str,
        task: str,
        history: Sequence[ChatMessage],
        surface: SlackSurface,
    ) -> bool:
        """Queue the run ``run_id``, accepted here: its status message, its starting
        conversation, then its row let go for any worker. True if it waits with its
        message; False if it was let go without one (a worker that takes it posts it),
        or had been already (this worker is shutting down)."""
        if not self._supervisor.queuing(run_id):
            return False
        try:
            ahead = await self._store.count_queued()
            rendered = render_status(queued_snapshot(run_id, requester, ahead))
            status_ts = await surface.budget.post_message(
                thread.channel,
                text=rendered.text,
                blocks=rendered.blocks,
                thread_ts=thread.thread_ts,
                metadata=rendered.metadata,
            )
        except (StorageError, SlackError, BudgetNotRunning) as exc:
            log.error("queue.status_post_failed", run_id=run_id, error=_error(exc))
            await self._let_go(run_id)
            return False
        try:
            prompt = self._supervisor.agent.config.system_prompt
            conversation = starting_conversation(prompt, history, task)
            # The checkpoint first: a worker that finds the run finds its conversation.
            await self._store.save_checkpoint(Checkpoint(run_id, 0, conversation))
            queued = await self._let_go(run_id, status_ts=status_ts)
        except StorageError:
            log.exception("queue.not_recorded", run_id=run_id)
            queued = False
        if not queued:
            # Taken meanwhile, or not let go (its lease then runs out and a reconciler
            # queues it): whoever starts it posts a message of its own.
            await _quietly_final(surface, thread.channel, status_ts, messages.QUEUED_ELSEWHERE)
            return False
        self.places.posted(run_id, thread, requester, status_ts, ahead)
        log.info("run.queued", run_id=run_id, ahead=ahead)
        self.wake()  # room may have freed here while we posted
        return True

    async def _let_go(self, run_id: str, *, status_ts: str | None = None) -> bool:
        """The accepted run ``run_id`` waits for any worker now; True if this call let it
        go (False: the database did not answer, or it was not ours any more)."""
        self._supervisor.hand_over(run_id)
        try:
            return await self._store.requeue_run(run_id, self._worker_id, status_ts=status_ts)
        except StorageError:
            log.exception("queue.not_let_go", run_id=run_id)
            return False

    # -- taking ------------------------------------------------------------------------

    async def _take_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.take()
                if self._ticked:
                    self._ticked = False
                    await self._end_stopped()  # writes their endings to Slack: not the tick's
            except Exception:
                # A database hiccup: the next wake-up or tick tries again.
                log.exception("queue.take_failed")

    async def take(self) -> int:
        """Start queued runs while there is room here; returns how many started."""
        started = 0
        while True:
            # The place is held until the run is launched: a resume starting meanwhile
            # (bot.workers.resume) cannot take it too.
            with self._supervisor.room() as held:
                if not held:
                    break
                record = await self._store.claim_queued(self._worker_id, self._ttl)
                if record is None:
                    break
                if await self._start(record):
                    started += 1
        return started

    async def _start(self, record: RunRecord) -> bool:
        self.places.left(record.id)
        surface = await self._workspaces.get(record.thread.team)
        history = await self._history(record, surface)
        # It continues in its queued status message, starting (not resuming).
        live = await self._supervisor.start_queued(record, history)
        if live is None:
            if await self._store.unclaim_run(record.id, self._worker_id):
                log.info("queue.given_back", run_id=record.id)
            return False
        log.info("run.dequeued", run_id=record.id, waited_s=_age_s(record))
        return True

    async def _history(self, record: RunRecord, surface: SlackSurface) -> list[ChatMessage]:
        """The thread's history as stored when the run was queued; read from Slack now
        if it never was (its accepting worker went away first)."""
        try:
            checkpoint = await self._store.latest_checkpoint(record.id)
        except StorageError:
            log.exception("queue.history_unreadable", run_id=record.id)
            return []
        if checkpoint is not None:
            return history_of(checkpoint, record.task)
        read = await read_thread(
            surface,
            record.thread,
            surface.me or self._me,
            self._trust,
            requester=record.requester,
            task=record.task,
        )
        return read.history

    # -- ending ------------------------------------------------------------------------

    async def end_queued(
        self,
        record: RunRecord,
        request: StopRequestRecord,
        *,
        now: datetime | None = None,
        answer: ClickAnswer | None = None,
    ) -> bool:
        """End a waiting run that a person stopped or aborted; True if this call did. Its
        final message goes first through the click's ``answer``, when it came from one.

        False when it was no longer waiting: a worker took it first, and the committed
        request reaches the run there as for any live run.
        """
        now = now or utcnow()
        result = queued_result(record, request.kind, request.requested_by, now)
        won = await record_ending(self._store, record.id, result, expected=[RunState.QUEUED])
        self.places.left(record.id)
        if not won:
            return False
        log.info("run.ended_in_queue", run_id=record.id, kind=request.kind.value)
        await self._watcher.run_ended(record.id)  # its requests handled, guidance undelivered
        fresh = await self._store.get_run(record.id)
        if fresh is not None:
            fresh = await settle_resume(
                self._store, fresh, self._policy, actor=self._worker_id, now=now
            )
            await self._reconciler.post_final(fresh, now, answer=answer)
        return True

    async def _end_stopped(self) -> None:
        """End the waiting runs whose stop was committed but whose ending was not
        written (the worker that took the click went away first)."""
        for record in await self._store.stopped_in_queue():
            pending = await self._store.pending_stop_requests([record.id])
            in_force = strongest(r for r in pending if r.kind.by_person)
            if in_force is not None:
                await self.end_queued(record, in_force)

    # -- the tick ----------------------------------------------------------------------

    async def tick(self) -> None:
        """On the worker's periodic tick: count the queue for ``/metrics``, and wake this
        worker's tasks to take what fits, end what was stopped and count its "n ahead"
        messages again. The tick itself writes nothing to Slack: it is the heartbeat's."""
        self._ticked = True
        self.wake()
        if self._metrics is not None:
            self._metrics.queue_counted(await self._store.count_queued())
        self.places.changed()


def _error(exc: Exception) -> str:
    if isinstance(exc, SlackError):
        return exc.error
    return "shutting down" if isinstance(exc, BudgetNotRunning) else "database error"


def _age_s(record: RunRecord) -> float:
    return round((utcnow() - record.created_at).total_seconds(), 3)


async def _quietly_final(surface: SlackSurface, channel: str, ts: str, text: str) -> None:
    """Replace a queued message that its run will not use (its buttons lead nowhere)."""
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if not await surface.budget.update_final(channel, ts, text=text, blocks=blocks):
        log.error("queue.message_not_replaced", ts=ts)
