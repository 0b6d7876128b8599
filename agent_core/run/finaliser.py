"""A run's finaliser: the :class:`~agent_core.run.steps.Ending` the loop decided, made
into the run's one result and told to everyone who waits for it.

Finishing closes the guidance inbox (what never reached the model goes with the result),
builds the result (:func:`agent_core.run.result.run_result`), releases the run from its
parent's control, writes it to the store (:meth:`RunRecorder.finished`), logs it and
emits :class:`~agent_core.values.events.RunFinished`. The finaliser also honours a stop
(the moment the run acts on a request: at a step boundary, or when its own control
cancelled its task) and, for a run cancelled from outside, finishes within
``cancel_drain_s`` (:meth:`Finaliser.drain`) while the caller re-raises the cancellation.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agent_core.run.result import run_result
from agent_core.run.steps import cancelled_ending
from agent_core.values.events import RunFinished, StopHonoured

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from agent_core.process.tracing import RunTrace
    from agent_core.run.config import AgentConfig
    from agent_core.run.recording import RunRecorder
    from agent_core.run.result import ChildRun
    from agent_core.run.steps import Ending
    from agent_core.run.tally import RunTally
    from agent_core.values.budget import Budget
    from agent_core.values.events import EventHub
    from agent_core.values.guidance import GuidanceInbox
    from agent_core.values.outcomes import RunResult
    from agent_core.values.stop import RunControl

__all__ = ["Finaliser"]

_CANCELLED_WRITE_S = 1.0
"""How long a terminal write cut off by the drain bound may take to unwind."""


class Finaliser:
    """How the run ``run_id`` ends (see the module); :attr:`result` once it has.

    ``parent_control``: the control of the run's parent, None for a top-level run.
    ``own_budget``: the request's budget when this run owns it (a top-level run: its
    result says what the request spent), None for a sub-agent. ``children``: the run's
    sub-agents, as the run keeps adding them. ``stored``: the run has a store, so its
    checkpoints are kept and it can be resumed.
    """

    def __init__(
        self,
        run_id: str,
        *,
        config: AgentConfig,
        control: RunControl,
        parent_control: RunControl | None,
        own_budget: Budget | None,
        tally: RunTally,
        guidance: GuidanceInbox,
        children: Sequence[ChildRun],
        continued_from: str | None,
        stored: bool,
        recorder: RunRecorder,
        events: EventHub,
        trace: RunTrace,
        log: Any,
    ) -> None:
        self._run_id = run_id
        self._config = config
        self._control = control
        self._parent_control = parent_control
        self._own_budget = own_budget
        self._tally = tally
        self._guidance = guidance
        self._children = children
        self._continued_from = continued_from
        self._stored = stored
        self._recorder = recorder
        self._events = events
        self._trace = trace
        self._log = log
        self.result: RunResult | None = None

    def honour_stop(self) -> None:
        """The run acts on the request in force now (the first time only)."""
        if self._control.honoured_at is None and self._control.reason is not None:
            self._control.mark_honoured()
            self._events.emit(StopHonoured(self._run_id, self._control.reason))
            self._trace.stop_honoured(self._control.reason)

    def cancelled(self) -> Ending:
        """The ending of a run whose task its own control cancelled (abort, shutdown)."""
        request = self._control.request
        assert request is not None, "cancelled without a stop request"
        self.honour_stop()
        return cancelled_ending(
            request.reason,
            self._tally,
            how=self._config.how_to_continue,
            stored=self._stored,
        )

    async def drain(self, started_at: datetime) -> None:
        """Record the ending of a run cancelled from outside, for at most
        ``cancel_drain_s`` (:class:`AgentConfig`); the caller re-raises the cancellation
        either way, so a slow store cannot turn it into a timeout or a failure.

        A write still hanging then is cancelled and logged: the row stays live, and the
        reconciler ends it as it ends a crashed worker's runs.
        """
        finish = asyncio.create_task(
            self.finish(self.cancelled(), started_at), name=f"finish:{self._run_id}"
        )
        limit = self._config.cancel_drain_s
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(finish)
        except TimeoutError:
            reason = self._control.reason
            self._log.warning(
                "run.ending_unrecorded",
                reason=None if reason is None else reason.value,
                waited_s=limit,
            )
        finally:
            # Also when cancelled again while draining: the write is not left behind.
            if not finish.done():
                finish.cancel()
                await asyncio.wait([finish], timeout=_CANCELLED_WRITE_S)

    async def finish(self, ending: Ending, started_at: datetime) -> RunResult:
        """Make ``ending`` the run's one result, store it and announce it."""
        undelivered = self._guidance.close()
        if undelivered:
            self._log.info("guidance.undelivered", guidance_ids=[g.id for g in undelivered])
        budget = self._own_budget
        result = run_result(
            ending,
            run_id=self._run_id,
            control=self._control,
            tally=self._tally,
            started_at=started_at,
            undelivered=undelivered,
            children=self._children,
            continued_from=self._continued_from,
            spent=budget.spent() if budget is not None else None,
        )
        self.result = result
        if self._parent_control is not None:
            self._parent_control.release(self._control)
        await self._recorder.finished(result)
        self._log.info(
            "run.finished",
            outcome=result.outcome.value,
            exit_code=result.exit_code.value,
            stop_reason=result.stop_reason and result.stop_reason.value,
            ended_because=result.ended_because.value,
            stopped_by=result.handoff.stopped_by,
            turns=result.turns,
        )
        self._events.emit(RunFinished(self._run_id, result))
        return result
