"""Sub-agents: the ``delegate`` tool, which hands a task to a child run (docs/stopping.md).

``delegate(task, tools)`` is offered with a run's own tools while its depth allows: a
top-level run is at depth 0, its children at 1 may delegate once more, and grandchildren
(:data:`MAX_DEPTH`) are not offered it. The child run:

- sees only its task (no thread history) and may use only the tools named, all of them
  its parent's own: a name the parent lacks is refused with a tool error that lists what
  may be handed over. ``delegate`` is one of those names while the child would still be
  under the depth limit; ``final_report`` and ``ask_user`` every run has anyway;
- is stored with its parent (``RunRecord.parent_id``) and keeps its own checkpoints and
  audit trail;
- inherits every stop of its parent with the same reason (:meth:`RunControl.adopt`): a
  Stop lets it finish its step and take its own final turn; an Abort or a shutdown
  cancels it at once, with no final turn;
- runs inside its ``delegate`` call's task, which the parent's tool batch owns: when the
  batch is cancelled nothing of the child is left running, and the parent's batch is
  complete only once every child has returned.

At most :data:`MAX_LIVE_CHILDREN` children of one run are live at once, and at most
``max_children_per_run`` (:class:`~agent_core.run.config.AgentConfig`, ``MAX_CHILDREN_PER_RUN``)
are started in all; children spend from their parent's budget (:mod:`agent_core.values.budget`).
A further call is refused at once with a tool error rather than held until a slot frees:
a held call is work a Stop would have to find and cancel, and a wait the model cannot
see; the model reads the refusal with the other results of its batch and delegates again
once a child has reported.

Whatever way the child ends (finished, or early: stopped, aborted, failed, blocked, a
question), it comes back as the call's result: its outcome label, evidence, artifacts and
handoff. ``TOOL_TIMEOUT`` does not apply to the call (:attr:`Tool.bounded`): the child is
bounded by its own limits and by its parent's Stop and Abort. While the child works, its
turns and tool calls are reported as the call's progress.

A person may also stop one child on its own (a Stop or Abort asked of the child's run id,
which its parent never sees): its report then leads with who did it ("Stopped by ...",
"Sub-agent aborted by ..."), and the parent goes on with it as with any other result.

The parent's hub gets :class:`ChildStarted` and :class:`ChildFinished`; the child's own
events stay on the child's hub.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

import pydantic
import structlog

from agent_core.tools.progress import current_progress
from agent_core.tools.toolbox import ASK_USER, FINAL_REPORT, Tool, ToolError
from agent_core.values.events import ChildFinished, ChildStarted, RunEvent, ToolStarted, TurnStarted
from agent_core.values.stop import StopReason, StopSource

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from agent_core.tools.progress import ProgressFn
    from agent_core.values.events import EventHub
    from agent_core.values.outcomes import RunResult
    from agent_core.values.stop import RunControl, StopRequest

__all__ = [
    "CHILD_HOW_TO_CONTINUE",
    "DELEGATE",
    "MAX_DEPTH",
    "MAX_LIVE_CHILDREN",
    "MAX_TASK_CHARS",
    "SUB_AGENT_NOTE",
    "Delegation",
    "child_report",
    "stopped_here",
]

log = structlog.get_logger("agent_core.run.delegation")

DELEGATE = "delegate"
MAX_DEPTH = 2
"""The deepest a run may be: a top-level run is 0, its children 1, grandchildren 2."""
MAX_LIVE_CHILDREN = 4
"""Children of one run that may be live at the same time."""
MAX_TASK_CHARS = 20_000
"""The longest task one call may hand over (about 5,000 tokens)."""

SUB_AGENT_NOTE = (
    "You are a sub-agent: another agent handed you the task below and reads your report; "
    "no person sees your messages. Do the task with the tools you are given, then call "
    "final_report (or answer in plain text) with what you found."
)
CHILD_HOW_TO_CONTINUE = "delegate a new task"
"""How the parent carries on after a child ended (the child's own handoff lines)."""

_LOOP_TOOLS = frozenset({FINAL_REPORT.name, ASK_USER.name})


class DelegateArguments(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    task: Annotated[
        str,
        pydantic.Field(
            min_length=1,
            max_length=MAX_TASK_CHARS,
            description="The whole sub-task, self-contained: the sub-agent sees nothing else.",
        ),
    ]
    tools: Annotated[
        list[str],
        pydantic.Field(
            max_length=256,
            description="Names of your tools the sub-agent may use (an empty list for none).",
        ),
    ]


class Limits(Protocol):
    """What delegation reads of the parent's config: its one limit, and how a person is
    named to the model."""

    @property
    def max_children_per_run(self) -> int: ...
    @property
    def name_person(self) -> Callable[[str], str]: ...


class Setup(Protocol):
    """What the parent is made from, as delegation reads it: its tools and its limits."""

    @property
    def tools(self) -> Sequence[Tool]: ...
    @property
    def config(self) -> Limits: ...


class Child(Protocol):
    """A child run, as its parent's ``delegate`` call sees it."""

    @property
    def id(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def events(self) -> EventHub: ...
    @property
    def result(self) -> RunResult | None: ...
    @property
    def control(self) -> RunControl: ...
    async def run(self) -> RunResult: ...


class Parent(Protocol):
    """The run a ``delegate`` tool belongs to, narrowed to what delegation needs (the run
    itself, :class:`agent_core.run.loop.Run`, imports this module)."""

    @property
    def id(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def events(self) -> EventHub: ...
    @property
    def agent(self) -> Setup: ...
    def child(self, task: str, *, tools: Sequence[Tool], may_delegate: bool) -> Child: ...


class Delegation:
    """The ``delegate`` tool of one run, and the count of its live children."""

    def __init__(self, run: Parent) -> None:
        self._run = run
        self._live = 0
        """Children started by this tool that have not ended yet."""
        self._started = 0
        """Children started by this tool in all (``MAX_CHILDREN_PER_RUN`` bounds it)."""
        self.tool = Tool(
            name=DELEGATE,
            description=self._description(),
            fn=self._delegate,
            args_model=DelegateArguments,
            bounded=False,
        )

    def handover(self) -> list[str]:
        """The tool names a child of this run may be given."""
        names = [t.name for t in self._run.agent.tools]
        if self._run.depth + 1 < MAX_DEPTH:
            names.append(DELEGATE)
        return names

    def _description(self) -> str:
        names = ", ".join(self.handover()) or "none"
        return (
            "Hand a self-contained sub-task to a sub-agent and wait for its report (outcome, "
            "evidence, artifacts, handoff), which comes back as this call's result. The "
            "sub-agent sees only `task` and may use only the tools named in `tools`, from: "
            f"{names}. Several calls in one turn run in parallel, at most "
            f"{MAX_LIVE_CHILDREN} at once and {self._run.agent.config.max_children_per_run} "
            "in all."
        )

    async def _delegate(self, task: str, tools: list[str]) -> str:
        run = self._run
        names = self._checked(tools)
        most = run.agent.config.max_children_per_run
        if self._started >= most:
            raise ToolError(
                f"this run has started {most} sub-agents, the most allowed in all "
                "(MAX_CHILDREN_PER_RUN), so this task was not started; do it yourself "
                "or report what is left"
            )
        if self._live >= MAX_LIVE_CHILDREN:
            raise ToolError(
                f"{MAX_LIVE_CHILDREN} sub-agents of this run are already running, the most "
                "allowed at once, so this task was not started; delegate it again once one "
                "of them has reported"
            )
        wanted = set(names)
        child = run.child(
            task,
            tools=[t for t in run.agent.tools if t.name in wanted],
            may_delegate=DELEGATE in wanted,
        )
        self._live += 1
        self._started += 1
        log.info("child.started", run_id=run.id, child_id=child.id, tools=names)
        run.events.emit(ChildStarted(run.id, child.id, task, tuple(names), child.depth))
        remove = child.events.add_listener(_progress_of(current_progress()))
        try:
            result = await child.run()
        finally:
            # Also on an Abort: the child has written its ending before it re-raised.
            remove()
            self._live -= 1
            if child.result is not None:
                run.events.emit(ChildFinished(run.id, child.id, child.result))
        return child_report(result, stopped=stopped_here(child.control), name=_name_of(run))

    def _checked(self, tools: list[str]) -> list[str]:
        """The names to hand over, in order, once each; unknown names are refused."""
        allowed = self.handover()
        names = [n for n in dict.fromkeys(tools) if n not in _LOOP_TOOLS]
        unknown = [n for n in names if n not in allowed]
        if not unknown:
            return names
        problems = []
        foreign = [repr(n) for n in unknown if n != DELEGATE]
        if foreign:
            problems.append(f"not among this run's tools: {', '.join(foreign)}")
        if DELEGATE in unknown:
            problems.append(
                f"a sub-agent of this run would be at depth {self._run.depth + 1}, the "
                "deepest allowed, so it cannot be given 'delegate'"
            )
        raise ToolError(
            f"{'; '.join(problems)}. No sub-agent was started. Name some of: "
            f"{', '.join(allowed) or 'none'} (or none); final_report and ask_user every "
            "sub-agent has anyway"
        )


def _progress_of(report: ProgressFn) -> Callable[[RunEvent], None]:
    """Show the child's turns and tool calls as the ``delegate`` call's progress."""
    turn = 0

    def on_event(event: RunEvent) -> None:
        nonlocal turn
        match event:
            case TurnStarted(turn=n, final=final):
                turn = n
                report(n, None, f"turn {n}" + (" (final)" if final else ""))
            case ToolStarted(name=name):
                report(turn, None, f"turn {turn}: running {name}")
            case _:
                pass

    return on_event


def _name_of(run: Parent) -> Callable[[str], str]:
    return run.agent.config.name_person


def stopped_here(control: RunControl) -> StopRequest | None:
    """The Stop or Abort a person asked of this child itself (not one its parent passed
    down), if that is what ended it; None otherwise."""
    request = control.request
    if request is None or request.source is StopSource.PARENT or not request.reason.by_person:
        return None
    return request


def child_report(
    result: RunResult, *, stopped: StopRequest | None = None, name: Callable[[str], str] = str
) -> str:
    """What the parent's model reads when a child ends: the four-part handoff, led by who
    stopped or aborted that child on its own (``stopped``; ``name`` renders them)."""
    h = result.handoff
    lines = []
    if stopped is not None:
        who = name(stopped.requested_by)
        if stopped.reason is StopReason.ABORT:
            lines.append(
                f"Sub-agent aborted by {who}: it was cut off at once and wrote no report. "
                "Carry on without it."
            )
        else:
            lines.append(
                f"Stopped by {who}: the sub-agent finished its step and reported what it had. "
                "Carry on with it."
            )
    lines += [
        f"Sub-agent {result.run_id} ended. Outcome: {result.label()} [{result.exit_code.value}]",
        f"Evidence: {h.evidence or 'none'}",
        f"Artifacts: {', '.join(h.artifacts) or 'none'}",
        f"Handoff: {h.next_step or 'none'}",
    ]
    if h.question:
        lines.append(f"Its question: {h.question}")
    if result.undelivered_guidance:
        lines.append("Guidance it ended before seeing:")
        lines += [f"- from {name(g.author)}: {g.text}" for g in result.undelivered_guidance]
    return "\n".join(lines)
