"""In-memory :class:`~agent_core.ports.Store`: runs, stop requests, leases, retention,
guidance.

For the terminal runner, single-process use and tests. Nothing survives the process; the
durable adapters (SQLite, PostgreSQL) keep the same contract, checked by one suite in
``tests/stores``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_core.stores import _codec as codec
from agent_core.stores._queue import (
    check_admitted,
    check_waiting,
    counts_for_person,
    fair_key,
    holds_thread,
    person_key,
)
from agent_core.stores._retention import BATCH_SIZE, check_batch_size
from agent_core.stores.memory_installations import MemoryInstallations
from agent_core.values.clock import utcnow
from agent_core.values.ended import EndedBecause
from agent_core.values.records import (
    Admission,
    ApprovalRecord,
    ApprovalStatus,
    AuditEvent,
    Checkpoint,
    Forgotten,
    GuidanceRecord,
    GuidanceStatus,
    ResumeState,
    RunRecord,
    StopRequestRecord,
    TeamForgotten,
    ThreadKey,
    is_waiting,
)
from agent_core.values.states import LIVE_STATES, TERMINAL_STATES, RunState

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Sequence
    from datetime import datetime

    from agent_core.values.outcomes import ExitCode
    from agent_core.values.stop import StopReason

__all__ = ["MemoryStore"]


class MemoryStore(MemoryInstallations):
    """All the store ports in one object, guarded by one lock so CAS is atomic."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = asyncio.Lock()
        self._runs: dict[str, RunRecord] = {}
        self._checkpoints: dict[str, Checkpoint] = {}
        self._events: dict[str, list[AuditEvent]] = {}
        self._stops: dict[str, StopRequestRecord] = {}
        self._deliveries: dict[str, datetime] = {}
        self._guidance: dict[str, GuidanceRecord] = {}
        self._approvals: dict[str, ApprovalRecord] = {}
        self._participants: dict[tuple[ThreadKey, str], datetime] = {}
        """(thread, user) -> when they last wrote there."""
        """By id, in commit order: ties in ``queued_at`` keep it (sorting is stable)."""

    # -- RunStore ----------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        async with self._lock:
            if run.id in self._runs:
                raise ValueError(f"run {run.id} already exists")
            self._runs[run.id] = run

    async def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    async def set_state(
        self,
        run_id: str,
        new: RunState,
        *,
        expected: Collection[RunState],
        **changes: Any,
    ) -> bool:
        change = codec.state_change(new, expected=expected, changes=changes)
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.state not in change.expected:
                return False
            self._runs[run_id] = dataclasses.replace(
                run, state=new, updated_at=utcnow(), **change.fields
            )
            return True

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._checkpoints[checkpoint.run_id] = checkpoint

    async def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self._checkpoints.get(run_id)

    async def record_event(self, event: AuditEvent) -> None:
        self._events.setdefault(event.run_id, []).append(event)

    async def events_for(self, run_id: str) -> list[AuditEvent]:
        return list(self._events.get(run_id, ()))

    # -- RunQueries --------------------------------------------------------------------

    async def find_runs(
        self,
        *,
        states: Collection[RunState] | None = None,
        stop_reason: StopReason | None = None,
        exit_code: ExitCode | None = None,
        final_posted: bool | None = None,
        thread: ThreadKey | None = None,
        owner: str | None = None,
        top_level: bool | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        query = codec.run_query(
            states=states,
            stop_reason=stop_reason,
            exit_code=exit_code,
            final_posted=final_posted,
            thread=thread,
            owner=owner,
            top_level=top_level,
            limit=limit,
        )
        if query.matches_nothing:
            return []
        found = _oldest_first(
            r
            for r in self._runs.values()
            if (query.states is None or r.state in query.states)
            and (stop_reason is None or r.stop_reason == stop_reason)
            and (exit_code is None or r.exit_code == exit_code)
            and (final_posted is None or (r.final_posted_at is not None) == final_posted)
            and (thread is None or r.thread == thread)
            and (owner is None or r.owner == owner)
            and (top_level is None or (r.parent_id is None) == top_level)
        )
        return found[:limit]

    async def update_run(self, run_id: str, **changes: Any) -> bool:
        codec.run_updates(changes)
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return False
            if changes:
                fields = codec.with_ended_because(changes)
                self._runs[run_id] = dataclasses.replace(run, updated_at=utcnow(), **fields)
            return True

    async def stop_requests_for(self, run_id: str) -> list[StopRequestRecord]:
        return sorted(
            (r for r in self._stops.values() if r.run_id == run_id),
            key=lambda r: r.requested_at,
        )

    # -- DashboardQueries --------------------------------------------------------------

    async def team_live_runs(
        self, team: str, *, requester: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        found = self._team_runs(team, requester, live=True)
        return sorted(found, key=lambda r: (r.created_at, r.id), reverse=True)[: _limit(limit)]

    async def team_ended_runs(
        self, team: str, *, requester: str | None = None, limit: int = 10
    ) -> list[RunRecord]:
        found = self._team_runs(team, requester, live=False)
        return sorted(found, key=lambda r: (r.updated_at, r.id), reverse=True)[: _limit(limit)]

    def _team_runs(self, team: str, requester: str | None, *, live: bool) -> list[RunRecord]:
        return [
            r
            for r in self._runs.values()
            if r.thread.team == team
            and r.parent_id is None
            and (requester is None or r.requester == requester)
            and (r.state in LIVE_STATES) == live
        ]

    async def live_children(self, parent_ids: Collection[str]) -> list[RunRecord]:
        wanted = set(parent_ids)
        found = [r for r in self._runs.values() if r.parent_id in wanted and r.state in LIVE_STATES]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    async def runs_changed_since(self, since: datetime, *, limit: int = 1000) -> list[RunRecord]:
        since = codec.to_utc(since)
        found = [r for r in self._runs.values() if r.updated_at >= since]
        return sorted(found, key=lambda r: (r.updated_at, r.id))[: _limit(limit)]

    async def checkpoint_turns(self, run_ids: Collection[str]) -> dict[str, int]:
        return {
            run_id: checkpoint.turn
            for run_id in set(run_ids)
            if (checkpoint := self._checkpoints.get(run_id)) is not None
        }

    async def events_of_kind(
        self, run_ids: Collection[str], kinds: Collection[str]
    ) -> list[AuditEvent]:
        wanted = set(kinds)
        found = [
            event
            for run_id in dict.fromkeys(run_ids)
            for event in self._events.get(run_id, ())
            if event.kind in wanted
        ]
        return sorted(found, key=lambda e: e.at)  # stable: a run's ties stay in order

    # -- StopRequestStore --------------------------------------------------------------

    async def add_stop_request(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        request_id: str | None = None,
    ) -> StopRequestRecord:
        record = codec.new_stop_request(run_id, thread, kind, requested_by, request_id)
        self._stops[record.id] = record
        return record

    async def add_stop_request_once(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        delivery: str,
        request_id: str | None = None,
    ) -> StopRequestRecord | None:
        record = codec.new_stop_request(run_id, thread, kind, requested_by, request_id)
        # No await from the check to the writes: one step, as one transaction.
        if delivery in self._deliveries:
            return None
        self._deliveries[delivery] = record.requested_at
        self._stops[record.id] = record
        return record

    async def add_stop_requests(
        self,
        requests: Sequence[StopRequestRecord],
        *,
        events: Sequence[AuditEvent] = (),
        delivery: str | None = None,
    ) -> list[StopRequestRecord] | None:
        codec.stop_batch(requests, events)
        # No await from the checks to the writes: one step, as one transaction.
        if delivery is not None:
            if delivery in self._deliveries:
                return None
            self._deliveries[delivery] = utcnow()
        asked = {r.run_id for r in self._stops.values() if r.status == "requested"}
        added = [
            r
            for r in requests
            if (run := self._runs.get(r.run_id)) is not None
            and run.state in codec.STOPPABLE
            and r.run_id not in asked
        ]
        for request in added:
            self._stops[request.id] = request
        runs = {r.run_id for r in added}
        for event in events:
            if event.run_id in runs:
                self._events.setdefault(event.run_id, []).append(event)
        return added

    async def pending_stop_requests(
        self, run_ids: Collection[str] | None = None
    ) -> list[StopRequestRecord]:
        wanted = None if run_ids is None else set(run_ids)
        pending = [
            r
            for r in self._stops.values()
            if r.status == "requested" and (wanted is None or r.run_id in wanted)
        ]
        return sorted(pending, key=lambda r: r.requested_at)

    async def mark_stop_handled(self, request_id: str) -> bool:
        async with self._lock:
            record = self._stops.get(request_id)
            if record is None or record.status == "handled":
                return False
            self._stops[request_id] = dataclasses.replace(
                record, status="handled", handled_at=utcnow()
            )
            return True

    # -- LeaseStore --------------------------------------------------------------------

    async def claim_run(
        self, run_id: str, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> bool:
        now = now or utcnow()
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.state not in LIVE_STATES or not _lease_free(run, owner, now):
                return False
            self._runs[run_id] = dataclasses.replace(
                run, owner=owner, lease_expires_at=now + timedelta(seconds=ttl_s)
            )
            return True

    async def release_run(self, run_id: str, owner: str) -> bool:
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.owner != owner:
                return False
            self._runs[run_id] = dataclasses.replace(run, owner=None, lease_expires_at=None)
            return True

    async def heartbeat(
        self, owner: str, run_ids: Collection[str], ttl_s: float, *, now: datetime | None = None
    ) -> set[str]:
        expires = (now or utcnow()) + timedelta(seconds=ttl_s)
        async with self._lock:
            held = [
                run
                for run_id in set(run_ids)
                if (run := self._runs.get(run_id)) is not None
                and run.owner == owner
                and run.state in LIVE_STATES
            ]
            for run in held:
                self._runs[run.id] = dataclasses.replace(run, lease_expires_at=expires)
            return {run.id for run in held}

    async def expired_runs(self, now: datetime | None = None) -> list[RunRecord]:
        now = now or utcnow()
        return _oldest_first(
            r
            for r in self._runs.values()
            if r.state in LIVE_STATES
            and r.lease_expires_at is not None
            and r.lease_expires_at <= now
        )

    async def live_runs(self, owner: str | None = None) -> list[RunRecord]:
        return _oldest_first(
            r
            for r in self._runs.values()
            if r.state in LIVE_STATES and (owner is None or r.owner == owner)
        )

    # -- RetentionStore ----------------------------------------------------------------

    async def purge(self, older_than: datetime, *, batch_size: int = BATCH_SIZE) -> int:
        check_batch_size(batch_size)
        async with self._lock:
            doomed = self._removable(lambda run: run.updated_at < older_than)
            deleted = self._delete_runs(doomed)
            return deleted + self._purge_old_rows(older_than)

    async def forget_requester(
        self, user: str, *, team: str | None = None, batch_size: int = BATCH_SIZE
    ) -> Forgotten:
        check_batch_size(batch_size)

        def here(thread: ThreadKey) -> bool:
            return team is None or thread.team == team

        async with self._lock:
            doomed = self._removable(lambda run: run.requester == user and here(run.thread))
            self._delete_runs(doomed)
            for participant in [p for p in self._participants if p[1] == user and here(p[0])]:
                del self._participants[participant]
            settled = [
                k for k, g in self._guidance.items() if _settled_by(g, user) and here(g.thread)
            ]
            for key in settled:
                del self._guidance[key]
            decided = [
                k for k, a in self._approvals.items() if _decided_by(a, user) and here(a.thread)
            ]
            for key in decided:
                del self._approvals[key]
            kept = sum(
                1 for run in self._runs.values() if run.requester == user and here(run.thread)
            )
            return Forgotten(runs=len(doomed), kept=kept)

    async def forget_team(self, team: str, *, batch_size: int = BATCH_SIZE) -> TeamForgotten:
        check_batch_size(batch_size)
        async with self._lock:
            doomed = self._removable(lambda run: run.thread.team == team)
            rows = self._delete_runs(doomed)
            for participant in [p for p in self._participants if p[0].team == team]:
                del self._participants[participant]
                rows += 1
            stops = [
                k for k, r in self._stops.items() if r.thread.team == team and r.status == "handled"
            ]
            settled = [
                k
                for k, g in self._guidance.items()
                if g.thread.team == team and g.status is not GuidanceStatus.QUEUED
            ]
            for key in stops:
                del self._stops[key]
            for key in settled:
                del self._guidance[key]
            rows += len(stops) + len(settled)
            kept = sum(1 for run in self._runs.values() if run.thread.team == team)
            return TeamForgotten(runs=len(doomed), rows=rows, kept=kept)

    def _removable(self, matches: Callable[[RunRecord], bool]) -> list[str]:
        """The runs ``matches`` picks that may be deleted (agent_core/stores/_retention.py
        says which, in SQL)."""
        needed = [run for run in self._runs.values() if _needed(run)]
        pointed_at = {run.parent_id for run in needed} | {run.continued_from for run in needed}
        needed_ids = {run.id for run in needed}
        return [
            run.id
            for run in self._runs.values()
            if matches(run)
            and run.state in TERMINAL_STATES
            and not _resume_ahead(run)
            and run.id not in pointed_at
            and run.parent_id not in needed_ids
        ]

    def _delete_runs(self, run_ids: Collection[str]) -> int:
        """Delete the runs and what hangs off them; returns the rows deleted."""
        doomed = set(run_ids)
        rows = len(doomed)
        for run_id in doomed:
            del self._runs[run_id]
            rows += self._checkpoints.pop(run_id, None) is not None
            rows += len(self._events.pop(run_id, []))
        tables: tuple[dict[str, Any], ...] = (self._stops, self._guidance, self._approvals)
        for table in tables:
            gone = [key for key, row in table.items() if row.run_id in doomed]
            for key in gone:
                del table[key]
            rows += len(gone)
        return rows

    def _purge_old_rows(self, older_than: datetime) -> int:
        """Rows that go by age alone (agent_core/stores/_retention.py, OLD_ROWS)."""
        stops = [
            key
            for key, r in self._stops.items()
            if r.status == "handled" and r.handled_at is not None and r.handled_at < older_than
        ]
        for key in stops:
            del self._stops[key]
        events = 0
        for run_id, run_events in self._events.items():
            kept = [e for e in run_events if e.at >= older_than]
            events += len(run_events) - len(kept)
            self._events[run_id] = kept
        checkpoints = [
            run_id
            for run_id, c in self._checkpoints.items()
            if c.created_at < older_than and _never_resumes(self._runs.get(run_id))
        ]
        for run_id in checkpoints:
            del self._checkpoints[run_id]
        deliveries = [key for key, seen in self._deliveries.items() if seen < older_than]
        for key in deliveries:
            del self._deliveries[key]
        guidance = [
            key
            for key, g in self._guidance.items()
            if g.settled_at is not None and g.settled_at < older_than
        ]
        for key in guidance:
            del self._guidance[key]
        approvals = [
            key
            for key, a in self._approvals.items()
            if a.decided_at is not None and a.decided_at < older_than
        ]
        for key in approvals:
            del self._approvals[key]
        guidance += approvals
        quiet = [key for key, seen in self._participants.items() if seen < older_than]
        for participant in quiet:
            del self._participants[participant]
        return len(stops) + events + len(checkpoints) + len(deliveries) + len(guidance) + len(quiet)

    # -- DeliveryLog -------------------------------------------------------------------

    async def first_delivery(self, key: str, *, now: datetime | None = None) -> bool:
        seen_at = codec.to_utc(now or utcnow())
        async with self._lock:
            if key in self._deliveries:
                return False
            self._deliveries[key] = seen_at
            return True

    async def forget_delivery(self, key: str) -> None:
        async with self._lock:
            self._deliveries.pop(key, None)

    # -- ParticipantStore --------------------------------------------------------------

    async def add_participant(
        self, thread: ThreadKey, user: str, *, now: datetime | None = None
    ) -> None:
        self._participants[(thread, user)] = codec.to_utc(now or utcnow())

    async def participants(self, thread: ThreadKey) -> set[str]:
        return {user for (where, user) in self._participants if where == thread}

    # -- GuidanceStore ----------------------------------------------------------------

    async def add_guidance(self, record: GuidanceRecord) -> bool:
        codec.guidance_values(record)  # the SQL stores' checks
        async with self._lock:
            if record.id in self._guidance:
                return False
            self._guidance[record.id] = dataclasses.replace(
                record, queued_at=codec.to_utc(record.queued_at)
            )
            return True

    async def pending_guidance(
        self, run_ids: Collection[str] | None = None
    ) -> list[GuidanceRecord]:
        wanted = None if run_ids is None else set(run_ids)
        pending = (
            g
            for g in self._guidance.values()
            if g.status is GuidanceStatus.QUEUED and (wanted is None or g.run_id in wanted)
        )
        return sorted(pending, key=lambda g: g.queued_at)

    async def mark_guidance(
        self, ids: Collection[str], status: GuidanceStatus, *, at: datetime | None = None
    ) -> set[str]:
        codec.guidance_settled(status)
        settled_at = codec.to_utc(at or utcnow())
        moved: set[str] = set()
        async with self._lock:
            for guidance_id in set(ids):
                record = self._guidance.get(guidance_id)
                if record is None or record.status is not GuidanceStatus.QUEUED:
                    continue
                self._guidance[guidance_id] = dataclasses.replace(
                    record, status=status, settled_at=settled_at
                )
                moved.add(guidance_id)
        return moved

    async def guidance_for(self, run_id: str) -> list[GuidanceRecord]:
        return sorted(
            (g for g in self._guidance.values() if g.run_id == run_id), key=lambda g: g.queued_at
        )

    # -- ApprovalStore -----------------------------------------------------------------

    async def add_approval(self, record: ApprovalRecord) -> bool:
        codec.approval_values(record)  # the SQL stores' checks
        async with self._lock:
            if record.id in self._approvals:
                return False
            self._approvals[record.id] = dataclasses.replace(
                record, requested_at=codec.to_utc(record.requested_at)
            )
            self._touch(record.run_id)
            return True

    async def set_approval_message(self, approval_id: str, message_ts: str) -> bool:
        async with self._lock:
            record = self._approvals.get(approval_id)
            if record is None:
                return False
            self._approvals[approval_id] = dataclasses.replace(record, message_ts=message_ts)
            return True

    async def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        decided_by: str | None = None,
        at: datetime | None = None,
    ) -> bool:
        codec.approval_decided(status)
        decided_at = codec.to_utc(at or utcnow())
        async with self._lock:
            record = self._approvals.get(approval_id)
            if record is None or record.status.terminal:
                return False
            self._approvals[approval_id] = dataclasses.replace(
                record, status=status, decided_by=decided_by, decided_at=decided_at
            )
            self._touch(record.run_id)
            return True

    async def take_approval(self, approval_id: str, *, at: datetime | None = None) -> bool:
        taken_at = codec.to_utc(at or utcnow())
        async with self._lock:
            record = self._approvals.get(approval_id)
            if record is None or not record.status.terminal or record.taken_at is not None:
                return False
            self._approvals[approval_id] = dataclasses.replace(record, taken_at=taken_at)
            return True

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return self._approvals.get(approval_id)

    def _touch(self, run_id: str) -> None:
        """A change to a run's approvals moves its ``updated_at`` (App Home refreshes)."""
        run = self._runs.get(run_id)
        if run is not None:
            self._runs[run_id] = dataclasses.replace(run, updated_at=utcnow())

    async def pending_approvals(
        self, run_ids: Collection[str] | None = None
    ) -> list[ApprovalRecord]:
        wanted = None if run_ids is None else set(run_ids)
        pending = (
            a
            for a in self._approvals.values()
            if not a.status.terminal and (wanted is None or a.run_id in wanted)
        )
        return sorted(pending, key=lambda a: a.requested_at)

    async def approvals_for(self, run_id: str) -> list[ApprovalRecord]:
        return sorted(
            (a for a in self._approvals.values() if a.run_id == run_id),
            key=lambda a: a.requested_at,
        )

    async def pending_approvals_under(self, run_ids: Collection[str]) -> list[ApprovalRecord]:
        tree = set(run_ids)
        grown = True
        while grown:  # down the sub-agents, level by level
            below = {r.id for r in self._runs.values() if r.parent_id in tree}
            grown = not below <= tree
            tree |= below
        return await self.pending_approvals(tree)

    async def ended_runs_with_open_approvals(self, *, limit: int = 100) -> list[RunRecord]:
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        open_ids = {a.run_id for a in self._approvals.values() if not a.status.terminal}
        ended = [r for r in self._runs.values() if r.id in open_ids and r.state.is_terminal]
        return sorted(ended, key=lambda r: (r.updated_at, r.id))[:limit]

    # -- ResumeStore -------------------------------------------------------------------

    async def set_resume(
        self,
        run_id: str,
        new: ResumeState | None,
        *,
        expected: Collection[ResumeState | None],
        due_by: datetime | None = None,
        claimed_by: str | None = None,
        state: RunState | None = None,
        **changes: Any,
    ) -> bool:
        change = codec.resume_change(  # the SQL stores' checks
            new,
            expected=expected,
            due_by=due_by,
            claimed_by=claimed_by,
            state=state,
            changes=changes,
        )
        async with self._lock:
            run = self._runs.get(run_id)
            if (
                run is None
                or run.state not in change.states
                or run.resume not in set(expected)
                or (due_by is not None and not _resume_due(run, codec.to_utc(due_by)))
                or (claimed_by is not None and run.owner != claimed_by)
            ):
                return False
            fields = codec.with_ended_because(changes)
            self._runs[run_id] = dataclasses.replace(
                run,
                state=run.state if state is None else state,
                resume=new,
                updated_at=utcnow(),
                **fields,
            )
            return True

    async def start_continuation(
        self,
        run_id: str,
        continuation: RunRecord,
        *,
        expected: Collection[ResumeState | None],
        due_by: datetime | None = None,
        claimed_by: str | None = None,
        **changes: Any,
    ) -> bool:
        if continuation.id in self._runs:  # checked first: then nothing is written
            raise ValueError(f"run {continuation.id} already exists")
        started = await self.set_resume(
            run_id,
            ResumeState.STARTED,
            expected=expected,
            due_by=due_by,
            claimed_by=claimed_by,
            **changes,
        )
        if started:
            await self.create_run(continuation)
        return started

    async def pending_resumes(self, *, limit: int = 100) -> list[RunRecord]:
        found = [
            r
            for r in self._runs.values()
            if r.resume in (ResumeState.SCHEDULED, ResumeState.CLAIMED)
            or (r.state is RunState.BLOCKED and r.resume is None)
        ]
        return sorted(found, key=lambda r: (r.resume_at or r.updated_at, r.id))[: _limit(limit)]

    async def last_user_stop(self, thread: ThreadKey) -> datetime | None:
        times = [
            r.requested_at for r in self._stops.values() if r.thread == thread and r.kind.by_person
        ]
        return max(times, default=None)

    # -- QueueStore (docs/operations.md, Queue and MAX_LIVE_RUNS) ---------------------

    async def enqueue_run(self, run: RunRecord) -> None:
        check_waiting(run)
        await self.create_run(run)

    async def admit_run(self, run: RunRecord, *, limit: int | None) -> Admission:
        check_admitted(run)
        now = utcnow()
        async with self._lock:
            if run.id in self._runs:
                raise ValueError(f"run {run.id} already exists")
            if any(r.thread == run.thread and holds_thread(r, now) for r in self._runs.values()):
                return Admission.THREAD_BUSY
            if limit is not None and self._counted(person_key(run)) >= limit:
                return Admission.PERSON_FULL
            self._runs[run.id] = run
            return Admission.ACCEPTED

    async def admit_continuation(
        self, run_id: str, by: str, *, at: datetime, limit: int | None
    ) -> bool:
        async with self._lock:
            run = self._runs.get(run_id)
            continuable = (
                run is not None
                and run.state is RunState.BLOCKED
                and run.ended_because is EndedBecause.BUDGET_EXHAUSTED
                and run.resume is ResumeState.DECLINED
                and run.resume_by is None
            )
            if run is None or not continuable:
                return False
            if limit is not None and self._counted(person_key(run)) >= limit:
                return False
            self._runs[run_id] = dataclasses.replace(
                run, resume=ResumeState.SCHEDULED, resume_at=at, resume_by=by, updated_at=utcnow()
            )
            return True

    def _counted(self, person: tuple[str, str]) -> int:
        """What ``MAX_RUNS_PER_USER`` counts of ``person``'s (:func:`counts_for_person`)."""
        return sum(
            1 for r in self._runs.values() if person_key(r) == person and counts_for_person(r)
        )

    async def claim_queued(
        self, owner: str, ttl_s: float, *, now: datetime | None = None
    ) -> RunRecord | None:
        now = now or utcnow()
        async with self._lock:
            stopped = {r.run_id for r in self._stops.values() if r.status == "requested"}
            waiting = [r for r in self._waiting() if r.id not in stopped]
            if not waiting:
                return None
            taken = dataclasses.replace(
                waiting[0],
                state=RunState.RUNNING,
                owner=owner,
                lease_expires_at=now + timedelta(seconds=ttl_s),
                updated_at=utcnow(),
            )
            self._runs[taken.id] = taken
            return taken

    async def unclaim_run(self, run_id: str, owner: str) -> bool:
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.owner != owner or run.state is not RunState.RUNNING:
                return False
            self._runs[run_id] = dataclasses.replace(
                run, state=RunState.QUEUED, owner=None, lease_expires_at=None, updated_at=utcnow()
            )
            return True

    async def requeue_run(self, run_id: str, owner: str, *, status_ts: str | None = None) -> bool:
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.owner != owner or run.state is not RunState.QUEUED:
                return False
            self._runs[run_id] = dataclasses.replace(
                run,
                owner=None,
                lease_expires_at=None,
                status_ts=run.status_ts if status_ts is None else status_ts,
                updated_at=utcnow(),
            )
            return True

    async def queued_runs(self, *, limit: int = 1000) -> list[RunRecord]:
        return self._waiting()[: _limit(limit)]

    async def count_queued(self) -> int:
        return len(self._waiting())

    async def stopped_in_queue(self, *, limit: int = 100) -> list[RunRecord]:
        stopped = {r.run_id for r in self._stops.values() if r.status == "requested"}
        found = (r for r in self._runs.values() if is_waiting(r) and r.id in stopped)
        return _oldest_first(found)[: _limit(limit)]

    def _waiting(self) -> list[RunRecord]:
        """The waiting runs in queue order (:data:`~agent_core.stores._queue.FAIR_ORDER_SQL`)."""
        waiting = [r for r in self._runs.values() if is_waiting(r)]
        return sorted(waiting, key=fair_key(self._runs.values()))

    async def close(self) -> None:
        """Nothing to release; here so this store is a :class:`~agent_core.ports.Store`."""


def _limit(limit: int) -> int:
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    return limit


def _lease_free(run: RunRecord, owner: str, now: datetime) -> bool:
    return (
        run.owner is None
        or run.owner == owner
        or run.lease_expires_at is None
        or run.lease_expires_at <= now
    )


def _resume_due(run: RunRecord, due_by: datetime) -> bool:
    if run.resume is ResumeState.SCHEDULED:
        return run.resume_at is not None and run.resume_at <= due_by
    if run.resume is ResumeState.CLAIMED:
        return run.lease_expires_at is not None and run.lease_expires_at <= due_by
    return False


def _resume_ahead(run: RunRecord) -> bool:
    return run.resume in (ResumeState.SCHEDULED, ResumeState.CLAIMED) or (
        run.state is RunState.BLOCKED and run.resume is None
    )


def _needed(run: RunRecord) -> bool:
    """Live, or with a resume ahead: its rows, and those of its family, stay."""
    return run.state in LIVE_STATES or _resume_ahead(run)


def _settled_by(guidance: GuidanceRecord, user: str) -> bool:
    return guidance.author == user and guidance.status is not GuidanceStatus.QUEUED


def _decided_by(approval: ApprovalRecord, user: str) -> bool:
    return approval.decided_by == user and approval.status.terminal


def _never_resumes(run: RunRecord | None) -> bool:
    # ``blocked`` is terminal but resumable from its checkpoint (states.py), so it keeps it.
    return run is not None and run.state in TERMINAL_STATES and run.state is not RunState.BLOCKED


def _oldest_first(runs: Iterable[RunRecord]) -> list[RunRecord]:
    return sorted(runs, key=lambda r: (r.created_at, r.id))
