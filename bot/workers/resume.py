"""The resume schedule: starting a run that ended, when that respects what happened
(docs/stopping.md).

**Deciding** (:mod:`bot.runs.resume_decision`). When a run ends, :func:`settle_resume` asks
the pure policy (:func:`agent_core.decide_resume`: ``AUTO_RESUME``, ``MAX_AUTO_RESUMES``,
``USER_EXIT_GRACE``) and stores the answer on the run by compare-and-set, so exactly one
worker decides: ``scheduled`` at ``resume_at`` (a rate limit after its Retry-After or a
backoff; a shutdown, a lost worker or a full context now), or ``declined``. The decision is
logged with its reason ("Session ended by user, not auto-resuming") and written as an audit
event (``resume.scheduled`` / ``resume.declined``). The run's owner decides before it writes
its final message, which says why the run ended and when it resumes; a run whose owner died
first is decided by any worker (:class:`Resumes`, the reconciler).

**Starting.** The database is the schedule. Every worker's :class:`Resumes` keeps a timer
for the soonest due resume, woken early when this worker schedules one or a person
presses ``Resume now``, and re-reads the schedule every few seconds for what other
workers decided; whichever worker gets there first starts a due resume by
compare-and-set:

- in place (``rate_limit``, ``shutdown``, ``worker_lost``; :func:`resume_in_place`): the
  run is live again under this worker, from its last checkpoint, in its own status
  message;
- as a continuation (``context_exhausted``): the resume is *claimed* (held like a run's
  lease, renewed while the summary is written), the checkpointed conversation is
  summarised (:class:`agent_core.Compaction`, one request of its own), and a new run in
  the same thread starts from the summary, linked to the old one (``continued_from``):
  the resume's ``started`` and the new run's row are one transaction
  (:meth:`agent_core.ports.ResumeStore.start_continuation`), so a worker lost between
  them leaves the resume due, never ``started`` with no run.

**Room.** A resume takes room like a new run: it starts only on a worker under
``MAX_LIVE_RUNS`` whose event loop is not busy (:meth:`bot.runs.supervisor.Supervisor.hold_room`,
held from before its compare-and-set until the run is launched; for a continuation, while
its summary is written too). Otherwise it stays due in the schedule, and the worker looks
again when room frees here (a run ends, or the loop is calm) or at its next poll, so
after a restart the due resumes spread over the workers that have room instead of one
worker taking them all.

A worker killed at any moment loses nothing: a scheduled resume waits in the database for
whoever is up at its time; a claim whose lease ran out is taken over; a continuation is
started with its row or not at all; a run resumed in place is an orphan like any other,
reconciled as ``worker_lost`` and decided again.

**People.** ``Resume now`` brings a scheduled resume forward; ``Don't resume`` cancels
it; a Stop on a run whose resume is scheduled cancels it too (and counts as a person's
stop for ``USER_EXIT_GRACE``). All three come through the stop service (:mod:`bot.stopping.stops`),
which calls :meth:`Resumes.hurry` and :meth:`Resumes.cancel`. A summary being written for
a cancelled resume is stopped: at once on this worker, at its next check on another.

**Continue.** A run that spent its budget (``budget_exhausted``) is declined, never
resumed on its own; a person's ``Continue`` (through the stop service,
:meth:`Resumes.continue_budget`) schedules it, now, once, with who pressed it
(``resume_by``). Whichever worker starts it makes a new run in the thread from the run's
checkpoint (``continued_from``), with one more budget of the same size (started, as a
summary's continuation is, in one transaction with its row).

**The request's spend.** Automatic resumes and continuations carry what the request has
spent (:class:`agent_core.Spent`, stored in the ended run's result, :func:`spent_of`; for
a lost worker's run, the reconciler's result takes it from the last checkpoint), so one
request has one budget; ``Continue`` starts from zero (one more budget).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agent_core import (
    AuditEvent,
    Compacted,
    Compaction,
    CompactionFailed,
    CompactionStopped,
    EndedBecause,
    RunResult,
    StopReason,
    StopSource,
    StorageError,
    window_from_error,
)
from agent_core.run.compaction import DEFAULT_SUMMARY_WINDOW
from agent_core.values.clock import utcnow
from agent_core.values.records import ResumeState
from bot import messages
from bot.runs.resume_decision import (
    due_at,
    ending_view,
    resume_in_place,
    settle_resume,
    stored_ended_because,
    thread_moved_on,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from datetime import datetime

    from agent_core import (
        Agent,
        Checkpoint,
        CompactionOutcome,
        ResumeSettings,
        Run,
        ThreadKey,
    )
    from agent_core.values.records import RunRecord
    from bot.store_needs import ResumeSchedule
    from bot.views.status import EndingView

__all__ = ["Resumes", "RunsHere"]

log = structlog.get_logger("bot.workers.resume")

POLL_S = 2.0
"""How often the schedule is re-read for resumes other workers decided."""
UNDECIDED_S = 10.0
"""A run that ended undecided is its own worker's to decide for this long (it decides as
it writes its final message); after that any worker does (that worker died meanwhile)."""
CHECK_S = 0.5
"""While a summary is written, how often its claim is checked (a person may cancel it on
another worker)."""
_CLOSE_S = 5.0
_AHEAD = (ResumeState.SCHEDULED, ResumeState.CLAIMED)


class _Start:
    """Starts a resume as its continuation's run, both in one transaction
    (:meth:`agent_core.ports.ResumeStore.start_continuation`); remembers the answer
    (None: never called, so nothing was written)."""

    def __init__(self, store: ResumeSchedule, run_id: str, **cas: Any) -> None:
        self._store = store
        self._run_id = run_id
        self._cas = cas
        self.won: bool | None = None

    async def __call__(self, continuation: RunRecord) -> bool:
        self.won = await self._store.start_continuation(self._run_id, continuation, **self._cas)
        return self.won


class _LiveHere(Protocol):
    @property
    def run(self) -> Run: ...


class RunsHere(Protocol):
    """What the schedule asks of this process's runs (its
    :class:`bot.runs.supervisor.Supervisor`)."""

    @property
    def agent(self) -> Agent: ...

    @property
    def accepting(self) -> bool: ...

    def get(self, run_id: str) -> _LiveHere | None: ...

    def live_in_thread(self, thread: ThreadKey) -> _LiveHere | None: ...

    def hold_room(self) -> bool: ...

    def free_room(self) -> None: ...

    async def continue_run(
        self,
        previous: RunRecord,
        compacted: Compacted,
        run_id: str,
        start: Callable[[RunRecord], Awaitable[bool]],
    ) -> _LiveHere | None: ...

    async def continue_with_budget(
        self,
        previous: RunRecord,
        checkpoint: Checkpoint | None,
        run_id: str,
        start: Callable[[RunRecord], Awaitable[bool]],
    ) -> _LiveHere | None: ...


class Resumes:
    """This worker's side of the schedule: decides runs as they end here, starts due
    resumes (any worker's decision), and writes summaries to continue from."""

    def __init__(
        self,
        store: ResumeSchedule,
        supervisor: RunsHere,
        policy: ResumeSettings,
        *,
        worker_id: str,
        lease_ttl_s: float,
        resume: Callable[[RunRecord, Checkpoint | None], Awaitable[None]],
        show: Callable[[RunRecord], Awaitable[bool]],
        poll_s: float = POLL_S,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self.policy = policy
        self._worker_id = worker_id
        self._ttl = lease_ttl_s
        self._resume = resume
        self._show = show
        self._poll_s = poll_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._continuing: dict[str, asyncio.Task[None]] = {}
        """Summaries being written here, by the run they continue."""
        self._compactions: dict[str, Compaction] = {}
        self._waiting: set[str] = set()
        """Due resumes found here with no room: logged once each."""

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="resume-schedule")

    async def close(self) -> None:
        """Stop the timer; summaries being written are stopped (a shutdown) and their
        resumes given back, for another worker to continue."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=_CLOSE_S)
            self._task = None
        for compaction in list(self._compactions.values()):
            compaction.request_stop(
                StopReason.SHUTDOWN, "system:shutdown", source=StopSource.SIGNAL
            )
        tasks = list(self._continuing.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_CLOSE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=_CLOSE_S)

    def wake(self) -> None:
        """Look at the schedule now (something was scheduled or brought forward here)."""
        self._wake.set()

    # -- the run-end hook --------------------------------------------------------------

    async def on_run_end(self, record: RunRecord) -> EndingView | None:
        """Decide the run that just ended here (``record``: its row, read since it
        ended); what its final message says about it. None while the row is not terminal
        (nothing is decided then), and (the run left to be decided later) if the database
        cannot say."""
        try:
            record = await settle_resume(
                self._store, record, self.policy, actor=self._worker_id, now=utcnow()
            )
        except StorageError:
            log.exception("resume.not_decided", run_id=record.id)
            return None
        return ending_view(record)

    # -- people (through the stop service) --------------------------------------------

    async def hurry(self, record: RunRecord, user: str) -> bool:
        """``Resume now``: a scheduled resume is due at once. False if none is scheduled."""
        now = utcnow()
        at = min(record.resume_at or now, now)
        won = await self._store.set_resume(
            record.id,
            ResumeState.SCHEDULED,
            expected=[ResumeState.SCHEDULED],
            resume_at=at,
            resume_by=user,
        )
        if won:
            self.wake()
        return won

    async def cancel(self, record: RunRecord, user: str) -> bool:
        """``Don't resume``, or a Stop: the scheduled (or claimed) resume is off, and a
        summary being written here for it stops at once. False if none was ahead."""
        won = await self._store.set_resume(
            record.id,
            ResumeState.CANCELLED,
            expected=_AHEAD,
            resume_by=user,
            resume_at=None,
            owner=None,
            lease_expires_at=None,
        )
        if won and (compaction := self._compactions.get(record.id)) is not None:
            compaction.request_stop(StopReason.STOP, user, source=StopSource.RESUME)
        return won

    async def superseded(self, record: RunRecord) -> bool:
        """True if a newer run has ``record``'s thread (live here, or started anywhere
        since): continuing it would put an old task back over the newer one."""
        return self._busy(record) or await thread_moved_on(self._store, record)

    async def continue_budget(self, record: RunRecord, user: str, *, limit: int | None) -> bool:
        """``Continue`` on a run that spent its budget: its continuation, with one more
        budget, is due now (any worker's schedule starts it), unless its requester has
        ``limit`` requests counted already (``MAX_RUNS_PER_USER``; a Continue not started
        yet counts too). False if not written: the person is full, or it was continued
        already (exactly one press wins)."""
        won = await self._store.admit_continuation(record.id, user, at=utcnow(), limit=limit)
        if won:
            self.wake()
        return won

    def stop_summary(self, thread_run_id: str, kind: StopReason, user: str) -> bool:
        """Stop the summary being written here to continue ``thread_run_id``, if any."""
        compaction = self._compactions.get(thread_run_id)
        return compaction is not None and compaction.request_stop(
            kind, user, source=StopSource.RESUME
        )

    # -- the schedule ------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                wait_s = await self.run_pending()
            except Exception:
                log.exception("resume.schedule_failed")  # the database, briefly: try again
                wait_s = self._poll_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()

    async def run_pending(self, now: datetime | None = None) -> float:
        """Decide what is left undecided, start what is due; seconds until the next look."""
        now = now or utcnow()
        next_at = now + timedelta(seconds=self._poll_s)
        if not self._supervisor.accepting:
            return self._poll_s
        pending = await self._store.pending_resumes()
        self._waiting &= {r.id for r in pending}
        for record in pending:
            if self._supervisor.get(record.id) is not None or record.id in self._continuing:
                continue  # still ending here, or being continued here
            if record.resume is None:
                undecided_until = record.updated_at + timedelta(seconds=UNDECIDED_S)
                if undecided_until > now:
                    next_at = min(next_at, undecided_until)
                    continue
                record = await settle_resume(
                    self._store, record, self.policy, actor=self._worker_id, now=now
                )
                await self._show(record)
            at = due_at(record)
            if at is None:
                continue
            if at > now:
                next_at = min(next_at, at)
                continue
            await self._start(record, now)
        return max(0.0, (next_at - now).total_seconds())

    async def _start(self, record: RunRecord, now: datetime) -> None:
        if await thread_moved_on(self._store, record) or self._busy(record):
            if await self._store.set_resume(
                record.id,
                ResumeState.DECLINED,
                expected=_AHEAD,
                due_by=now,
                resume_reason=messages.RESUME_MOVED_ON,
                resume_at=None,
            ):
                log.info("resume.declined", run_id=record.id, reason=messages.RESUME_MOVED_ON)
                await self._show_stored(record.id)
            return
        if not self._supervisor.hold_room():
            if record.id not in self._waiting:
                self._waiting.add(record.id)
                log.info("resume.waits_for_room", run_id=record.id)
            return
        self._waiting.discard(record.id)
        if stored_ended_because(record) is EndedBecause.CONTEXT_EXHAUSTED:
            await self._claim_and_continue(record, now)  # holds the room until it starts
            return
        try:
            if stored_ended_because(record) is EndedBecause.BUDGET_EXHAUSTED:
                await self._continue_with_budget(record, now)  # a person pressed Continue
            elif await resume_in_place(
                self._store, record, worker_id=self._worker_id, lease_ttl_s=self._ttl, now=now
            ):
                await self._resume(record, await self._store.latest_checkpoint(record.id))
        finally:
            self._supervisor.free_room()  # the run counts itself once launched

    def _busy(self, record: RunRecord) -> bool:
        live = self._supervisor.live_in_thread(record.thread)
        return live is not None and live.run.id != record.id

    async def _show_stored(self, run_id: str) -> None:
        record = await self._store.get_run(run_id)
        if record is not None:
            await self._show(record)

    # -- continuing from a summary -----------------------------------------------------

    async def _claim_and_continue(self, record: RunRecord, now: datetime) -> None:
        """Claim the continuation and write its summary in a task of its own, in the room
        held for it (given back when the task ends, or here if it never starts)."""
        try:
            claimed = await self._store.set_resume(
                record.id,
                ResumeState.CLAIMED,
                expected=_AHEAD,
                due_by=now,
                owner=self._worker_id,
                lease_expires_at=now + timedelta(seconds=self._ttl),
            )
        except BaseException:
            self._supervisor.free_room()
            raise
        if not claimed:
            self._supervisor.free_room()
            return
        log.info("resume.claimed", run_id=record.id)
        task = asyncio.create_task(self._continue(record), name=f"continue:{record.id}")
        self._continuing[record.id] = task
        task.add_done_callback(lambda _: self._continued(record.id))

    def _continued(self, run_id: str) -> None:
        """The task continuing ``run_id`` is done (even cancelled before it began): its
        room is given back; the continuation, if it started, counts itself."""
        self._continuing.pop(run_id, None)
        self._supervisor.free_room()

    async def _continue(self, record: RunRecord) -> None:
        run_id = uuid.uuid4().hex
        try:
            outcome = await self._summarise(record, run_id)
            await self._after_summary(record, run_id, outcome)
        except Exception:
            # The database, or a bug: the claim runs out and a worker tries again.
            log.exception("resume.continuation_failed", run_id=record.id)
        finally:
            self._compactions.pop(record.id, None)

    async def _summarise(self, record: RunRecord, run_id: str) -> CompactionOutcome | None:
        """The one summary request, stopped if the claim is lost; None if there is no
        conversation to summarise."""
        checkpoint = await self._store.latest_checkpoint(record.id)
        if checkpoint is None:
            return None
        agent = self._supervisor.agent
        error = RunResult.from_dict(record.result).error if record.result else None
        window = agent.config.context_window or window_from_error(error) or DEFAULT_SUMMARY_WINDOW
        compaction = Compaction(
            agent.model, checkpoint.messages, compaction_id=run_id, context_window=window
        )
        self._compactions[record.id] = compaction
        summary = asyncio.create_task(compaction.run(), name=f"summary:{record.id}")
        try:
            await self._hold_claim(record, compaction, summary)
            return await summary
        finally:
            if not summary.done():  # cancelled from outside: end the request with us
                summary.cancel()
                await asyncio.wait([summary], timeout=_CLOSE_S)

    async def _hold_claim(
        self, record: RunRecord, compaction: Compaction, summary: asyncio.Task[Any]
    ) -> None:
        """Until the summary is written: renew the claim, and stop the summary if a person
        cancelled the resume (on any worker) or another worker took the claim."""
        renew_every = timedelta(seconds=self._ttl / 3)
        renewed = utcnow()
        while not summary.done():
            await asyncio.wait([summary], timeout=CHECK_S)
            if summary.done():
                return
            now = utcnow()
            held = await self._store.get_run(record.id)
            if now - renewed >= renew_every and held is not None:
                renewed = now
                await self._store.set_resume(
                    record.id,
                    ResumeState.CLAIMED,
                    expected=[ResumeState.CLAIMED],
                    claimed_by=self._worker_id,
                    lease_expires_at=now + timedelta(seconds=self._ttl),
                )
            if (
                held is None
                or held.resume is not ResumeState.CLAIMED
                or (held.owner != self._worker_id)
            ):
                who = held.resume_by if held is not None and held.resume_by else "system:claim"
                compaction.request_stop(StopReason.STOP, who, source=StopSource.RESUME)

    async def _after_summary(
        self, record: RunRecord, run_id: str, outcome: CompactionOutcome | None
    ) -> None:
        match outcome:
            case Compacted() as compacted:
                await self._start_continuation(record, run_id, compacted)
            case CompactionStopped(request=request) if request.reason is StopReason.SHUTDOWN:
                await self._give_back(record)
            case CompactionStopped():
                log.info("resume.summary_stopped", run_id=record.id)
            case CompactionFailed(error=error):
                await self._release(record, messages.resume_summary_failed(error))
            case None:
                await self._release(record, messages.RESUME_NOTHING_CHECKPOINTED)

    async def _start_continuation(
        self, record: RunRecord, run_id: str, compacted: Compacted
    ) -> None:
        if not self._supervisor.accepting:
            await self._give_back(record)
            return
        if self._busy(record) or await thread_moved_on(self._store, record):
            await self._release(record, messages.RESUME_MOVED_ON)
            return
        start = _Start(
            self._store,
            record.id,
            expected=[ResumeState.CLAIMED],
            claimed_by=self._worker_id,
            owner=None,
            lease_expires_at=None,
        )
        live = await self._supervisor.continue_run(record, compacted, run_id, start)
        if live is None:
            if start.won is None:  # the thread was taken, or we began shutting down, just now
                await self._give_back(record)
            else:
                log.info("resume.summary_discarded", run_id=record.id)  # cancelled meanwhile
            return
        detail = {"continuation": run_id, "summary_chars": len(compacted.summary)}
        detail["left_out"] = compacted.left_out
        await self._store.record_event(
            AuditEvent(record.id, "run.continued", self._worker_id, detail=detail)
        )
        log.info("run.continued", run_id=record.id, **detail)
        await self._show_stored(record.id)

    # -- Continue: one more budget ----------------------------------------------------

    async def _continue_with_budget(self, record: RunRecord, now: datetime) -> None:
        """Start the continuation a person asked for (``Continue``): a new run in the
        thread from ``record``'s checkpoint, with one more budget."""
        if not self._supervisor.accepting:
            return
        run_id = uuid.uuid4().hex
        checkpoint = await self._store.latest_checkpoint(record.id)
        start = _Start(self._store, record.id, expected=[ResumeState.SCHEDULED], due_by=now)
        live = await self._supervisor.continue_with_budget(record, checkpoint, run_id, start)
        if live is None:
            # Another worker started it, or (nothing written) the thread was taken or we
            # began shutting down, just now: it stays due.
            return
        detail = {
            "continuation": run_id,
            "from_turn": checkpoint.turn if checkpoint else 0,
            "by": record.resume_by,
            "budget": "one more",
        }
        await self._store.record_event(
            AuditEvent(record.id, "run.continued", self._worker_id, detail=detail)
        )
        log.info("run.continued", run_id=record.id, **detail)
        await self._show_stored(record.id)

    async def _give_back(self, record: RunRecord) -> None:
        """A shutdown stopped the summary: the resume is due again, for another worker."""
        await self._store.set_resume(
            record.id,
            ResumeState.SCHEDULED,
            expected=[ResumeState.CLAIMED],
            claimed_by=self._worker_id,
            resume_at=utcnow(),
            owner=None,
            lease_expires_at=None,
        )

    async def _release(self, record: RunRecord, reason: str) -> None:
        if await self._store.set_resume(
            record.id,
            ResumeState.DECLINED,
            expected=[ResumeState.CLAIMED],
            claimed_by=self._worker_id,
            resume_reason=reason,
            resume_at=None,
            owner=None,
            lease_expires_at=None,
        ):
            log.info("resume.declined", run_id=record.id, reason=reason)
            await self._store.record_event(
                AuditEvent(record.id, "resume.declined", self._worker_id, detail={"reason": reason})
            )
            await self._show_stored(record.id)
