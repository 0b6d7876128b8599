"""Why a run is asked to end, and the per-run control object that carries that request.

A stop is a *state*, not an event: once requested it stays requested. Three reasons exist
(docs/stopping.md):

========== ============= ======================================== ====================
reason      final turn?   in-flight LLM stream and tool tasks      outcome
========== ============= ======================================== ====================
stop        yes, one      left to finish the current step          userinterlude
abort       no            cancelled at once, stream closed         userinterlude
shutdown    no            cancelled at once, state checkpointed    blocked (resumable)
========== ============= ======================================== ====================

Requests only ever escalate: ``stop`` < ``shutdown`` < ``abort``. A repeated request of
the same or a lower rank is a no-op. ``abort`` outranks ``shutdown`` because it carries a
person's intent (do not resume this), which a restart must not undo.

The rules every part of the app asks about a stop live here, once: which of several
requests is in force (:func:`strongest`: the highest rank, the first of it, as a run's
:class:`RunControl` keeps it) and whether a person asked (:attr:`StopReason.by_person`).
A reason's exit code and the ending a person's stop writes outside the loop are
:func:`agent_core.values.outcomes.exit_code_of` and
:func:`agent_core.values.outcomes.ended_by_person`.

"Requested" and "took effect" are different moments and both are recorded: the loop calls
:meth:`RunControl.mark_honoured` when it actually acts on the request.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar

import structlog

from agent_core.values import hang_ups
from agent_core.values.clock import utcnow

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable
    from datetime import datetime

__all__ = [
    "PendingStop",
    "RunControl",
    "StopReason",
    "StopRequest",
    "StopSource",
    "strongest",
]

log = structlog.get_logger("agent_core.values.stop")


class StopReason(StrEnum):
    """Why a run is being ended from outside."""

    STOP = "stop"
    """Finish the current step, take one final turn with no tools, report."""
    ABORT = "abort"
    """Cancel now: close the LLM stream, cancel tool tasks, no final turn."""
    SHUTDOWN = "shutdown"
    """The process is going away: cancel now, checkpoint, leave the run resumable."""

    @property
    def cancels(self) -> bool:
        """True when this reason cancels in-flight work instead of waiting for it."""
        return self is not StopReason.STOP

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def by_person(self) -> bool:
        """True if a person asked for it (Stop, Abort), not a restart: such a run is
        never resumed, and its ending names who asked."""
        return self is not StopReason.SHUTDOWN


_RANK = {StopReason.STOP: 1, StopReason.SHUTDOWN: 2, StopReason.ABORT: 3}


class StopSource(StrEnum):
    """Through which channel a request to end a run arrived (logged, and recorded)."""

    BUTTON = "button"
    """Stop or Abort on the run's status message."""
    NATIVE = "native"
    """The chat surface's own stop control (Slack's ``agent_session_stopped``)."""
    HOME = "home"
    """A button on the app's home tab."""
    COMMAND = "command"
    """The app's slash command."""
    STOP_WORD = "stop_word"
    """A reply in the run's thread that is only a stop word."""
    STORE = "store"
    """Found in the stop requests table: another worker took the person's request."""
    SIGNAL = "signal"
    """A signal to the process: a terminal's Ctrl+C, or a shutdown."""
    PARENT = "parent"
    """The parent run's request, passed to a sub-agent."""
    TIMER = "timer"
    """The final turn's deadline (``FINAL_TURN_TIMEOUT``) ran out."""
    TASK = "task"
    """The run's task was cancelled from outside."""
    LEASE = "lease"
    """This worker lost the run's lease: another worker may run it now."""
    RESUME = "resume"
    """A person stopped a run while it was being resumed (its compaction)."""
    LOCAL = "local"
    """Anything else in this process."""

    @property
    def pressed(self) -> bool:
        """A control that can be pressed twice before it re-renders (a double press):
        the command's answer is a list of buttons too."""
        return self in (StopSource.BUTTON, StopSource.NATIVE, StopSource.HOME, StopSource.COMMAND)

    @property
    def typed(self) -> bool:
        """Written in the thread (a stop word), so its answer says "write it again"."""
        return self is StopSource.STOP_WORD

    @property
    def on_status_message(self) -> bool:
        """It counts only on the run's own status message (team, channel, message)."""
        return self is StopSource.BUTTON


class PendingStop(Protocol):
    """A stop request as :func:`strongest` compares it (a stored request row)."""

    @property
    def kind(self) -> StopReason: ...

    @property
    def requested_at(self) -> datetime: ...


_P = TypeVar("_P", bound=PendingStop)
_T = TypeVar("_T")


def strongest(requests: Iterable[_P]) -> _P | None:
    """The request in force among ``requests``: the highest-ranked, and of those the
    first asked, since a later one of the same rank changes nothing (as
    :meth:`RunControl.request_stop` has it). None if there are none."""
    found: _P | None = None
    for request in requests:
        if (
            found is None
            or request.kind.rank > found.kind.rank
            or (request.kind is found.kind and request.requested_at < found.requested_at)
        ):
            found = request
    return found


@dataclass(frozen=True, slots=True)
class StopRequest:
    """One request to end a run: what, by whom, when, and through which channel."""

    reason: StopReason
    requested_by: str
    requested_at: datetime = field(default_factory=utcnow)
    source: StopSource = StopSource.LOCAL


