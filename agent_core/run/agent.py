"""An :class:`Agent` is a model, its tools and its limits. It makes runs and holds no
per-run state; everything about one run lives in :class:`agent_core.run.loop.Run`."""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING

from agent_core.run.config import AgentConfig
from agent_core.run.delegation import CHILD_HOW_TO_CONTINUE, DELEGATE
from agent_core.run.loop import Run
from agent_core.values.ended import EndedBecause
from agent_core.values.records import ThreadKey

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core.ports import Approvals, ChatModel, RunStore
    from agent_core.tools.toolbox import Tool
    from agent_core.values.budget import Spent
    from agent_core.values.chat import ChatMessage
    from agent_core.values.records import Checkpoint

__all__ = ["Agent"]


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
        trace_links: Sequence[str] = (),
    ) -> Run:
        """A new run; with ``restore``, one that resumes from that checkpoint.

        ``may_delegate``: offer the model ``delegate`` (while the run's depth allows).
        ``resumed_because``: why the restored run had ended (``rate_limit``,
        ``shutdown``...), which decides what the model is told about the gap.
        ``continued_from``: the run this one continues from a summary (its context filled
        up; see :func:`agent_core.run.compaction.continue_from`); kept on the result.
        ``spent``: what the request had already spent, when this run continues it (its
        budget goes on from there, :mod:`agent_core.values.budget`).
        ``trace_links``: the W3C ``traceparent`` of the run this one resumes, which its
        trace links to (:mod:`agent_core.process.tracing`).
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
            trace_links=trace_links,
        )
