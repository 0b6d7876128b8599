"""What a run writes to its :class:`~agent_core.ports.RunStore`, kept out of the loop.

State changes go through the transition table and are written by compare-and-set; the
terminal write can lose to another writer (a reconciler, a racing click), in which case
the stored state stands and the loss is logged. Stop requests reach the recorder from a
synchronous listener, so their audit events are buffered and written at the next await
point (a checkpoint or the end): nothing is written fire-and-forget.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, ParamSpec, Protocol

import structlog

from agent_core.errors import StorageError
from agent_core.ports import AuditEvent, Checkpoint, RunRecord
from agent_core.states import LIVE_STATES, RunState, state_for_outcome

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from agent_core.outcomes import RunResult
    from agent_core.ports import ChatMessage, RunStore, ThreadKey
    from agent_core.stop import StopRequest

__all__ = ["RunRecorder"]

log = structlog.get_logger("agent_core.recording")

P = ParamSpec("P")


class _RunView(Protocol):
    id: str
    task: str
    requester: str
    thread: ThreadKey

    @property
    def parent(self) -> _RunView | None: ...


def _tolerant(method: Callable[P, Awaitable[None]]) -> Callable[P, Awaitable[None]]:
    """A database failure is logged, not raised: a run outlives a store outage, and its
    result still reaches the person who asked (the store catches up via reconciling)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            await method(*args, **kwargs)
        except StorageError:
            log.exception("run.store_write_failed", step=method.__name__)

    return wrapper


class RunRecorder:
    def __init__(self, store: RunStore | None, run: _RunView) -> None:
        self._store = store
        self._run = run
        self._pending: list[AuditEvent] = []
        self._owner: str | None = None
        """The worker that held the run when it started here (None: unowned, e.g. CLI)."""

    @_tolerant
    async def started(self) -> None:
        store = self._store
        if store is None:
            return
        run = self._run
        existing = await store.get_run(run.id)
        if existing is not None:
            self._owner = existing.owner
        if existing is None:
            await store.create_run(
                RunRecord(
                    id=run.id,
                    thread=run.thread,
                    requester=run.requester,
                    task=run.task,
                    parent_id=run.parent.id if run.parent else None,
                )
            )
        moved = await store.set_state(run.id, RunState.RUNNING, expected=[RunState.QUEUED])
        if not moved:
            log.warning("run.start_not_recorded", run_id=run.id)

    @_tolerant
    async def checkpoint(self, turn: int, messages: Sequence[ChatMessage]) -> None:
        if self._store is None or await self._taken_over():
            return
        await self._store.save_checkpoint(Checkpoint(self._run.id, turn, tuple(messages)))
        await self._flush()

    @_tolerant
    async def stopping(self) -> None:
        if self._store is None:
            return
        await self._store.set_state(self._run.id, RunState.STOPPING, expected=[RunState.RUNNING])
        await self._flush()

    def stop_requested(self, request: StopRequest) -> None:
        self._pending.append(
            AuditEvent(
                run_id=self._run.id,
                kind=f"{request.reason.value}.received",
                actor=request.requested_by,
                at=request.requested_at,
                detail={"source": request.source},
            )
        )

    @_tolerant
    async def finished(self, result: RunResult) -> None:
        if self._store is None:
            return
        if await self._taken_over():
            return
        won = await self._store.set_state(
            self._run.id,
            state_for_outcome(result.outcome),
            expected=LIVE_STATES,
            outcome=result.outcome,
            stop_reason=result.stop_reason,
            exit_code=result.exit_code,
            stopped_by=result.handoff.stopped_by,
            result=result.to_dict(),
        )
        if not won:
            log.warning("run.terminal_lost", run_id=self._run.id, outcome=result.outcome.value)
        self._pending.append(
            AuditEvent(
                run_id=self._run.id,
                kind="run.finished",
                actor="system",
                detail={
                    "outcome": result.outcome.value,
                    "exit_code": result.exit_code.value,
                    "recorded": won,
                },
            )
        )
        await self._flush()

    async def _taken_over(self) -> bool:
        """True if another worker took the run over while this one was away (a stall
        longer than the lease): then its state and checkpoints are not written over."""
        assert self._store is not None
        if self._owner is None:
            return False
        current = await self._store.get_run(self._run.id)
        if current is None or current.owner == self._owner:
            return False
        log.warning("run.ownership_lost", run_id=self._run.id, owner=current.owner)
        return True

    async def _flush(self) -> None:
        assert self._store is not None
        pending, self._pending = self._pending, []
        for event in pending:
            await self._store.record_event(event)
