"""Gives every run whose worker went away exactly one ending, and resumes what may resume.

Runs on start-up and then periodically, in every worker (docs/operations.md, Leases):

1. **Orphans.** A live run whose lease expired lost its worker (``kill -9``, a crash, a
   lost host). One its worker had only accepted (its row written before Slack's event
   was acknowledged, nothing run or shown yet: :func:`agent_core.values.records.is_accepted`)
   goes back in the queue, for any worker to run. Any other is ended by
   compare-and-set, so exactly one worker does it:
   ``blocked`` ("interrupted: the worker running this stopped"), or ``userinterlude`` if
   a person had asked to stop or abort it (their intent wins; never resume a
   user stop). Its Slack message is rewritten to say so.
2. **Resume.** A blocked run whose resume is not decided yet (its worker died before
   deciding, or this pass just ended it) is decided by the resume policy (docs/stopping.md,
   :func:`bot.runs.resume_decision.settle_resume`: ``AUTO_RESUME``, ``MAX_AUTO_RESUMES`` per thread,
   ``USER_EXIT_GRACE``; never a run a person stopped), and one due now (a shutdown, a
   lost worker) is resumed in place from its last checkpoint, with the request's spend the
   checkpoint carries. Later resumes (a rate
   limit's) and continuations (a full context) are started by :class:`bot.workers.resume.Resumes`.
3. **Undelivered finals.** A terminal run whose Slack message was never accepted (Slack
   was down) gets it re-rendered from the stored run and written again. A run with no
   stored status message (abandoned when its status post's fate was unknown) has its
   thread searched for a message tagged with its run id: one that landed after all
   still shows Stop/Abort, and gets the terminal view instead. After
   ``ABANDONED_LOOKUP_S`` without one, there is nothing to repair and the run is settled.
4. **Moot stop requests.** A request still pending for a run that has ended is marked
   handled (pending requests are never purged).
5. **Moot approvals.** A held call still ``requested`` whose run ended for good (no
   resume ahead: declined, cancelled, or an ending never resumed) is cancelled, and its
   approval message says so without buttons (:meth:`bot.approvals.desk.ApprovalDesk.close_ended`):
   as the run's ending is shown (:meth:`Reconciler.post_final`, whoever decided it), and
   in each pass for any left over.

Sub-agents (a ``delegate`` call's child runs) are stored with their parent, in its thread,
and hold no lease of their own: the parent's worker runs them, and they end before their
parent does. So they are never orphans, resumed or repaired on their own account: when
an orphaned run is ended, its live sub-agents (and theirs) are ended with it, with the
same reason; a sub-agent row left live under a run that has ended (its own terminal
write was lost) is ended by the next pass; a resumed run does not delegate again (the
``delegate`` call had started: the model reads that its effect is unknown); and a
sub-agent, which has no Slack message, has none to repair.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import (
    LIVE_STATES,
    TERMINAL_STATES,
    AuditEvent,
    EndedBecause,
    ResumeSettings,
    StorageError,
    record_elsewhere,
)
from agent_core.run.delegation import MAX_DEPTH
from agent_core.run.recording import record_ending
from agent_core.values.clock import utcnow
from agent_core.values.records import is_accepted
from bot.errors import SlackError, SlackRefused
from bot.runs.agent_session import SessionStatus, set_session_status
from bot.runs.resume_decision import due_at, ending_view, resume_in_place, settle_resume
from bot.views.status import StatusSnapshot, render_status, run_metadata
from bot.workers.orphan_results import orphan_result, stored_result
from bot.workers.resume import UNDECIDED_S

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable
    from contextlib import AbstractContextManager
    from datetime import datetime

    from agent_core.values.records import Checkpoint, RunRecord, StopRequestRecord
    from bot.slack_api.click_answer import ClickAnswer
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import ReconcilerStore

__all__ = ["Reconciler", "orphan_result", "stored_result"]

log = structlog.get_logger("bot.workers.reconciler")

FINAL_GRACE_S = 30.0
"""A terminal run's owner gets this long to post its own final message before we do."""
ABANDONED_LOOKUP_S = 600.0
"""How long after a run ends its status message, never stored, is still looked for."""
_CONTINUED_IN_A_NEW_RUN = (EndedBecause.CONTEXT_EXHAUSTED, EndedBecause.BUDGET_EXHAUSTED)
"""Endings whose resume is a new run in the thread (:class:`bot.workers.resume.Resumes`
starts it), never the run itself again."""


