"""An :class:`Agent` is a model, its tools and its limits. It makes runs and holds no
per-run state; everything about one run lives in :class:`agent_core.run.loop.Run`."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core.models.retry import RetryPolicy
from agent_core.run.delegation import CHILD_HOW_TO_CONTINUE, DELEGATE
from agent_core.run.loop import Run
from agent_core.tools.toolbox import DEFAULT_TOOL_TIMEOUT_S
from agent_core.values.approvals import DEFAULT_APPROVAL_TIMEOUT_S
from agent_core.values.budget import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_CHILDREN_PER_RUN,
    DEFAULT_MAX_TOOL_CALLS_PER_STEP,
    BudgetLimits,
)
from agent_core.values.ended import EndedBecause
from agent_core.values.prompts import SYSTEM_PROMPT
from agent_core.values.records import ThreadKey

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core.ports import Approvals, ChatModel, RunStore
    from agent_core.tools.toolbox import Tool
    from agent_core.values.budget import Spent
    from agent_core.values.chat import ChatMessage
    from agent_core.values.records import Checkpoint

__all__ = ["Agent", "AgentConfig"]


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


class Agent:
    """A model, its tools and limits. Makes runs; holds no per-run state."""

    def __init__(
        self,
        model: ChatModel,
        tools: Sequence[Tool] = (),
        *,
        config: AgentConfig | None = None,
        store: RunStore | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        """``approvals``: where a call that needs approval gets a person's decision;
        without it such calls are refused (:mod:`agent_core.values.approvals`)."""
        self.model = model
        self.tools = tuple(tools)
        self.config = config or AgentConfig()
        self.store = store
        self.approvals = approvals
        if any(t.name == DELEGATE for t in self.tools):
            raise ValueError(f"the tool name {DELEGATE!r} is the loop's own (sub-agents)")

    def with_tools(self, tools: Sequence[Tool]) -> Agent:
        """The same model, limits and store with other tools."""
        return Agent(
            self.model, tools, config=self.config, store=self.store, approvals=self.approvals
        )

    def for_child(self, tools: Sequence[Tool]) -> Agent:
        """The agent of a sub-agent run: these tools, and handoff lines for its parent."""
        config = dataclasses.replace(self.config, how_to_continue=CHILD_HOW_TO_CONTINUE)
        return Agent(self.model, tools, config=config, store=self.store, approvals=self.approvals)

    def new_run(
        self,
        task: str,
        *,
        run_id: str | None = None,
        requester: str = "local",
        thread: ThreadKey | None = None,
        history: Sequence[ChatMessage] = (),
        parent: Run | None = None,
        restore: Checkpoint | None = None,
        may_delegate: bool = True,
        resumed_because: EndedBecause = EndedBecause.SHUTDOWN,
        continued_from: str | None = None,
        spent: Spent | None = None,
    ) -> Run:
        """A new run; with ``restore``, one that resumes from that checkpoint.

        ``may_delegate``: offer the model ``delegate`` (while the run's depth allows).
        ``resumed_because``: why the restored run had ended (``rate_limit``,
        ``shutdown``...), which decides what the model is told about the gap.
        ``continued_from``: the run this one continues from a summary (its context filled
        up; see :func:`agent_core.run.compaction.continue_from`); kept on the result.
        ``spent``: what the request had already spent, when this run continues it (its
        budget goes on from there, :mod:`agent_core.values.budget`).
        """
        run_id = run_id or uuid.uuid4().hex
        return Run(
            self,
            run_id,
            task,
            requester=requester,
            thread=thread or ThreadKey("local", "cli", run_id),
            history=history,
            parent=parent,
            restore=restore,
            may_delegate=may_delegate,
            resumed_because=resumed_because,
            continued_from=continued_from,
            spent=spent,
        )
