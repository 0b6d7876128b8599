"""What a run writes to its :class:`~agent_core.ports.RunStore`, kept out of the loop.

State changes are written by compare-and-set, each naming the states it may move from;
the terminal write can lose to another writer (a reconciler, a racing click), in which
case the stored state stands and the loss is logged. Stop requests reach the recorder
from a synchronous listener, so their audit events are buffered and written at the next
await point (a checkpoint, the move to ``stopping``, or the end): nothing is written
fire-and-forget.

Most writes are best effort (a run outlives a store outage). The terminal write is not:
a run whose ending is not stored stays "live" in the database, a ghost that blocks its
thread and that a reconciler would later resume over its answer. So it is retried
through an outage (:func:`until_landed`) before the run reports its end, and a run
that still cannot be recorded is logged as critical.

The run's other durable writes live here too, one home each: its registration
(:func:`leased`, a row that is never without an owner), its ending
(:func:`record_ending`, whoever writes it: the run, its worker, a reconciler, the
queue), what its final message's delivery leaves to write (:func:`record_delivery`) and
the ending of a row whose run never started (:func:`abandon_run`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

import structlog

from agent_core.ports import RunQueries, RunStore
from agent_core.values.clock import utcnow
from agent_core.values.errors import StorageError
from agent_core.values.outcomes import Outcome
from agent_core.values.records import AuditEvent, Checkpoint, RunRecord
from agent_core.values.states import LIVE_STATES, RunState, state_for_outcome

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Sequence

    from agent_core.values.budget import Spent
    from agent_core.values.chat import ChatMessage
    from agent_core.values.outcomes import RunResult
    from agent_core.values.records import ThreadKey
    from agent_core.values.stop import StopRequest

__all__ = [
    "TERMINAL_WRITE_DEADLINE_S",
    "RunRecorder",
    "abandon_run",
    "leased",
    "record_delivery",
    "record_ending",
    "until_landed",
]

log = structlog.get_logger("agent_core.run.recording")

P = ParamSpec("P")
T = TypeVar("T")

TERMINAL_WRITE_DEADLINE_S = 60.0
"""How long a terminal write is retried through a database outage (blips and failovers
last seconds to tens of seconds) before the run is given up as unrecorded."""
_FIRST_RETRY_S = 0.05
_MAX_RETRY_S = 5.0


class _DeliveryStore(RunStore, RunQueries, Protocol):
    """What :func:`record_delivery` writes to: the ending, or only ``final_posted_at``."""


class _RunView(Protocol):
    id: str
    task: str
    requester: str
    thread: ThreadKey

    @property
    def parent(self) -> _RunView | None: ...
    @property
    def trace_context(self) -> str | None: ...


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


async def until_landed(write: Callable[[], Awaitable[T]], *, step: str, run_id: str) -> T:
    """Run ``write`` until it does not raise :class:`StorageError`, or re-raise the last
    one after :data:`TERMINAL_WRITE_DEADLINE_S`.

    Waits between attempts grow from 50 ms, doubling, to at most 5 s apart. ``write``
    must be safe to repeat (a compare-and-set is: once it has landed, a repeat changes
    nothing). Cancellation ends the wait at once.
    """
    deadline = time.monotonic() + TERMINAL_WRITE_DEADLINE_S
    delay = _FIRST_RETRY_S
    attempt = 1
    while True:
        try:
            return await write()
        except StorageError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            log.warning(
                "run.store_write_retrying",
                step=step,
                run_id=run_id,
                attempt=attempt,
                retry_in_s=round(min(delay, left), 3),
                error=str(exc),
            )
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, _MAX_RETRY_S)
        attempt += 1


def leased(record: RunRecord, *, owner: str, lease_ttl_s: float) -> RunRecord:
    """The new run ``record`` as it is stored: already leased to ``owner`` for
    ``lease_ttl_s``, so it is never without an owner and no reconciler takes it for an
    orphan."""
    expires = utcnow() + timedelta(seconds=lease_ttl_s)
    return replace(record, owner=owner, lease_expires_at=expires)


async def record_ending(
    store: RunStore,
    run_id: str,
    result: RunResult,
    *,
    expected: Collection[RunState] = LIVE_STATES,
    **changes: Any,
) -> bool:
    """Write the run's terminal state from ``result`` by compare-and-set from one of the
    ``expected`` states (with other :class:`RunRecord` fields in ``changes``). False if
    the run had already ended (or was not in one of them)."""
    return await store.set_state(
        run_id,
        state_for_outcome(result.outcome),
        expected=expected,
        outcome=result.outcome,
        stop_reason=result.stop_reason,
        exit_code=result.exit_code,
        stopped_by=result.handoff.stopped_by,
        result=result.to_dict(),
        **changes,
    )


async def record_delivery(
    store: _DeliveryStore, run_id: str, result: RunResult, *, recorded: bool, delivered: bool
) -> None:
    """After the run's final message: make the database agree with what Slack now shows,
    retried through an outage (see the module). Never raises a storage error.

    Normally the run recorded its ending before its final message went out (``recorded``)
    and only ``final_posted_at`` is left to write, if the message was ``delivered``. If
    the run gave up on its terminal write (the database was down longer than it waited),
    the ending is written here too, by the same compare-and-set: a row left live would
    block the thread and be resumed over the answer the person already has.
    """
    posted: dict[str, Any] = {"final_posted_at": utcnow()} if delivered else {}

    async def write() -> None:
        if not recorded and await record_ending(store, run_id, result, **posted):
            log.warning("run.terminal_recorded_late", outcome=result.outcome.value)
        elif posted:
            await store.update_run(run_id, **posted)

    if recorded and not posted:
        return
    try:
        await until_landed(write, step="record_ending", run_id=run_id)
    except StorageError:
        log.critical(
            "run.terminal_unrecorded",
            outcome=result.outcome.value,
            final_delivered=delivered,
            exc_info=True,
        )


async def abandon_run(store: RunStore, run_id: str) -> bool:
    """End the row of a run that never starts (``failed``), if it was written at all: a
    row left live would be queued and run. Retried through an outage (see the module);
    False if there was no live row to end."""

    async def write() -> bool:
        return await store.set_state(
            run_id,
            RunState.FAILED,
            expected=LIVE_STATES,
            outcome=Outcome.FAILED,
            owner=None,
            lease_expires_at=None,
        )

    return await until_landed(write, step="abandon", run_id=run_id)


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
        # A run taken from the queue (or resumed in place) is ``running`` already: its
        # claim moved it, with its owner and lease, in one statement.
        expected = [RunState.QUEUED, RunState.RUNNING]
        traced = {} if run.trace_context is None else {"trace_context": run.trace_context}
        moved = await store.set_state(run.id, RunState.RUNNING, expected=expected, **traced)
        if not moved:
            log.warning("run.start_not_recorded", run_id=run.id)

    @_tolerant
    async def checkpoint(
        self,
        turn: int,
        messages: Sequence[ChatMessage],
        *,
        started: tuple[str, ...] = (),
        spent: Spent | None = None,
    ) -> None:
        """Store the run's conversation (``started``, ``spent``: see :class:`Checkpoint`)."""
        if self._store is None or await self._taken_over():
            return
        checkpoint = Checkpoint(self._run.id, turn, tuple(messages), started=started, spent=spent)
        await self._store.save_checkpoint(checkpoint)
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
                detail={"source": request.source.value},
            )
        )

    async def finished(self, result: RunResult) -> None:
        """Store the run's ending, retried through a database outage (see the module).

        Never raises a storage error: a run that cannot be recorded is logged as critical
        and still reports its result to whoever awaits it.
        """
        store = self._store
        if store is None:
            return

        async def write() -> bool | None:
            if await self._taken_over():
                return None
            return await record_ending(store, self._run.id, result)

        try:
            won = await until_landed(write, step="finished", run_id=self._run.id)
        except StorageError:
            log.critical(
                "run.terminal_unrecorded",
                run_id=self._run.id,
                outcome=result.outcome.value,
                deadline_s=TERMINAL_WRITE_DEADLINE_S,
                exc_info=True,
            )
            return
        if won is None:
            return  # taken over: the new owner's state stands
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
                    "ended_because": result.ended_because.value,
                    "recorded": won,
                },
            )
        )
        try:
            await self._flush()
        except StorageError:
            log.exception("run.store_write_failed", step="finished.audit")

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
