"""A run's conversation with its model, and what each of the model's replies does to it.

The messages are the run's memory: its system prompt, the thread's history and the task,
then each reply and its calls' results (and what the loop adds: guidance, the final
turn's instruction). A step takes one reply (:meth:`Conversation.take_step`):

- no tool calls: the model answered;
- a valid ``final_report`` or ``ask_user`` call ends the run (the reply's other calls are
  answered "not run", so the stored conversation stays valid);
- a Stop that landed while the reply streamed: its calls are new work, closed unrun;
- otherwise the calls the limits admit (:func:`agent_core.values.budget.admit_calls`) run
  as one batch once the reply is checkpointed (:class:`~agent_core.run.step_log.StepLog`),
  and every result joins in the reply's call order.

A resumed run continues from its checkpoint (:meth:`Conversation.resume_from`) and
finishes a step cut short without asking the model again
(:meth:`Conversation.finish_interrupted`); the model is told it was resumed once every
call of its last reply is answered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core.run.step_log import in_call_order, interrupted_step, unknown_effect
from agent_core.run.steps import (
    AskedUser,
    Continue,
    FinalAnswer,
    Reported,
    Step,
    assistant_message,
    parse_ask,
    parse_report,
    tool_result,
)
from agent_core.tools.toolbox import ASK_USER, FINAL_REPORT, gather_tools
from agent_core.values.budget import admit_calls
from agent_core.values.chat import ModelRequest
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from agent_core.run.step_log import InterruptedStep, StepLog
    from agent_core.run.tally import RunTally
    from agent_core.run.tool_reports import ToolReports
    from agent_core.tools.toolbox import Toolbox
    from agent_core.values.budget import Budget
    from agent_core.values.chat import ChatMessage, ModelResponse, ToolCall
    from agent_core.values.records import Checkpoint
    from agent_core.values.stop import RunControl

__all__ = ["Conversation"]

_LOOP_TOOLS = frozenset({FINAL_REPORT.name, ASK_USER.name})
"""The tools the loop answers itself: they end the run, they do not run."""


class Conversation:
    """The messages of one run and the steps its replies take (see the module).

    ``messages``: the conversation so far. ``toolbox`` runs the calls and reports them to
    ``step_log`` (its call log); ``reports`` tells the run's listeners about them.
    ``per_step``: how many calls one reply may have run.
    """

    def __init__(
        self,
        messages: list[ChatMessage],
        *,
        toolbox: Toolbox,
        step_log: StepLog,
        reports: ToolReports,
        control: RunControl,
        budget: Budget,
        tally: RunTally,
        per_step: int,
        log: Any,
    ) -> None:
        self._messages = messages
        self._toolbox = toolbox
        self._step_log = step_log
        self._reports = reports
        self._control = control
        self._budget = budget
        self._tally = tally
        self._per_step = per_step
        self._log = log
        self._resumed_note: ChatMessage | None = None

    @property
    def messages(self) -> Sequence[ChatMessage]:
        """The conversation as it stands (the run's own list, not a copy)."""
        return self._messages

    def request(self) -> ModelRequest:
        """The next turn's request: the conversation, and every tool the model may call."""
        return ModelRequest(self._messages, tools=[*self._toolbox.specs, FINAL_REPORT, ASK_USER])

    def final_request(self, instruction: ChatMessage) -> ModelRequest:
        """The final turn's request: ``instruction`` last, and only ``final_report``."""
        return ModelRequest(
            [*self._messages, instruction], tools=[FINAL_REPORT], tool_choice=FINAL_REPORT.name
        )

    def add(self, messages: Iterable[ChatMessage]) -> None:
        """Append ``messages`` (guidance for the next turn, the final turn's exchange)."""
        self._messages.extend(messages)

    def resume_from(self, checkpoint: Checkpoint, note: ChatMessage) -> InterruptedStep | None:
        """Continue from ``checkpoint``, the model told ``note`` once every call of its
        last reply is answered; the step the checkpoint was cut short in, if it was."""
        self._resumed_note = note
        interrupted = interrupted_step(checkpoint)
        self._messages = list(checkpoint.messages)
        if interrupted is None:
            self._note_resumed()
        return interrupted

    def close_step(self) -> None:
        """The step has ended: its checkpoint is the loop's own from now on."""
        self._step_log.close()

    async def take_step(self, response: ModelResponse) -> Step:
        calls = response.tool_calls
        self._messages.append(assistant_message(response))
        if not calls:
            return FinalAnswer(response.text)
        for call in calls:
            if call.name == FINAL_REPORT.name and (report := parse_report(call.arguments)):
                self._close_calls(calls, answered=call, note="not run: the run ended")
                return Reported(report, response.text)
            if call.name == ASK_USER.name and (question := parse_ask(call.arguments)):
                self._close_calls(calls, answered=call, note="not run: the run ended")
                return AskedUser(question, response.text)
        if self._control.reason is StopReason.STOP:
            # The stop landed while this answer streamed: its tool calls are new work.
            self._close_calls(calls, answered=None, note="not run: the user asked to stop")
            return Continue()
        admitted, refused = admit_calls(
            [c for c in calls if c.name not in _LOOP_TOOLS],
            per_step=self._per_step,
            budget=self._budget,
        )
        if refused:
            self._log.info("tools.refused", calls=len(refused), first=refused[0][1])
        self._messages.extend(tool_result(call, error) for call, error in refused)
        for call in calls:
            if call.name in _LOOP_TOOLS:  # a malformed final_report / ask_user
                self._messages.append(
                    tool_result(
                        call, f"error: {call.name} needs valid JSON arguments matching its schema"
                    )
                )
        await self._run_calls(admitted)
        in_call_order(self._messages)
        return Continue()

    async def finish_interrupted(self, step: InterruptedStep) -> Step:
        """Finish the step a checkpoint was written in, without asking the model again:
        a call that had started is never run twice (its effect is unknown), the others
        run now (a pending approval is the same one, asked for the same call)."""
        self._log.info(
            "step.resumed",
            turn=self._tally.turns,
            to_run=[c.id for c in step.to_run],
            unknown=[c.id for c in step.unknown],
        )
        self._messages.extend(tool_result(call, unknown_effect(call)) for call in step.unknown)
        if self._control.reason is StopReason.STOP:
            self._close_calls(step.to_run, answered=None, note="not run: the user asked to stop")
        else:
            await self._run_calls(step.to_run)
        in_call_order(self._messages)
        self._note_resumed()
        return Continue()

    async def _run_calls(self, calls: Sequence[ToolCall]) -> None:
        """Run the step's ``calls`` once the step so far is checkpointed (the reply,
        before any of them runs); their results join the conversation in ``calls``'
        order."""
        if not calls:
            return  # nothing runs: the step's own checkpoint follows at once
        await self._step_log.replied(self._tally.turns, self._messages)
        outcomes = await gather_tools(
            self._toolbox,
            calls,
            self._reports.started,
            self._reports.done,
            self._reports.progress,
        )
        self._messages.extend(o.message() for o in outcomes)

    def _note_resumed(self) -> None:
        """Tell the model its run was resumed (once every call of its reply is answered:
        nothing may come between a reply and its calls' results)."""
        if self._resumed_note is not None:
            self._messages.append(self._resumed_note)
            self._resumed_note = None

    def _close_calls(
        self, calls: Sequence[ToolCall], *, answered: ToolCall | None, note: str
    ) -> None:
        """Answer every call of a step so the stored conversation stays valid."""
        for call in calls:
            self._messages.append(tool_result(call, "recorded" if call is answered else note))
