"""The run's checkpoint within a step, and how a resumed run finishes that step.

A step is one model reply and the tool calls it asked for. So that a resume never asks
the model again for a turn it already answered (docs/stopping.md, "A resume keeps the
turn it paid for"), the run's checkpoint is rewritten during the step, not only at its
end::

    reply complete ──► checkpoint (the reply, before any call runs)
    each call starts ─► checkpoint (its id in ``started``)
    each result ─────► checkpoint (its result appended)
    step ends ───────► checkpoint (the loop's own, every call answered)

:class:`StepLog` keeps the open step and writes it; the :class:`~agent_core.tools.toolbox.Toolbox`
reports starts and results to it (its :class:`~agent_core.tools.toolbox.CallLog` port). A call is
"started" once it has cleared its approval, just before the tool is invoked: a call still
waiting for a person has not started.

A resumed run reads the checkpoint back with :func:`interrupted_step`: if the last reply
has calls with no result, the step was cut short, and the run finishes it before it asks
the model anything. A call that had not started runs now (a pending approval from the
earlier life is the same approval: the approvals port finds it by the same call). A call
that had started is never run again: the model reads :func:`unknown_effect` instead.

Writes go through the run's recorder, so they are best effort like every checkpoint: a
database outage is logged and the run goes on (a resume after that outage starts from
the last checkpoint that landed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core.values.chat import ToolCall

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from agent_core.tools.toolbox import ToolOutcome
    from agent_core.values.chat import ChatMessage
    from agent_core.values.records import Checkpoint

    WriteStep = Callable[[int, Sequence[ChatMessage], tuple[str, ...]], Awaitable[None]]

__all__ = ["InterruptedStep", "StepLog", "interrupted_step", "unknown_effect"]


class StepLog:
    """The open step of one run, checkpointed as it goes (see the module).

    ``write(turn, messages, started)`` stores the checkpoint. Writes are serialised and
    each takes the step as it is when its turn comes, so the last one written holds
    everything reported before it.
    """

    def __init__(self, write: WriteStep) -> None:
        self._write_checkpoint = write
        self._lock = asyncio.Lock()
        self._turn = 0
        self._base: list[ChatMessage] | None = None
        """The conversation up to the reply and the results it had at once; None when
        no step is open."""
        self._started: list[str] = []
        self._results: dict[str, ChatMessage] = {}

    async def replied(self, turn: int, messages: Sequence[ChatMessage]) -> None:
        """Open the step of turn ``turn``: ``messages`` ends with the model's reply (and
        the results known before any call runs). Written before any call runs."""
        self._turn = turn
        self._base = list(messages)
        self._started = []
        self._results = {}
        await self._write()

    async def started(self, call: ToolCall) -> None:
        """``call`` is about to run (written before it does)."""
        if self._base is not None:
            self._started.append(call.id)
            await self._write()

    async def finished(self, outcome: ToolOutcome) -> None:
        """``outcome`` arrived (its call's result)."""
        if self._base is not None:
            self._results[outcome.call.id] = outcome.message()
            await self._write()

    def close(self) -> None:
        """The step ended: the loop's own checkpoint follows."""
        self._base = None

    async def _write(self) -> None:
        async with self._lock:
            if self._base is None:
                return  # the step ended while this write waited its turn
            messages = [*self._base, *self._results.values()]
            await self._write_checkpoint(self._turn, messages, tuple(self._started))


@dataclass(frozen=True, slots=True)
class InterruptedStep:
    """The calls of a checkpointed reply that have no result."""

    to_run: tuple[ToolCall, ...]
    """Not started: they run when the run resumes."""
    unknown: tuple[ToolCall, ...]
    """Started with no result: never run again (:func:`unknown_effect`)."""


def interrupted_step(checkpoint: Checkpoint) -> InterruptedStep | None:
    """The step ``checkpoint`` was written in, if it was cut short: its last message
    after the model's reply is a tool result (or the reply itself) and some of the reply's
    calls have no result. None for a checkpoint at a step's end."""
    messages = checkpoint.messages
    last = _last_reply(messages)
    if last is None:
        return None
    answered = {m.get("tool_call_id") for m in messages[last + 1 :]}
    calls = [_call(c) for c in messages[last].get("tool_calls") or []]
    missing = [c for c in calls if c.id not in answered]
    if not missing:
        return None
    started = set(checkpoint.started)
    return InterruptedStep(
        to_run=tuple(c for c in missing if c.id not in started),
        unknown=tuple(c for c in missing if c.id in started),
    )


def in_call_order(messages: list[ChatMessage]) -> None:
    """Put the tool results after the last reply in the order of its calls: each is
    written as soon as it is known (a refusal before the admitted calls run, so a resume
    finds it answered), and the model reads them as it asked for them."""
    last = _last_reply(messages)
    if last is None:
        return
    order = {c.get("id"): n for n, c in enumerate(messages[last].get("tool_calls") or [])}
    messages[last + 1 :] = sorted(
        messages[last + 1 :], key=lambda m: order.get(m.get("tool_call_id"), len(order))
    )


def _last_reply(messages: Sequence[ChatMessage]) -> int | None:
    """The index of the model's reply the trailing tool results answer, if the
    conversation ends with one (and its results so far)."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") != "tool"),
        None,
    )
    if last is None or messages[last].get("role") != "assistant":
        return None
    return last


def unknown_effect(call: ToolCall) -> str:
    """What the model reads for a call that had started when its worker was lost."""
    return (
        f"error: {call.name}: its effect is unknown: the worker running it stopped while it "
        "ran, so it may or may not have taken effect, and it was not run again. Check "
        "before you call it again."
    )


def _call(entry: ChatMessage) -> ToolCall:
    function = entry.get("function") or {}
    arguments = function.get("arguments") or ""
    return ToolCall(str(entry.get("id")), str(function.get("name")), arguments)
