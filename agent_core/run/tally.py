"""What a run has done so far: turns, completed steps, tokens, tools, current activity.

Kept apart from the loop so the counters have one owner and endings can describe the
run's progress without reaching into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core.values.chat import Usage
from agent_core.values.counting import count
from agent_core.values.errors import ModelUnreachable

if TYPE_CHECKING:
    from agent_core.values.errors import ModelError

__all__ = ["RunTally"]


@dataclass
class RunTally:
    turns: int = 0
    """Model turns started (a retried call counts once; the final turn counts)."""
    unreached: int = 0
    """Turns given up without any of their requests reaching the model (no connection):
    left out of the turns a person is told about."""
    _reached_turn: int = field(default=0, init=False, repr=False)
    """The latest turn one of whose requests reached the model (an answer or an error)."""
    steps_completed: int = 0
    """Steps (a model answer plus its tool batch) that ran to their end."""
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    """The latest turn's usage: its prompt size says how full the context is."""
    last_error: ModelError | None = None
    activity: str = "starting"
    """What the run is doing now, in words ("running the tool search")."""
    tool_log: list[str] = field(default_factory=list)

    @property
    def reached_turns(self) -> int:
        """The turns a person is told about: those some request of which reached the model."""
        return self.turns - self.unreached

    def attempt_failed(self, error: ModelError) -> None:
        """A request of the current turn failed with ``error`` (it may be retried)."""
        self.last_error = error
        if not isinstance(error, ModelUnreachable):
            self._reached_turn = self.turns

    def gave_up(self) -> None:
        """The current turn's requests are spent: none is sent again."""
        if self._reached_turn != self.turns:
            self.unreached += 1

    def tool_finished(self, name: str, *, ok: bool) -> None:
        """A call of the tool ``name`` has finished (``ok``: without an error)."""
        self.tool_log.append(f"{name}: {'ok' if ok else 'error'}")

    def answered(self, usage: Usage) -> None:
        self.usage += usage
        self.last_usage = usage

    def progress_summary(self, error: ModelError | None = None) -> str:
        """What the run did, e.g. "2 model turns, 1 tool call (search: ok).", then the
        model endpoint's failure, if any. A turn none of whose requests reached the model
        is not counted."""
        calls = "no tool calls"
        if self.tool_log:
            calls = f"{count(len(self.tool_log), 'tool call')} ({'; '.join(self.tool_log[-10:])})"
        failure = f" The model endpoint failed: {error}." if error is not None else ""
        return f"{count(self.reached_turns, 'model turn')}, {calls}.{failure}"
