"""How an agent runs (:class:`AgentConfig`): its system prompt, limits, retries and timeouts.

Its own module so that the loop reads an agent's limits without importing the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core.models.retry import RetryPolicy
from agent_core.tools.toolbox import DEFAULT_TOOL_TIMEOUT_S
from agent_core.values.approvals import DEFAULT_APPROVAL_TIMEOUT_S
from agent_core.values.budget import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_CHILDREN_PER_RUN,
    DEFAULT_MAX_TOOL_CALLS_PER_STEP,
    BudgetLimits,
)
from agent_core.values.prompts import SYSTEM_PROMPT

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["AgentConfig"]


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """How an agent runs: its system prompt, limits, retries and timeouts."""

    system_prompt: str = SYSTEM_PROMPT
    max_turns: int = 20
    """Model turns before a forced final turn (the final turn is extra)."""
    context_window: int | None = None
    """The model's context size in tokens; None disables the context guard."""
    context_threshold: float = 0.9
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    final_turn_timeout_s: float | None = None
    """After a Stop, escalate to Abort if the final turn takes longer than this."""
    how_to_continue: str = "start a new run"
    """How a person continues once a run has ended, in the words of the surface that runs
    it ("reply in the thread", "run the command again"); the loop's own handoff lines use
    it, so no surface shows another's instructions."""
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    """One tool call may take this long; then it is cancelled and the model is told it
    timed out (``TOOL_TIMEOUT``)."""

    approval_timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S
    """A call held for approval is denied as expired after this long (``APPROVAL_TIMEOUT``)."""

    budget: BudgetLimits = DEFAULT_BUDGET
    """One request's budget (tokens, tool calls, time, cost), shared by the run and its
    sub-agents (:mod:`agent_core.values.budget`)."""
    max_tool_calls_per_step: int = DEFAULT_MAX_TOOL_CALLS_PER_STEP
    """Calls of one model reply that run; the rest get a tool error saying so."""
    max_children_per_run: int = DEFAULT_MAX_CHILDREN_PER_RUN
    """Sub-agents one run may start in all (at most 4 of them live at once)."""

    name_person: Callable[[str], str] = str
    """How the loop names a person to the model (``<@U1>`` in Slack, the plain id in a
    terminal): a sub-agent stopped on its own reports "Stopped by" them to its parent."""
    cancel_drain_s: float = 5.0
    """A run whose task is cancelled from outside (a shutdown's deadline, a parent's
    Abort cancelling its ``delegate`` call) records its ending for at most this long,
    then lets the cancellation go on; a write still hanging then is given up and logged
    (``run.ending_unrecorded``)."""

    def __post_init__(self) -> None:
        if not self.tool_timeout_s > 0:
            raise ValueError(f"tool_timeout_s must be positive, not {self.tool_timeout_s}")
        if not self.approval_timeout_s > 0:
            raise ValueError(f"approval_timeout_s must be positive, not {self.approval_timeout_s}")
        if not self.cancel_drain_s > 0:
            raise ValueError(f"cancel_drain_s must be positive, not {self.cancel_drain_s}")
        if self.max_tool_calls_per_step < 1:
            raise ValueError(
                f"max_tool_calls_per_step must be at least 1, not {self.max_tool_calls_per_step}"
            )
        if self.max_children_per_run < 0:
            raise ValueError(
                f"max_children_per_run must be 0 or more, not {self.max_children_per_run}"
            )