class RunControl:
    """The stop state of one run, plus the handles needed to enforce it.

    Delivery inside the process is event-driven: :meth:`request_stop` sets an
    :class:`asyncio.Event` that interruptible waits select on, and for cancelling reasons
    it cancels the run's task directly, having first hung up the model connections that
    task has open (:mod:`agent_core.values.hang_ups`). Nothing polls.

    Child runs (sub-agents) register with :meth:`adopt`; every request reaches them with
    the same reason until they end and :meth:`release` them.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._request: StopRequest | None = None
        self._history: list[StopRequest] = []
        self._requested = asyncio.Event()
        self._task: asyncio.Task[object] | None = None
        self._children: list[RunControl] = []
        self._listeners: list[Callable[[StopRequest], None]] = []
        self.honoured_at: datetime | None = None
        self.cancel_issued = False
        """True once this control has cancelled the run's task itself."""
        self.hang_ups = hang_ups.HangUps()
        """The model connections the run's task has open (see :meth:`start`)."""

    # -- state -------------------------------------------------------------------------

    @property
    def request(self) -> StopRequest | None:
        """The effective (highest-ranked) request so far, if any."""
        return self._request

    @property
    def reason(self) -> StopReason | None:
        return self._request.reason if self._request else None

    @property
    def history(self) -> tuple[StopRequest, ...]:
        """Every request that changed the state, oldest first."""
        return tuple(self._history)

    @property
    def stop_requested(self) -> bool:
        return self._request is not None

    @property
    def first_requested_at(self) -> datetime | None:
        return self._history[0].requested_at if self._history else None

    @property
    def user_stopped(self) -> bool:
        """True if a person (not a restart) asked this run to stop or abort."""
        return any(r.reason.by_person for r in self._history)

    async def wait_requested(self) -> StopRequest:
        await self._requested.wait()
        assert self._request is not None
        return self._request

    # -- wiring ------------------------------------------------------------------------

    def start(self, work: Coroutine[object, object, _T], *, name: str) -> asyncio.Task[_T]:
        """Run ``work`` as the run's task: the task to cancel on abort or shutdown (at once
        if one was requested already), with :attr:`hang_ups` bound to its context so that
        such a request hangs up its model connections first."""
        context = contextvars.copy_context()
        context.run(hang_ups.bind, self.hang_ups)
        task = asyncio.create_task(work, name=name, context=context)
        self._task = task
        if self.reason is not None and self.reason.cancels:
            self._cancel_task()
        return task

    def adopt(self, child: RunControl) -> None:
        """Register a child run; a request already in force reaches it at once."""
        self._children.append(child)
        if self._request is not None:
            child.request_stop(
                self._request.reason, self._request.requested_by, source=StopSource.PARENT
            )

    def release(self, child: RunControl) -> None:
        """Forget a child that has ended: later requests have nothing to reach there."""
        if child in self._children:
            self._children.remove(child)

    def add_listener(self, listener: Callable[[StopRequest], None]) -> None:
        """Call ``listener`` each time the effective request changes: at once, or, for a
        request that cancels the run's task, on the loop's next turn, after the task's
        unwinding has hung up the model's connection (see :meth:`request_stop`)."""
        self._listeners.append(listener)

    # -- the one entry point -----------------------------------------------------------

    def request_stop(
        self, reason: StopReason, requested_by: str, *, source: StopSource = StopSource.LOCAL
    ) -> bool:
        """Ask the run to end. Returns True if this changed the run's stop state.

        Idempotent: the same or a lower-ranked reason is a no-op. Cancelling reasons
        hang up the run's model connections here, before anything else (the server sees
        them go now, not once the loop gets round to the task's unwinding), then cancel
        the run's task, and are logged and announced to the listeners just after that
        unwinding.
        """
        current = self._request
        if current is not None and reason.rank <= current.reason.rank:
            log.info(
                "stop.ignored",
                run_id=self.run_id,
                reason=reason.value,
                requested_by=requested_by,
                current=current.reason.value,
            )
            return False
        if reason.cancels:
            self.hang_ups.hang_up()
        request = StopRequest(reason=reason, requested_by=requested_by, source=source)
        self._request = request
        self._history.append(request)
        self._requested.set()
        for child in list(self._children):
            child.request_stop(reason, requested_by, source=StopSource.PARENT)
        if reason.cancels and self._cancel_task():
            # The connections are hung up; the task's unwinding (the loop's next turn)
            # closes any that opened outside the registry, and the log line and the
            # listeners come right after it (still before the run reports its end).
            asyncio.get_running_loop().call_soon(self._announce, request, current)
        else:
            self._announce(request, current)
        return True

    def _announce(self, request: StopRequest, replaced: StopRequest | None) -> None:
        log.info(
            "stop.requested",
            run_id=self.run_id,
            reason=request.reason.value,
            requested_by=request.requested_by,
            source=request.source.value,
            upgraded_from=replaced.reason.value if replaced else None,
        )
        for listener in list(self._listeners):
            listener(request)

    def mark_honoured(self) -> None:
        """Record the moment the run actually acted on the request (first time only)."""
        if self.honoured_at is None and self._request is not None:
            self.honoured_at = utcnow()
            log.info(
                "stop.honoured",
                run_id=self.run_id,
                reason=self._request.reason.value,
                requested_by=self._request.requested_by,
            )

    def cancel_for(self, request: StopRequest) -> bool:
        """Cancel the run's task for ``request`` as a cancelling request would (its model
        connections hung up first), whatever its reason: for work whose one request is
        the whole job, where a Stop has no step boundary to wait for (a compaction).
        False if there is no task to cancel (not started, or done)."""
        task = self._task
        if task is None or task.done():
            return False
        self.hang_ups.hang_up()
        self.cancel_issued = True
        task.cancel(msg=f"threadpilot:{request.reason.value}")
        return True

    def _cancel_task(self) -> bool:
        """Cancel the run's task; False if there is none to cancel (not started, or done)."""
        task = self._task
        if task is None or task.done():
            return False
        self.cancel_issued = True
        assert self._request is not None
        task.cancel(msg=f"threadpilot:{self._request.reason.value}")
        return True
