"""A run's final turn: one last model turn, forced by a stop or a limit, that may only
report (``final_report`` is its one tool, and the model must call it).

The model is told why the run ends (:func:`agent_core.values.prompts.final_turn_instruction`).
After a Stop the run moves to ``stopping`` first, and ``final_turn_timeout_s``
(:class:`~agent_core.run.config.AgentConfig`) bounds the turn: past it the run is aborted.
The turn gets one attempt when the run's retries are spent, or when a Stop cut a
rate-limit wait short. Its failure still ends the run, with what the run had done
(:meth:`~agent_core.run.tally.RunTally.progress_summary`) as the evidence.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent_core.run.model_turns import RetriesExhausted
from agent_core.run.steps import (
    assistant_message,
    default_outcome,
    ending_after_final_turn,
    final_report_of,
)
from agent_core.values.errors import ModelError
from agent_core.values.prompts import FinalTurnReason, final_turn_instruction
from agent_core.values.stop import StopReason, StopSource

if TYPE_CHECKING:
    from agent_core.run.config import AgentConfig
    from agent_core.run.conversation import Conversation
    from agent_core.run.model_turns import ModelTurns
    from agent_core.run.recording import RunRecorder
    from agent_core.run.steps import Ending
    from agent_core.run.tally import RunTally
    from agent_core.values.budget import Exhaustion
    from agent_core.values.chat import ChatMessage
    from agent_core.values.stop import RunControl

__all__ = ["FinalTurn"]


class FinalTurn:
    """The final turn of one run (see the module)."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        conversation: Conversation,
        turns: ModelTurns,
        tally: RunTally,
        control: RunControl,
        recorder: RunRecorder,
    ) -> None:
        self._config = config
        self._conversation = conversation
        self._turns = turns
        self._tally = tally
        self._control = control
        self._recorder = recorder

    async def take(
        self, reason: FinalTurnReason, *, exhaustion: Exhaustion | None, stop_cut_rate_limit: bool
    ) -> Ending:
        """The run's ending after its final turn, taken for ``reason``. ``exhaustion``: the
        budget that ran out, if one did. ``stop_cut_rate_limit``: a Stop ended a
        rate-limit wait (the turn gets one attempt, no more waits)."""
        if reason is FinalTurnReason.USER_STOP:
            await self._recorder.stopping()
        timer = self._arm_timeout(reason)
        budget = exhaustion if reason is FinalTurnReason.BUDGET else None
        spent = budget.sentence() if budget is not None else ""
        instruction: ChatMessage = {
            "role": "system",
            "content": final_turn_instruction(reason, spent),
        }
        request = self._conversation.final_request(instruction)
        one_attempt = reason is FinalTurnReason.MAX_RETRIES or stop_cut_rate_limit
        attempts = 1 if one_attempt else None
        cause = self._tally.last_error if reason is FinalTurnReason.MAX_RETRIES else None
        how = self._config.how_to_continue
        try:
            response = await self._turns.call(request, final=True, attempts=attempts, reason=reason)
        except (RetriesExhausted, ModelError) as exc:
            error = exc.error if isinstance(exc, RetriesExhausted) else exc
            return ending_after_final_turn(
                reason,
                None,
                "",
                how=how,
                default_outcome=default_outcome(reason, error),
                error=str(error),
                fallback_evidence=self._tally.progress_summary(error),
                cause=cause,
                spent=spent,
            )
        finally:
            if timer is not None:
                timer.cancel()
        self._conversation.add([instruction, assistant_message(response)])
        return ending_after_final_turn(
            reason,
            final_report_of(response),
            response.text,
            how=how,
            default_outcome=default_outcome(reason, self._tally.last_error),
            fallback_evidence=self._tally.progress_summary(None),
            cause=cause,
            spent=spent,
        )

    def _arm_timeout(self, reason: FinalTurnReason) -> asyncio.TimerHandle | None:
        """After a Stop: the Abort that ``final_turn_timeout_s`` sends, if it is set."""
        timeout = self._config.final_turn_timeout_s
        if reason is not FinalTurnReason.USER_STOP or timeout is None:
            return None
        return asyncio.get_running_loop().call_later(
            timeout,
            lambda: self._control.request_stop(
                StopReason.ABORT, "system:final-turn-timeout", source=StopSource.TIMER
            ),
        )
