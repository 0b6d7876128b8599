"""Progress events a run emits while it works, and the hub that delivers them.

The Slack layer renders these into the status message; the terminal runner prints them.
Listeners are called synchronously, in order, on the run's event loop: a listener must
be quick (record, set an event, put on a queue) and never block. A listener that raises
is logged and kept (the next event reaches it too): the run goes on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from agent_core.values.approvals import ApprovalDecision, ApprovalRequest
    from agent_core.values.chat import Usage
    from agent_core.values.guidance import Guidance
    from agent_core.values.outcomes import RunResult
    from agent_core.values.stop import StopReason, StopSource

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "ChildFinished",
    "ChildStarted",
    "EventHub",
    "GuidanceDelivered",
    "Retrying",
    "RunEvent",
    "RunFinished",
    "StepRestarted",
    "StopHonoured",
    "StopRequested",
    "TextDelta",
    "ToolFinished",
    "ToolProgress",
    "ToolStarted",
    "TurnFinished",
    "TurnStarted",
]

log = structlog.get_logger("agent_core.values.events")


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """A model turn began."""

    run_id: str
    turn: int
    final: bool = False
    """True for the forced final turn (stop, limits): only ``final_report`` is offered."""
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text the model streamed in the current turn."""

    run_id: str
    text: str


@dataclass(frozen=True, slots=True)
class StepRestarted:
    """A failed model call is being retried: text streamed for it so far is void."""

    run_id: str
    turn: int


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A model turn ended."""

    run_id: str
    turn: int
    usage: Usage
    """Tokens used by the whole run so far."""
    reply: Usage | None = None
    """Tokens of this turn's reply alone (its prompt and its answer), as the model API
    counted them: what a budget per reply or per run adds up."""


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """The model called a tool; it is running."""

    run_id: str
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A running tool call reported how far it has got (e.g. an MCP progress notification).

    ``progress`` grows with each report of a call; ``total`` is None when the tool does
    not know it; ``message`` is the tool's own words, if any.
    """

    run_id: str
    call_id: str
    name: str
    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call ended (``ok`` False: it failed)."""

    run_id: str
    call_id: str
    name: str
    ok: bool
    output: str


@dataclass(frozen=True, slots=True)
class Retrying:
    """A failed model call waits ``delay_s`` before its attempt number ``attempt``."""

    run_id: str
    attempt: int
    delay_s: float
    error: str


@dataclass(frozen=True, slots=True)
class StopRequested:
    """The run's stop state changed: a request it had not had, or a stronger one."""

    run_id: str
    reason: StopReason
    requested_by: str
    source: StopSource
    """Through which channel it came (a button, the final turn's timer...)."""


@dataclass(frozen=True, slots=True)
class StopHonoured:
    """The run acted on its stop request (requested is not taken effect)."""

    run_id: str
    reason: StopReason


@dataclass(frozen=True, slots=True)
class GuidanceDelivered:
    """Guidance went out with the model request of ``turn`` (as user-role messages)."""

    run_id: str
    turn: int
    guidance: tuple[Guidance, ...]


@dataclass(frozen=True, slots=True)
class ChildStarted:
    """The run handed a task to a sub-agent (``delegate``): a child run has started.

    The child's own events go to the child's hub (``Run.children`` holds the runs); the
    parent's hub only tells when each child starts and ends.
    """

    run_id: str
    child_id: str
    task: str
    tools: tuple[str, ...]
    """The tools the child may use (besides ``final_report`` and ``ask_user``)."""
    depth: int
    """The child's depth: 1 for a child of a top-level run, 2 for a grandchild."""


@dataclass(frozen=True, slots=True)
class ChildFinished:
    """A child run ended (finished, or early: stopped, aborted, failed, blocked); its
    result is what the parent reads as the ``delegate`` call's result."""

    run_id: str
    child_id: str
    result: RunResult


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A call waits for a person's approval (:mod:`agent_core.values.approvals`)."""

    run_id: str
    request: ApprovalRequest


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """A held call was approved, denied, expired or cancelled by a Stop."""

    run_id: str
    request: ApprovalRequest
    decision: ApprovalDecision


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended with ``result``."""

    run_id: str
    result: RunResult


RunEvent = (
    TurnStarted
    | TextDelta
    | StepRestarted
    | TurnFinished
    | ToolStarted
    | ToolProgress
    | ToolFinished
    | Retrying
    | StopRequested
    | StopHonoured
    | GuidanceDelivered
    | ChildStarted
    | ChildFinished
    | ApprovalRequested
    | ApprovalDecided
    | RunFinished
)


class EventHub:
    """Fans a run's events out to listeners and async subscribers."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[RunEvent], None]] = []
        self._finished = False

    def add_listener(self, listener: Callable[[RunEvent], None]) -> Callable[[], None]:
        """Call ``listener`` for every later event. Returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def emit(self, event: RunEvent) -> None:
        if isinstance(event, RunFinished):
            self._finished = True
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                # A broken renderer must not break the run it renders.
                log.exception("events.listener_failed", event=type(event).__name__)

    async def subscribe(self) -> AsyncIterator[RunEvent]:
        """Yield every event from now on, ending after :class:`RunFinished`."""
        queue: asyncio.Queue[RunEvent] = asyncio.Queue()
        if self._finished:
            return
        remove = self.add_listener(queue.put_nowait)
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, RunFinished):
                    return
        finally:
            remove()
