"""In-memory :class:`~agent_core.ports.RunStore` and :class:`~agent_core.ports.StopRequestStore`.

For the terminal runner, single-process use and tests. Nothing survives the process; the
durable adapters (SQLite, PostgreSQL) keep the same contract.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from agent_core.ports import (
    AuditEvent,
    Checkpoint,
    RunRecord,
    StopRequestRecord,
    ThreadKey,
)
from agent_core.stop import utcnow

if TYPE_CHECKING:
    from collections.abc import Collection

    from agent_core.states import RunState
    from agent_core.stop import StopReason

__all__ = ["MemoryStore"]


class MemoryStore:
    """Both store ports in one object, guarded by one lock so CAS is atomic."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._runs: dict[str, RunRecord] = {}
        self._checkpoints: dict[str, Checkpoint] = {}
        self._events: dict[str, list[AuditEvent]] = {}
        self._stops: dict[str, StopRequestRecord] = {}

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
        async with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.state not in expected:
                return False
            self._runs[run_id] = dataclasses.replace(run, state=new, updated_at=utcnow(), **changes)
            return True

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._checkpoints[checkpoint.run_id] = checkpoint

    async def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self._checkpoints.get(run_id)

    async def record_event(self, event: AuditEvent) -> None:
        self._events.setdefault(event.run_id, []).append(event)

    async def events_for(self, run_id: str) -> list[AuditEvent]:
        return list(self._events.get(run_id, ()))

    # -- StopRequestStore --------------------------------------------------------------

    async def add_stop_request(
        self, run_id: str, thread: ThreadKey, kind: StopReason, requested_by: str
    ) -> StopRequestRecord:
        record = StopRequestRecord(
            id=uuid.uuid4().hex,
            run_id=run_id,
            thread=thread,
            kind=kind,
            requested_by=requested_by,
        )
        self._stops[record.id] = record
        return record

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
