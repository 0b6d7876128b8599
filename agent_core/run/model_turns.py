"""A run's model requests: one turn streamed, retried with backoff (never sooner than a
``Retry-After``), each a ``chat`` span of the run's trace.

A Stop (or the time budget running out) ends a retry wait at once: :class:`StopDuringWait`
sends the run to its step boundary, and so to its final turn. Retries spent are
:class:`RetriesExhausted`. The final turn's own waits are not cut short: it is the run's
last word.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agent_core.values.errors import RateLimited, RetryableModelError
from agent_core.values.events import Retrying, StepRestarted, TextDelta, TurnFinished, TurnStarted
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from agent_core.models.retry import RetryPolicy
    from agent_core.ports import ChatModel
    from agent_core.process.tracing import RunTrace
    from agent_core.run.tally import RunTally
    from agent_core.values.budget import Budget
    from agent_core.values.chat import ModelRequest, ModelResponse
    from agent_core.values.errors import ModelError
    from agent_core.values.events import EventHub
    from agent_core.values.prompts import FinalTurnReason
    from agent_core.values.stop import RunControl

__all__ = ["ModelTurns", "RetriesExhausted", "StopDuringWait"]


class StopDuringWait(Exception):
    """A stop arrived while waiting to retry: go to the step boundary now.

    ``after_rate_limit``: the wait followed a rate limit, so the final turn gets one
    attempt (the provider has just said it will refuse for a while, and the person asked
    for the run to end now, not later)."""

    def __init__(self, *, after_rate_limit: bool) -> None:
        super().__init__("stopped while waiting to retry")
        self.after_rate_limit = after_rate_limit


class RetriesExhausted(Exception):
    def __init__(self, error: RetryableModelError) -> None:
        super().__init__(str(error))
        self.error = error


class ModelTurns:
    """The model requests of one run (:class:`agent_core.run.loop.Run`)."""

    def __init__(
        self,
        run_id: str,
        model: ChatModel,
        retry: RetryPolicy,
        *,
        tally: RunTally,
        events: EventHub,
        trace: RunTrace,
        budget: Budget,
        control: RunControl,
        log: Any,
    ) -> None:
        self._run_id = run_id
        self._model = model
        self._retry = retry
        self._tally = tally
        self._events = events
        self._trace = trace
        self._budget = budget
        self._control = control
        self._log = log

    async def call(
        self,
        request: ModelRequest,
        *,
        final: bool,
        attempts: int | None = None,
        reason: FinalTurnReason | None = None,
    ) -> ModelResponse:
        """One model turn, retried with backoff. Stop ends a retry wait unless ``final``."""
        policy = self._retry
        attempts = attempts or policy.max_attempts
        self._tally.turns += 1
        self._events.emit(TurnStarted(self._run_id, self._tally.turns, final=final))
        self._log.info("turn.started", turn=self._tally.turns, final=final)
        attempt = 0
        while True:
            attempt += 1
            self._tally.activity = "waiting for the model's answer"
            try:
                with self._trace.chat(
                    request.messages,
                    turn=self._tally.turns,
                    final=final,
                    reason=None if reason is None else reason.value,
                ) as chat:
                    response = await self._model.complete(request, self._on_text)
                    chat.answered(response)
            except RetryableModelError as exc:
                self._tally.attempt_failed(exc)
                retry_after = getattr(exc, "retry_after", None)
                if attempt >= attempts or (retry_after or 0) > policy.max_retry_after_s:
                    self._tally.gave_up()
                    raise RetriesExhausted(exc) from exc
                await self._wait_to_retry(attempt, policy.delay(attempt, retry_after), exc, final)
                continue
            self._tally.answered(response.usage)
            self._budget.charge(response.usage)
            self._events.emit(
                TurnFinished(self._run_id, self._tally.turns, self._tally.usage, response.usage)
            )
            return response

    async def _wait_to_retry(
        self, attempt: int, delay: float, error: ModelError, final: bool
    ) -> None:
        self._log.warning(
            "model.retrying", attempt=attempt, delay_s=round(delay, 3), error=str(error)
        )
        self._events.emit(Retrying(self._run_id, attempt, delay, str(error)))
        self._trace.retrying(attempt, delay, error)
        self._events.emit(StepRestarted(self._run_id, self._tally.turns))
        self._tally.activity = "waiting to retry the model"
        if final:
            await asyncio.sleep(delay)
            return
        # The time budget running out ends the wait as a Stop does (nothing else can
        # spend the budget while the run waits).
        left = self._budget.time_left()
        budget_first = left is not None and left < delay
        if self._control.reason is not StopReason.STOP:
            try:
                async with asyncio.timeout(left if budget_first else delay):
                    await self._control.wait_requested()
            except TimeoutError:
                if not budget_first:
                    return
        # A Stop ends the wait at once and goes to the final turn.
        raise StopDuringWait(after_rate_limit=isinstance(error, RateLimited))

    def _on_text(self, text: str) -> None:
        self._tally.activity = "streaming the model's answer"
        self._events.emit(TextDelta(self._run_id, text))
