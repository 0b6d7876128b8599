"""The Slack side of approvals: where a held tool call waits for Approve or Deny.

:class:`ApprovalDesk` is the app's :class:`agent_core.Approvals` port. For each held call
(:mod:`agent_core.values.approvals`) it commits an ``approvals`` row, posts one approval message
in the run's thread (the tool, its arguments as far as a section holds them, Approve and
Deny) and waits. A decision reaches the waiting call two ways, whichever comes first:

- the click was taken by this worker: :meth:`ApprovalDesk.decided` hands it over at once
  (after the click's commit);
- it was taken by another worker: the commit woke this worker's stop watcher (NOTIFY on
  PostgreSQL, the poll on SQLite), whose scan calls :meth:`ApprovalDesk.deliver`, which
  reads the rows of the calls waiting here.

The row is the truth: the first decision committed wins, whoever makes it (a click, the
timeout, a Stop). A run resumed after a shutdown or a lost worker asks again for the same
call (the checkpointed reply's call, not a new model turn: :mod:`agent_core.run.step_log`); it
finds the approval it had not taken yet (by the call's id) and waits on that row and its
message, so a click made meanwhile counts. An approval is used only by the call it was
asked for, never by a later identical one. A sub-agent's calls wait here too, stored
under the sub-agent's run id (the stop watcher asks :meth:`ApprovalDesk.waits_for`).

An approval counts only while its run may still take it (:func:`still_counts`): the run
is live, or it ended in a way that is resumed and its resume is still ahead or undecided.
Once a run's ending is decided for good (its resume declined, cancelled or started as a
new run, or an ending that never resumes) with calls still ``requested``,
:meth:`ApprovalDesk.close_ended` cancels them (compare-and-set: a racing click wins or
loses cleanly) and their messages say the call was not run because the run ended, with
no buttons. The reconciler does it for every worker's runs: as it shows a run's ending,
and in each pass for any left over (:meth:`ApprovalDesk.close_all_ended`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalStatus,
    AuditEvent,
    EndedBecause,
    StorageError,
)
from agent_core.values.clock import utcnow
from agent_core.values.records import ResumeState
from bot.errors import BudgetNotRunning, SlackError
from bot.views.approval import NotRun, approval_metadata, render_approval

if TYPE_CHECKING:
    from collections.abc import Collection

    from agent_core import ApprovalRequest, RunRecord
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import ApprovalDeskStore

__all__ = ["ApprovalDesk", "ApprovalMetrics", "decision_of", "still_counts"]

log = structlog.get_logger("bot.approvals.desk")

_RESUMED = frozenset({EndedBecause.SHUTDOWN, EndedBecause.WORKER_LOST})
"""Endings resumed in place: the resumed run waits on the same approvals."""
_STILL_AHEAD = frozenset({None, ResumeState.SCHEDULED, ResumeState.CLAIMED})
"""Resume decisions that leave the resume ahead (or not decided yet)."""


class ApprovalMetrics(Protocol):
    """What ``/metrics`` counts of approvals (:class:`bot.observe.metrics.Metrics`)."""

    def approval_decided(self, status: str, waited_s: float) -> None: ...


def still_counts(run: RunRecord | None) -> bool:
    """True while a decision on one of ``run``'s approvals may still be taken by a run:
    it is live, or it is a top-level run that ended in a way that is resumed in place (a
    shutdown, a lost worker) and its resume is still ahead or not decided yet."""
    if run is None:
        return False
    if not run.state.is_terminal:
        return True
    if run.parent_id is not None:
        return False  # a sub-agent is never resumed on its own: its resumed parent delegates anew
    return run.ended_because in _RESUMED and run.resume in _STILL_AHEAD


def decision_of(record: ApprovalRecord) -> ApprovalDecision:
    """The decision a decided row holds, as the run reads it (``<@U…>`` for a person)."""
    by = f"<@{record.decided_by}>" if record.decided_by else None
    return ApprovalDecision(record.status, by)


def _asked_for(earlier: ApprovalRecord, request: ApprovalRequest) -> bool:
    """Whether ``earlier`` (not taken yet) was asked for the call ``request`` holds.

    By the call's id. A resumed run whose model turn was asked again (no checkpointed
    reply: its calls have new ids) finds a request still ``requested`` by the same tool
    and arguments: nobody has said yes to it, so waiting on it gives nothing away; a
    decided one is never taken by another call."""
    if earlier.call_id == request.call_id:
        return True
    same = (earlier.tool, earlier.arguments) == (request.tool, request.arguments)
    return same and earlier.status is ApprovalStatus.REQUESTED


class ApprovalDesk:
    """Holds this worker's waiting calls until their approval is decided."""

    def __init__(
        self,
        store: ApprovalDeskStore,
        workspaces: Workspaces,
        *,
        metrics: ApprovalMetrics | None = None,
    ) -> None:
        self._store = store
        self._workspaces = workspaces
        self._metrics = metrics
        self._waiting: dict[str, tuple[ApprovalRecord, asyncio.Future[ApprovalDecision]]] = {}
        """Calls waiting here, by approval id."""
        self._ids: dict[str, str] = {}
        """The approval each held call waits on, by the call's request id (a resumed run's
        call waits on the approval its first life asked for)."""

    # -- the port (agent_core.Approvals) -------------------------------------------------

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        record = await self._open(request)
        reused = record.id != request.id
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._ids[request.id] = record.id
        self._waiting[record.id] = (record, future)
        try:
            if record.status.terminal:  # decided while the run was away (a resume)
                self._hand_over(record)
            elif record.message_ts is None:
                await self._post(record, reused=reused)
            decision = await future
        finally:
            self._waiting.pop(record.id, None)
        self._ids.pop(request.id, None)
        await self._taken(record.id)
        return decision

    async def settle(self, request: ApprovalRequest, status: ApprovalStatus) -> ApprovalDecision:
        approval_id = self._ids.pop(request.id, request.id)
        moved = await self._store.decide_approval(approval_id, status)
        record = await self._store.get_approval(approval_id)
        if record is None:  # never committed (the database failed as it was asked)
            return ApprovalDecision(status)
        if moved:
            await self.show(record)
            await self.audit(record, actor="threadpilot")
        elif status is ApprovalStatus.CANCELLED and record.status is ApprovalStatus.APPROVED:
            # Approved, but the Stop reached the call first: it is not run (the gate's
            # rule), and the message must not say it runs.
            log.info("approval.not_run", approval_id=record.id, run_id=record.run_id)
            await self.show(record, not_run=NotRun.STOPPED)
        await self._taken(record.id)
        return decision_of(record)

    # -- decisions made elsewhere --------------------------------------------------------

    def decided(self, record: ApprovalRecord) -> bool:
        """A decision committed by this worker's click: hand it to the call waiting here,
        if one is. True if one was."""
        return self._hand_over(record)

    def waiting_here(self, approval_id: str) -> bool:
        return approval_id in self._waiting

    def waits_for(self, run_id: str) -> bool:
        """True if a call of ``run_id`` waits here (a sub-agent's run, which the stop
        watcher does not know: the parent is the supervisor's)."""
        return any(record.run_id == run_id for record, _ in self._waiting.values())

    async def deliver(self, run_ids: Collection[str] | None = None) -> int:
        """Hand over the decisions committed elsewhere for calls waiting here (the stop
        watcher's scan), of ``run_ids`` or (None) of every run; how many."""
        wanted = None if run_ids is None else set(run_ids)
        delivered = 0
        for record, _ in list(self._waiting.values()):
            if wanted is not None and record.run_id not in wanted:
                continue
            stored = await self._store.get_approval(record.id)
            if stored is not None and stored.status.terminal and self._hand_over(stored):
                delivered += 1
        return delivered

    # -- runs that ended for good ----------------------------------------------------------

    async def close_ended(self, run_id: str, run: RunRecord | None) -> int:
        """Cancel the ``requested`` approvals of ``run`` (stored as ``run_id``) if no run
        will take them any more (:func:`still_counts`): each by compare-and-set, its
        message updated in place (not run: the run ended) and audited. How many."""
        if still_counts(run):
            return 0
        closed = 0
        for record in await self._store.pending_approvals([run_id]):
            if record.id in self._waiting:
                continue  # a call waits here still: its run settles it
            if not await self._store.decide_approval(record.id, ApprovalStatus.CANCELLED):
                continue  # decided meanwhile (a click, a Stop): that decision stands
            stored = await self._store.get_approval(record.id)
            cancelled = stored or dataclasses.replace(record, status=ApprovalStatus.CANCELLED)
            log.info("approval.closed", approval_id=record.id, run_id=run_id, reason="run_ended")
            await self.show(cancelled, not_run=NotRun.RUN_ENDED)
            await self.audit(cancelled, actor="threadpilot", reason="run_ended")
            closed += 1
        return closed

    async def close_all_ended(self) -> int:
        """:meth:`close_ended` for every ended run with a ``requested`` approval (the pass
        that catches what no ending's display did: an owner gone between its decision and
        this, an ending that never resumes, a sub-agent ended with its lost parent). One
        query finds them; a run is read again only if it has approvals to close. How many
        were closed."""
        closed = 0
        for run in await self._store.ended_runs_with_open_approvals():
            closed += await self.close_ended(run.id, run)
        return closed

    # -- the message and the trail --------------------------------------------------------

    async def show(self, record: ApprovalRecord, *, not_run: NotRun | None = None) -> None:
        """Update the approval message in place (a decision and who made it; or, with
        ``not_run``, why the call was not run)."""
        if record.message_ts is None:
            return
        text, blocks = render_approval(record, not_run=not_run)
        try:
            surface = await self._workspaces.get(record.thread.team)
            await surface.budget.update_final(
                record.thread.channel, record.message_ts, text=text, blocks=blocks
            )
        except (SlackError, BudgetNotRunning) as exc:
            log.warning("approval.message_not_updated", approval_id=record.id, error=repr(exc))

    async def audit(self, record: ApprovalRecord, *, actor: str, **detail: object) -> None:
        """The audit event of a request or a decision (after the commit that mattered)."""
        kind = "approval.requested" if not record.status.terminal else f"approval.{record.status}"
        event = AuditEvent(
            run_id=record.run_id,
            kind=kind,
            actor=actor,
            detail={"approval_id": record.id, "tool": record.tool, **detail},
        )
        try:
            await self._store.record_event(event)
        except StorageError:
            log.exception("approval.audit_not_recorded", approval_id=record.id)
        if record.status.terminal and self._metrics is not None:
            decided_at = record.decided_at or utcnow()
            waited = (decided_at - record.requested_at).total_seconds()
            self._metrics.approval_decided(record.status.value, max(waited, 0.0))

    # -- helpers --------------------------------------------------------------------------

    async def _open(self, request: ApprovalRequest) -> ApprovalRecord:
        """The row this call waits on: the one asked for this very call (by its id) that
        its run had not taken yet (a resumed run's), else a new one. An approval is used
        by the call it was asked for, never by a later identical call."""
        for earlier in await self._store.approvals_for(request.run_id):
            if earlier.taken_at is None and earlier.id not in self._waiting:
                if _asked_for(earlier, request):
                    log.info("approval.reused", approval_id=earlier.id, run_id=request.run_id)
                    return earlier
        record = ApprovalRecord(
            id=request.id,
            run_id=request.run_id,
            thread=request.thread,
            requester=request.requester,
            tool=request.tool,
            arguments=request.arguments,
            call_id=request.call_id,
            requested_at=request.requested_at,
        )
        await self._store.add_approval(record)
        await self.audit(record, actor=request.requester)
        return record

    async def _post(self, record: ApprovalRecord, *, reused: bool) -> None:
        """Post the approval message (``reused``: unless it is in the thread already, its
        worker gone before it stored the ts). A post Slack refuses leaves the call waiting
        (App Home still lists it, with the same buttons) until the timeout denies it."""
        text, blocks = render_approval(record)
        thread = record.thread
        metadata = approval_metadata(record.id)
        try:
            surface = await self._workspaces.get(thread.team)
            found = (
                await surface.budget.find_messages(thread.channel, thread.thread_ts, metadata)
                if reused
                else []
            )
            ts = (
                found[0]
                if found
                else await surface.budget.post_message(
                    thread.channel,
                    text=text,
                    blocks=blocks,
                    thread_ts=thread.thread_ts,
                    metadata=metadata,
                )
            )
        except (SlackError, BudgetNotRunning) as exc:
            log.error("approval.post_failed", approval_id=record.id, error=repr(exc))
            return
        if found:
            log.info("approval.message_found", approval_id=record.id, run_id=record.run_id, ts=ts)
        posted = dataclasses.replace(record, message_ts=ts)
        self._waiting[record.id] = (posted, self._waiting[record.id][1])
        await self._store.set_approval_message(record.id, ts)

    def _hand_over(self, record: ApprovalRecord) -> bool:
        waiting = self._waiting.get(record.id)
        if waiting is None or waiting[1].done():
            return False
        waiting[1].set_result(decision_of(record))
        return True

    async def _taken(self, approval_id: str) -> None:
        try:
            await self._store.take_approval(approval_id)
        except StorageError:
            log.exception("approval.not_taken", approval_id=approval_id)