@dataclass(frozen=True, slots=True)
class _Ending:
    """An orphan this worker ended in the database, whose thread is still to be told."""

    record: RunRecord
    """As it was found, live."""
    final: RunRecord | None
    """As ended and decided, when its final message is still to be posted."""


async def _all(calls: Iterable[Awaitable[None]]) -> None:
    """Await ``calls`` together; a failure of one is logged and the others go on."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, asyncio.CancelledError):
            raise result
        if isinstance(result, BaseException):
            log.error("reconcile.slack_failed", error=f"{type(result).__name__}: {result}")


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    orphans_ended: int = 0
    resumed: int = 0
    finals_reposted: int = 0
    requeued: int = 0


class EndedApprovals(Protocol):
    """Closes the approvals of runs that ended for good
    (:class:`bot.approvals.desk.ApprovalDesk`)."""

    async def close_ended(self, run_id: str, run: RunRecord | None) -> int: ...

    async def close_all_ended(self) -> int: ...


class Reconciler:
    def __init__(
        self,
        store: ReconcilerStore,
        workspaces: Workspaces,
        *,
        worker_id: str,
        lease_ttl_s: float,
        resume: Callable[[RunRecord, Checkpoint | None], Awaitable[None]],
        is_local: Callable[[str], bool],
        policy: ResumeSettings | None = None,
        on_requeued: Callable[[], None] | None = None,
        room: Callable[[], AbstractContextManager[bool]] | None = None,
        approvals: EndedApprovals | None = None,
    ) -> None:
        self._store = store
        self._approvals = approvals
        """Closes the approvals of runs that ended for good (None: the app has none)."""
        self._workspaces = workspaces
        self._worker_id = worker_id
        self._ttl = lease_ttl_s
        self._resume = resume
        self._is_local = is_local
        self.policy = policy or ResumeSettings()
        """The resume policy's settings (``Settings.resume_settings``)."""
        self._room = room
        """Holds a place under ``MAX_LIVE_RUNS`` for a resume about to start here (the
        supervisor's :meth:`~bot.runs.supervisor.Supervisor.room`); None: no limit. A due
        resume with no room here is left to the schedule, for a worker with room."""
        self._on_requeued = on_requeued
        """Told each time a run goes back in the queue (by the worker: its taker looks at
        once, not once this pass's Slack writes, which wait on rate limits, are done)."""

    async def run_once(
        self, now: datetime | None = None, *, starting: bool = False
    ) -> ReconcileReport:
        now = now or utcnow()
        ended = resumed = 0
        orphans = await self._store.expired_runs(now)
        if starting:
            # Live runs leased to our worker id before we started belong to a previous
            # process with the same WORKER_ID (restarted after kill -9 or a crash). Their
            # leases may not have expired yet, and our heartbeat would renew them forever.
            expired = {r.id for r in orphans}
            mine = await self._store.live_runs(owner=self._worker_id)
            orphans += [r for r in mine if r.id not in expired]
        # Every orphan ended in the database first, then their messages, together: the
        # messages wait on Slack's rate limits, and no orphan's ending waits for another's
        # message. Both before any resume, which writes to the same status messages.
        endings: list[_Ending] = []
        requeued = 0
        for record in orphans:
            if self._is_local(record.id):
                continue  # ours and alive: the next heartbeat renews it
            if is_accepted(record):
                requeued += await self._requeue(record)
                continue
            ending = await self._end_in_store(record, now)
            if ending is not None:
                endings.append(ending)
        ended = len(endings)
        await _all(self._tell_slack(ending, now) for ending in endings)
        await self._end_stray_sub_agents(now)
        for record in await self._store.pending_resumes():
            if self._is_local(record.id):
                continue  # still ending here: its worker decides
            if await self._try_resume(record, now):
                resumed += 1
        reposted = await self._repost_finals(now)
        if settled := await self._settle_moot_requests():
            log.info("reconcile.requests_settled", count=settled)
        if self._approvals is not None and (closed := await self._approvals.close_all_ended()):
            log.info("reconcile.approvals_closed", count=closed)
        if ended or resumed or reposted or requeued:
            log.info(
                "reconcile.done",
                orphans_ended=ended,
                resumed=resumed,
                finals_reposted=reposted,
                requeued=requeued,
            )
        return ReconcileReport(ended, resumed, reposted, requeued)

    async def end_orphan(self, record: RunRecord, *, now: datetime | None = None) -> bool:
        """End a live run whose owner is gone, in the database and then in Slack (or, one
        only accepted, queue it again). True if this call is the one that ended it."""
        now = now or utcnow()
        if is_accepted(record):
            await self._requeue(record)
            return False
        ending = await self._end_in_store(record, now)
        if ending is None:
            return False
        await self._tell_slack(ending, now)
        return True

    async def _requeue(self, record: RunRecord) -> bool:
        """Queue again a run its worker accepted and went away before starting: the
        person was told it was received, and nothing of it ran or was shown. True if this
        call did (another worker may have first)."""
        assert record.owner is not None
        if not await self._store.requeue_run(record.id, record.owner):
            return False
        log.warning("run.requeued", run_id=record.id, previous_owner=record.owner)
        if self._on_requeued is not None:
            self._on_requeued()
        return True

    async def _end_in_store(self, record: RunRecord, now: datetime) -> _Ending | None:
        """The durable part of ending an orphan: the compare-and-set, its sub-agents, the
        audit event and the resume decision. None if another call ended it."""
        stops = await self._store.stop_requests_for(record.id)
        checkpoint = await self._store.latest_checkpoint(record.id)
        # A final already in Slack means the run finished and only its terminal write was
        # lost: its answer stands, and it is neither rewritten nor resumed.
        answered = record.final_posted_at is not None
        result = orphan_result(record, stops, checkpoint, now, answered=answered)
        won = await record_ending(self._store, record.id, result, owner=None, lease_expires_at=None)
        # Read again after the compare-and-set, whoever won it: a click that saw the run
        # live may have committed a request since, and then calls this to end it.
        await self._settle_if_ended(record.id)
        # Its sub-agents ran in the same worker: they are gone too, whoever won.
        await self._end_sub_agents(record, stops, now)
        if not won:
            return None
        record_elsewhere(
            "threadpilot.run_taken_over",
            record.trace_context,
            {"threadpilot.run.id": record.id, "threadpilot.run.owner": record.owner or ""},
            ended_because=result.ended_because,
        )
        await self._store.record_event(
            AuditEvent(
                run_id=record.id,
                kind="run.takeover",
                actor=self._worker_id,
                at=now,
                detail={"previous_owner": record.owner, "outcome": result.outcome.value},
            )
        )
        log.warning(
            "run.orphan_ended",
            run_id=record.id,
            previous_owner=record.owner,
            outcome=result.outcome.value,
        )
        fresh = await self._store.get_run(record.id)
        if fresh is not None:  # decided first: its one final message says if it resumes
            fresh = await settle_resume(
                self._store, fresh, self.policy, actor=self._worker_id, now=now
            )
        return _Ending(record, fresh if not answered else None)

    async def _tell_slack(self, ending: _Ending, now: datetime) -> None:
        """The thread's part: the final message (unless the answer is already there) and
        the agent session closed."""
        if ending.final is not None:
            await self.post_final(ending.final, now)
        await self._close_agent_session(ending.record)

    async def _close_agent_session(self, record: RunRecord) -> None:
        """Its worker left the thread's agent session ``processing``: nothing else would
        move it (Slack keeps it, and its stop button, for about an hour)."""
        thread = record.thread
        surface = await self._workspaces.get(thread.team)
        await set_session_status(
            surface, thread.channel, thread.thread_ts, SessionStatus.CLOSED, title=record.task
        )

    async def _end_sub_agents(
        self, record: RunRecord, stops: list[StopRequestRecord], now: datetime
    ) -> None:
        """End the live sub-agents of ``record`` (and theirs), a run that has ended: with
        its stop requests, so a person's stop ends them as the person's stop too."""
        live = await self._store.find_runs(
            states=LIVE_STATES, thread=record.thread, top_level=False, limit=1000
        )
        family = {record.id}
        for child in live:  # oldest first: a sub-agent comes after its parent
            if child.parent_id not in family:
                continue
            family.add(child.id)
            checkpoint = await self._store.latest_checkpoint(child.id)
            result = orphan_result(child, stops, checkpoint, now)
            handoff = replace(
                result.handoff, next_step=f"Its parent run {record.id} answers for it."
            )
            result = replace(result, handoff=handoff)
            if await record_ending(self._store, child.id, result):
                log.warning("run.sub_agent_ended", run_id=child.id, parent=record.id)

    async def _end_stray_sub_agents(self, now: datetime) -> None:
        """End the live sub-agents whose top-level run has ended without them (a sub-agent
        whose own terminal write was lost would otherwise stay live for good)."""
        live = await self._store.find_runs(states=LIVE_STATES, top_level=False, limit=1000)
        seen: set[str] = set()
        for child in live:
            root = await self._root_of(child)
            if root is None or root.id in seen or not root.state.is_terminal:
                continue
            seen.add(root.id)
            await self._end_sub_agents(root, await self._store.stop_requests_for(root.id), now)

    async def _root_of(self, record: RunRecord) -> RunRecord | None:
        """The top-level run a sub-agent belongs to (None if a row on the way is gone)."""
        for _ in range(MAX_DEPTH + 1):
            if record.parent_id is None:
                return record
            parent = await self._store.get_run(record.parent_id)
            if parent is None:
                return None
            record = parent
        return None

    async def _settle_if_ended(self, run_id: str) -> None:
        """Mark the run's pending stop requests handled if it has ended."""
        pending = await self._store.pending_stop_requests([run_id])
        if not pending:
            return
        record = await self._store.get_run(run_id)
        if record is not None and record.state.is_terminal:
            for request in pending:
                await self._store.mark_stop_handled(request.id)

    async def post_final(
        self,
        record: RunRecord,
        now: datetime | None = None,
        *,
        also: tuple[str, ...] = (),
        answer: ClickAnswer | None = None,
    ) -> bool:
        """Render the stored run's terminal message and write it to its status message
        (and to the messages ``also`` names: duplicates found by their metadata).

        ``answer``: a click on the status message made this ending; the message shows it
        at once through the click's ``response_url``, then the budget writes it as every
        final is written (that write is the one that stands, in the message's order).

        Then, if the run will not go on, its approvals still ``requested`` are closed (a
        pass catches them if this fails)."""
        if not record.state.is_terminal:
            return False
        delivered = record.status_ts is not None and await self._write_final(
            record, now, also=also, answer=answer
        )
        if self._approvals is not None:
            try:
                await self._approvals.close_ended(record.id, record)
            except StorageError:
                log.exception("reconcile.approvals_not_closed", run_id=record.id)
        return delivered

    async def _write_final(
        self,
        record: RunRecord,
        now: datetime | None,
        *,
        also: tuple[str, ...],
        answer: ClickAnswer | None,
    ) -> bool:
        assert record.status_ts is not None
        result = stored_result(record)
        rendered = render_status(
            StatusSnapshot(
                run_id=record.id,
                requester=record.requester,
                phase="done",
                result=result,
                ending=ending_view(record),
                spent=result.spent if result is not None else None,
            )
        )
        if answer is not None:
            await answer(rendered.text, rendered.blocks)
        surface = await self._workspaces.get(record.thread.team)
        delivered = True
        for ts in (record.status_ts, *also):
            delivered &= await surface.budget.update_final(
                record.thread.channel, ts, text=rendered.text, blocks=rendered.blocks
            )
        if delivered:
            await self._store.update_run(record.id, final_posted_at=now or utcnow())
        return delivered

    async def _try_resume(self, record: RunRecord, now: datetime) -> bool:
        """Decide a run left undecided by the policy (one that ended just now is its own
        worker's to decide; an orphan is decided as it is ended), and resume in place one
        due now. A continuation (``context_exhausted``, or a Continue after
        ``budget_exhausted``) is left to :class:`bot.workers.resume.Resumes`."""
        if record.resume is None:
            if record.updated_at > now - timedelta(seconds=UNDECIDED_S):
                return False
            record = await settle_resume(
                self._store, record, self.policy, actor=self._worker_id, now=now
            )
            await self.post_final(record, now)  # says why it will not resume, or when
        at = due_at(record)
        if at is None or at > now or record.ended_because in _CONTINUED_IN_A_NEW_RUN:
            return False
        with self._room() if self._room is not None else contextlib.nullcontext(True) as held:
            if not held:
                return False  # it waits for room: here, or any worker's
            if not await resume_in_place(
                self._store, record, worker_id=self._worker_id, lease_ttl_s=self._ttl, now=now
            ):
                return False
            await self._resume(record, await self._store.latest_checkpoint(record.id))
        return True

    async def _settle_moot_requests(self) -> int:
        """Mark handled the pending stop requests of runs that have ended elsewhere.

        The owner marks its run's requests when the run ends, but a click committed just
        after that (the clicking worker read the run while it was still live), or an owner
        killed between its terminal write and that marking, leaves one pending for good.
        """
        settled = 0
        for request in await self._store.pending_stop_requests():
            if self._is_local(request.run_id):
                continue  # its owner marks it when the run ends
            record = await self._store.get_run(request.run_id)
            if record is not None and record.state.is_terminal:
                settled += await self._store.mark_stop_handled(request.id)
        return settled

    async def _repost_finals(self, now: datetime) -> int:
        reposted = 0
        cutoff = now - timedelta(seconds=FINAL_GRACE_S)
        unposted = await self._store.find_runs(
            states=TERMINAL_STATES, final_posted=False, top_level=True
        )
        for record in unposted:
            # Resumable runs were resumed earlier in this pass; what is left here can no
            # longer resume (limit reached, or a person stopped it) and needs its message.
            if record.updated_at > cutoff or self._is_local(record.id):
                continue
            also: tuple[str, ...] = ()
            if record.status_ts is None:
                found = await self._find_status_messages(record, now)
                if not found:
                    continue
                record = replace(record, status_ts=found[0])
                await self._store.update_run(record.id, status_ts=found[0])
                also = tuple(found[1:])
            if await self.post_final(record, now, also=also):
                reposted += 1
        return reposted

    async def _find_status_messages(self, record: RunRecord, now: datetime) -> list[str]:
        """The ts of the run's messages in its thread, found by their metadata.

        For a run whose status post never returned a ts: it may have landed anyway, and
        then shows Stop/Abort for a run that has ended. Nothing found (or the thread is
        refused to us) after ABANDONED_LOOKUP_S: settled, there is nothing to repair.
        """
        thread = record.thread
        surface = await self._workspaces.get(thread.team)
        gone = False
        try:
            found = await surface.budget.find_messages(
                thread.channel, thread.thread_ts, run_metadata(record.id)
            )
        except SlackRefused as exc:  # the thread is deleted or closed to the app
            log.warning("reconcile.thread_unreadable", run_id=record.id, error=exc.error)
            found, gone = [], True
        except SlackError as exc:
            log.warning("reconcile.lookup_failed", run_id=record.id, error=exc.error)
            return []  # try again next pass
        window_over = record.updated_at <= now - timedelta(seconds=ABANDONED_LOOKUP_S)
        if not found and (gone or window_over):
            # final_posted_at closes the case: no message of this run will turn up.
            await self._store.update_run(record.id, final_posted_at=now)
            log.info("reconcile.no_status_message", run_id=record.id)
        return found
