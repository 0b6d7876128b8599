"""The agent loop: one :class:`Run` per request, with Stop, Abort and Shutdown.

A run's work happens in an inner task that the run's :class:`RunControl` can cancel.
:meth:`Run.run` awaits it and is the one place that turns an ending — natural, forced,
or cancelled — into exactly one :class:`RunResult` and one terminal state::

    run()  ── creates ──► _drive() task ◄── cancelled by RunControl on abort/shutdown
      │                      │
      │                      ├─ step boundary: stop? limits? → final turn (only final_report)
      │                      ├─ model turn (streamed; retries wait interruptibly)
      │                      └─ tool batch (TaskGroup: cancelled together; a
      │                         ``delegate`` call runs a child Run inside its task)
      └─ Ending → RunResult → store (compare-and-set) → RunFinished event

The loop decides when the run ends and how; the parts it drives have modules of their
own: what a reply does to the conversation, its tool batch included
(:mod:`agent_core.run.conversation`), the final turn (:mod:`agent_core.run.final_turn`),
and the ending made the run's one result and told to everyone
(:mod:`agent_core.run.finaliser`).

A stop never cancels anything: it is read at the step boundary. Abort and shutdown cancel
the inner task; the model adapter closes its HTTP stream during that unwinding, so the
run reports its end only after the connection is closed. Child runs (sub-agents,
:mod:`agent_core.run.delegation`) get every request of their parent with the same reason, so a
Stop lets each finish and report before the parent's batch completes, and an Abort
cancels them with it.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core.process.tracing import RunTrace, run_trace
from agent_core.run.approval_gate import ApprovalGate
from agent_core.run.conversation import Conversation
from agent_core.run.delegation import MAX_DEPTH, SUB_AGENT_NOTE, Delegation
from agent_core.run.final_turn import FinalTurn
from agent_core.run.finaliser import Finaliser
from agent_core.run.model_turns import ModelTurns, RetriesExhausted, StopDuringWait
from agent_core.run.recording import RunRecorder
from agent_core.run.step_log import InterruptedStep, StepLog
from agent_core.run.steps import (
    AskedUser,
    Continue,
    Ending,
    FinalAnswer,
    Reported,
    Step,
    budget_spent_before_work,
    context_exhausted_ending,
    crashed_ending,
    ending_for_step,
    model_failed_ending,
    rate_limited_ending,
    stopped_before_work,
)
from agent_core.run.tally import RunTally
from agent_core.run.tool_reports import ToolReports
from agent_core.tools.toolbox import Tool, Toolbox
from agent_core.values.budget import Budget
from agent_core.values.clock import utcnow
from agent_core.values.ended import EndedBecause
from agent_core.values.errors import ContextOverflow, FatalModelError, RateLimited
from agent_core.values.events import EventHub, GuidanceDelivered, StopRequested
from agent_core.values.guidance import Guidance, GuidanceInbox
from agent_core.values.outcomes import ExitCode, Outcome, RunResult
from agent_core.values.prompts import FinalTurnReason, resumed_note
from agent_core.values.records import ThreadKey
from agent_core.values.stop import RunControl, StopReason, StopSource

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core.ports import Approvals, ChatModel, RunStore
    from agent_core.run.config import AgentConfig
    from agent_core.values.budget import Exhaustion, Spent
    from agent_core.values.chat import ChatMessage
    from agent_core.values.records import Checkpoint, ThreadKey
    from agent_core.values.stop import StopRequest

__all__ = ["Run", "current_run"]

log = structlog.get_logger("agent_core.run.loop")

_current_run: contextvars.ContextVar[Run] = contextvars.ContextVar("threadpilot_run")


def current_run() -> Run:
    """The run whose tool is executing now (for tools that start child runs)."""
    return _current_run.get()


class RunSetup(Protocol):
    """What a run is made from, as the run reads it: the model, the tools, the limits,
    the store and the approvals (:class:`agent_core.run.agent.Agent` is one; the loop
    does not import it)."""

    @property
    def model(self) -> ChatModel: ...
    @property
    def tools(self) -> Sequence[Tool]: ...
    @property
    def config(self) -> AgentConfig: ...
    @property
    def store(self) -> RunStore | None: ...
    @property
    def approvals(self) -> Approvals | None: ...
    def for_child(self, tools: Sequence[Tool]) -> RunSetup: ...
    def new_run(
        self, task: str, *, requester: str, thread: ThreadKey, parent: Run, may_delegate: bool
    ) -> Run: ...


class Run:
    """One agent session answering one request. Call :meth:`run` exactly once."""

    depth: int
    """0 for a top-level run, 1 for its children, 2 (:data:`MAX_DEPTH`) at most."""
    budget: Budget
    """The request's budget: a sub-agent spends from its parent's (``spent``: what a
    continued request had spent before this run)."""
    continued_from: str | None
    """The run whose context filled up and whose summary this run starts from."""
    _exhaustion: Exhaustion | None
    """The budget that ran out and forced this run's final turn, if one did."""
    _interrupted: InterruptedStep | None
    """The step the checkpoint was written in, cut short: finished before any turn."""
    _stop_cut_rate_limit: bool
    """A Stop ended a rate-limit wait: the final turn gets one attempt, no more waits."""

    def __init__(
        self,
        agent: RunSetup,
        run_id: str,
        task: str,
        *,
        requester: str,
        thread: ThreadKey,
        history: Sequence[ChatMessage],
        parent: Run | None,
        restore: Checkpoint | None = None,
        may_delegate: bool = True,
        resumed_because: EndedBecause = EndedBecause.SHUTDOWN,
        continued_from: str | None = None,
        spent: Spent | None = None,
        trace_links: Sequence[str] = (),
    ) -> None:
        self.id = run_id
        self.task = task
        self.requester = requester
        self.thread = thread
        self.parent = parent
        self.depth = _depth_under(parent)
        self.agent = agent
        self.budget = Budget(agent.config.budget, spent=spent) if parent is None else parent.budget
        self.continued_from = continued_from
        self.control = RunControl(run_id)
        self.events = EventHub()
        self._tally = RunTally()
        self._children: list[Run] = []
        self._guidance = GuidanceInbox()
        self._exhaustion = None
        self._stop_cut_rate_limit = False
        self._started = False
        self._log = log.bind(run_id=run_id, thread=str(thread), requester=requester)
        self._recorder = RunRecorder(agent.store, self)
        self._trace = self._new_trace(trace_links)
        self._turns = self._new_model_turns()
        self._conversation = self._new_conversation(history, may_delegate=may_delegate)
        self._interrupted = None if restore is None else self._restore(restore, resumed_because)
        self._final_turn = self._new_final_turn()
        self._finaliser = self._new_finaliser()
        self.control.add_listener(self._on_stop_requested)
        if parent is not None:
            parent.control.adopt(self.control)

    # -- the objects a run is made of, wired as they are built --------------------------

    def _new_trace(self, links: Sequence[str]) -> RunTrace:
        """This run's trace, under its parent's for a sub-agent (``links``: see
        :func:`run_trace`)."""
        parent = self.parent
        return run_trace(
            run_id=self.id,
            thread=self.thread,
            model=self.agent.model,
            parent=parent._trace if parent is not None else None,
            links=links,
        )

    def _new_model_turns(self) -> ModelTurns:
        return ModelTurns(
            self.id,
            self.agent.model,
            self.agent.config.retry,
            tally=self._tally,
            events=self.events,
            trace=self._trace,
            budget=self.budget,
            control=self.control,
            log=self._log,
        )

    def _new_conversation(
        self, history: Sequence[ChatMessage], *, may_delegate: bool
    ) -> Conversation:
        """The conversation as the run starts it (the system prompt, a sub-agent's note,
        the thread's history, the task), with the tools its replies call."""
        config = self.agent.config
        step_log = StepLog(self._write_step)
        toolbox = Toolbox(
            self._tools(may_delegate),
            timeout_s=config.tool_timeout_s,
            gate=self._approval_gate(),
            calls=step_log,
        )
        messages: list[ChatMessage] = [
            {"role": "system", "content": config.system_prompt},
            *([{"role": "system", "content": SUB_AGENT_NOTE}] if self.parent is not None else []),
            *history,
            {"role": "user", "content": self.task},
        ]
        reports = ToolReports(
            self.id, tally=self._tally, events=self.events, trace=self._trace, log=self._log
        )
        return Conversation(
            messages,
            toolbox=toolbox,
            step_log=step_log,
            reports=reports,
            control=self.control,
            budget=self.budget,
            tally=self._tally,
            per_step=config.max_tool_calls_per_step,
            log=self._log,
        )

    def _tools(self, may_delegate: bool) -> Sequence[Tool]:
        """The agent's tools, with ``delegate`` when this run may start sub-agents (it is
        this run's own tool: it starts children of this run)."""
        allowed = self.agent.config.max_children_per_run > 0
        if not (may_delegate and allowed and self.depth < MAX_DEPTH):
            return self.agent.tools
        return (*self.agent.tools, Delegation(self).tool)

    def _approval_gate(self) -> ApprovalGate | None:
        """Where this run's calls that need a person's yes wait (None: no approvals)."""
        approvals = self.agent.approvals
        if approvals is None:
            return None
        return ApprovalGate(
            approvals,
            run_id=self.id,
            requester=self.requester,
            thread=self.thread,
            control=self.control,
            events=self.events,
            timeout_s=self.agent.config.approval_timeout_s,
            time_left=self.budget.time_left,
        )

    def _restore(
        self, restore: Checkpoint, resumed_because: EndedBecause
    ) -> InterruptedStep | None:
        """Resumed after an interruption: the conversation continues from the checkpoint
        (a step cut short is finished first, without asking the model again, and that
        step is returned), and the model is told what happened in between."""
        note: ChatMessage = {"role": "system", "content": resumed_note(resumed_because)}
        interrupted = self._conversation.resume_from(restore, note)
        self._tally.turns = restore.turn
        self._tally.steps_completed = restore.turn
        if interrupted is not None:
            self._tally.steps_completed = max(0, restore.turn - 1)
        return interrupted

    def _new_final_turn(self) -> FinalTurn:
        return FinalTurn(
            config=self.agent.config,
            conversation=self._conversation,
            turns=self._turns,
            tally=self._tally,
            control=self.control,
            recorder=self._recorder,
        )

    def _new_finaliser(self) -> Finaliser:
        parent = self.parent
        return Finaliser(
            self.id,
            config=self.agent.config,
            control=self.control,
            parent_control=None if parent is None else parent.control,
            own_budget=self.budget if parent is None else None,
            tally=self._tally,
            guidance=self._guidance,
            children=self._children,
            continued_from=self.continued_from,
            stored=self._stored,
            recorder=self._recorder,
            events=self.events,
            trace=self._trace,
            log=self._log,
        )

    # -- public API --------------------------------------------------------------------

    @property
    def result(self) -> RunResult | None:
        """The run's one result, once it has ended."""
        return self._finaliser.result

    @property
    def messages(self) -> list[ChatMessage]:
        return list(self._conversation.messages)

    @property
    def trace_context(self) -> str | None:
        """The W3C ``traceparent`` of this run's trace once it started; None untraced."""
        return self._trace.traceparent

    @property
    def children(self) -> tuple[Run, ...]:
        """The child runs started so far (sub-agents), oldest first."""
        return tuple(self._children)

    def request_stop(
        self, reason: StopReason, requested_by: str, *, source: StopSource = StopSource.LOCAL
    ) -> bool:
        """Ask the run to end; see :meth:`RunControl.request_stop`."""
        return self.control.request_stop(reason, requested_by, source=source)

    def add_guidance(self, guidance: Guidance) -> bool:
        """Queue a person's reply for the next turn boundary (:mod:`agent_core.values.guidance`).

        False if the run has ended or this reply was already queued.
        """
        queued = self._guidance.add(guidance)
        if queued:
            self._log.info("guidance.queued", guidance_id=guidance.id, author=guidance.author)
        return queued

    def child(
        self, task: str, *, tools: Sequence[Tool] | None = None, may_delegate: bool = True
    ) -> Run:
        """A sub-agent run: it inherits every stop and abort of this run.

        ``tools``: this run's tools by default. ``may_delegate``: whether the child is
        offered ``delegate`` itself (only ever while it is under :data:`MAX_DEPTH`).
        """
        if self.depth >= MAX_DEPTH:
            raise ValueError(
                f"run {self.id} is at depth {self.depth}, the deepest allowed: "
                "it cannot start a sub-agent"
            )
        agent = self.agent.for_child(self.agent.tools if tools is None else tools)
        child = agent.new_run(
            task,
            requester=self.requester,
            thread=self.thread,
            parent=self,
            may_delegate=may_delegate,
        )
        self._children.append(child)
        return child

    async def run(self) -> RunResult:
        if self._started:
            raise RuntimeError(f"run {self.id} was already started")
        self._started = True
        self.budget.start()
        started_at = utcnow()
        self._trace.start()
        try:
            try:
                ending = await self._start_and_drive()
            except asyncio.CancelledError:
                if _cancelled_from_outside():
                    # Not ours to swallow: record a terminal state (bounded), then propagate.
                    self.control.request_stop(
                        StopReason.SHUTDOWN, "system:cancelled", source=StopSource.TASK
                    )
                    await self._finaliser.drain(started_at)
                    raise
                if not self.control.cancel_issued:
                    raise  # cancelled by something inside the run, not by us: a bug
                ending = self._finaliser.cancelled()
            except Exception as exc:
                # A bug or a store failure must still leave the run with a terminal state.
                self._log.exception("run.crashed")
                ending = crashed_ending(exc, self._how)
            return await self._finaliser.finish(ending, started_at)
        finally:
            # Here, not in the model's stream: a cancellation is not an exception to the
            # tracing API, and spans left open by one are ended with the run's.
            self._trace.end(self.result)

    # -- the loop ----------------------------------------------------------------------

    async def _start_and_drive(self) -> Ending:
        # Recording the start is inside run()'s handlers: a run cancelled or crashed
        # while it is being recorded still ends with exactly one result.
        await self._recorder.started()
        self._log.info("run.started", task=self.task[:200], parent=self.parent and self.parent.id)
        inner = self.control.start(self._drive_in_context(), name=f"run:{self.id}")
        return await inner

    async def _drive_in_context(self) -> Ending:
        _current_run.set(self)
        return await self._drive()

    async def _drive(self) -> Ending:
        if self._interrupted is not None:
            step = await self._conversation.finish_interrupted(self._interrupted)
            ending = await self._after_step(step)
            if ending is not None:
                return ending
        while True:
            forced = self._at_boundary()
            if isinstance(forced, Ending):
                return forced
            if forced is not None:
                return await self._take_final_turn(forced)
            self._deliver_guidance()
            try:
                response = await self._turns.call(self._conversation.request(), final=False)
            except StopDuringWait as wait:
                # After a rate limit the final turn gets one attempt: the provider has
                # just said it will refuse for a while, and the person asked to end now.
                self._stop_cut_rate_limit = wait.after_rate_limit
                continue
            except RetriesExhausted as exc:
                self._tally.last_error = exc.error
                if isinstance(exc.error, RateLimited) and self.control.reason is StopReason.STOP:
                    # Stopped while the last attempt was being refused: the person's stop
                    # is the ending, with one final-turn attempt (as after a cut wait).
                    self._stop_cut_rate_limit = True
                    continue
                if isinstance(exc.error, RateLimited):
                    await self._checkpoint_unfinished_turn()
                    return rate_limited_ending(
                        exc.error,
                        exc.error.retry_after,
                        self._tally,
                        how=self._how,
                        stored=self._stored,
                    )
                return await self._take_final_turn(FinalTurnReason.MAX_RETRIES)
            except ContextOverflow as exc:
                self._trace.context_full(self.agent.config.context_window, None)
                await self._checkpoint_unfinished_turn()
                return context_exhausted_ending(
                    exc, self._tally, how=self._how, stored=self._stored
                )
            except FatalModelError as exc:
                return model_failed_ending(
                    exc, Outcome.FAILED, ExitCode.ERROR, self._tally, how=self._how
                )
            ending = await self._after_step(await self._conversation.take_step(response))
            if ending is not None:
                return ending

    async def _after_step(self, step: Step) -> Ending | None:
        """Checkpoint the step that ended; the run's ending if it ends with it."""
        self._conversation.close_step()
        self._tally.steps_completed += 1
        await self._checkpoint(self._tally.turns)
        match step:
            case Continue():
                return None
            case FinalAnswer() | Reported() | AskedUser():
                if self._guidance.pending and self.control.reason is None:
                    # Someone wrote while the model was answering: that answer did
                    # not see it, so the run goes on for one more turn with it.
                    return None
                return ending_for_step(step)

    def _at_boundary(self) -> Ending | FinalTurnReason | None:
        """Between steps: is there a stop to honour or a limit that forces the end?"""
        if self.control.reason is StopReason.STOP:
            self._finaliser.honour_stop()
            if self._tally.steps_completed == 0:
                return stopped_before_work(self._how)
            return FinalTurnReason.USER_STOP
        spent = self.budget.exhaustion()
        if spent is not None:
            self._exhaustion = spent
            self._log.info(
                "budget.spent", budget=spent.kind.value, spent=spent.spent, limit=spent.limit
            )
            self._trace.budget_spent(spent)
            if self._tally.steps_completed == 0:
                return budget_spent_before_work(spent.sentence(), self._how)
            return FinalTurnReason.BUDGET
        if self._tally.turns >= self.agent.config.max_turns:
            return FinalTurnReason.MAX_TURNS
        window = self.agent.config.context_window
        if (
            window
            and self._tally.last_usage.total_tokens >= window * self.agent.config.context_threshold
        ):
            self._trace.context_full(window, self._tally.last_usage.total_tokens)
            return FinalTurnReason.TOKEN_LIMIT
        return None

    async def _take_final_turn(self, reason: FinalTurnReason) -> Ending:
        """One last model turn that may only report (:mod:`agent_core.run.final_turn`)."""
        return await self._final_turn.take(
            reason, exhaustion=self._exhaustion, stop_cut_rate_limit=self._stop_cut_rate_limit
        )

    def _deliver_guidance(self) -> None:
        """Put every queued reply into the conversation for the request about to go out."""
        taken = self._guidance.take()
        if not taken:
            return
        self._conversation.add(g.message() for g in taken)
        self._log.info("guidance.delivered", guidance_ids=[g.id for g in taken])
        self.events.emit(GuidanceDelivered(self.id, self._tally.turns + 1, taken))
        self._trace.guidance_delivered(self._tally.turns + 1, len(taken))

    # -- helpers -----------------------------------------------------------------------

    @property
    def _how(self) -> str:
        """How a person continues after this run ends, in its surface's words."""
        return self.agent.config.how_to_continue

    @property
    def _stored(self) -> bool:
        """The run has a store: its checkpoints are kept, so it can be resumed."""
        return self.agent.store is not None

    async def _checkpoint_unfinished_turn(self) -> None:
        """Store the conversation as the turn that failed would have seen it (guidance
        delivered for it included), so a resumed or continued run starts from there."""
        await self._checkpoint(self._tally.steps_completed)

    async def _checkpoint(self, turn: int) -> None:
        """Store the conversation at a step boundary, with what the request has spent."""
        await self._recorder.checkpoint(
            turn, self._conversation.messages, spent=self.budget.spent()
        )

    async def _write_step(
        self, turn: int, messages: Sequence[ChatMessage], started: tuple[str, ...]
    ) -> None:
        """The step log's write: the step so far, with what the request has spent."""
        await self._recorder.checkpoint(turn, messages, started=started, spent=self.budget.spent())

    def _on_stop_requested(self, request: StopRequest) -> None:
        self.events.emit(
            StopRequested(self.id, request.reason, request.requested_by, request.source)
        )
        self._recorder.stop_requested(request)
        self._trace.stop_requested(request)


def _depth_under(parent: Run | None) -> int:
    """The depth of a run started under ``parent`` (a top-level run's: 0)."""
    depth = 0 if parent is None else parent.depth + 1
    if depth > MAX_DEPTH:
        raise ValueError(f"a run may be at most {MAX_DEPTH} levels deep, not {depth}")
    return depth


def _cancelled_from_outside() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
