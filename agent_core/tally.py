"""What a run has done so far: turns, completed steps, tokens, tools, current activity.

Kept apart from the loop so the counters have one owner and endings can describe the
run's progress without reaching into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core.chat import Usage
from agent_core.counting import count

if TYPE_CHECKING:
    from agent_core.errors import ModelError

__all__ = ["RunTally"]


@dataclass
class RunTally:
    turns: int = 0
    """Model turns started (a retried call counts once; the final turn counts)."""
    steps_completed: int = 0
    """Steps (a model answer plus its tool batch) that ran to their end."""
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    """The latest turn's usage: its prompt size says how full the context is."""
    last_error: ModelError | None = None
    activity: str = "starting"
    """What the run is doing now, in words ("running the tool search")."""
    tool_log: list[str] = field(default_factory=list)

    def answered(self, usage: Usage) -> None:
        self.usage += usage
        self.last_usage = usage

    def progress_summary(self, error: ModelError | None = None) -> str:
        """What the run did, e.g. "2 model turns, 1 tool call (search: ok).", then the
        model endpoint's failure, if any."""
        calls = "no tool calls"
        if self.tool_log:
            calls = f"{count(len(self.tool_log), 'tool call')} ({'; '.join(self.tool_log[-10:])})"
        failure = f" The model endpoint failed: {error}." if error is not None else ""
        return f"{count(self.turns, 'model turn')}, {calls}.{failure}"
