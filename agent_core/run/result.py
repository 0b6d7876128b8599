"""A run's one result: its ending, as the loop decided it, made into the
:class:`~agent_core.values.outcomes.RunResult` everyone reads (the store, the Slack
surface, the terminal, a parent's ``delegate`` call): the four-part handoff, who stopped
it, why it ended (:func:`agent_core.values.ended.classify`), its usage and timings."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

from agent_core.values.clock import utcnow
from agent_core.values.ended import classify
from agent_core.values.outcomes import Handoff, RunResult, Timings

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from agent_core.run.steps import Ending
    from agent_core.run.tally import RunTally
    from agent_core.values.budget import Spent
    from agent_core.values.guidance import Guidance
    from agent_core.values.stop import RunControl

__all__ = ["ChildRun", "run_result"]


class ChildRun(Protocol):
    """What a child run offers its parent's result: its own result, once it has one."""

    @property
    def result(self) -> RunResult | None: ...


def run_result(
    ending: Ending,
    *,
    run_id: str,
    control: RunControl,
    tally: RunTally,
    started_at: datetime,
    undelivered: tuple[Guidance, ...],
    children: Iterable[ChildRun],
    continued_from: str | None,
    spent: Spent | None,
) -> RunResult:
    """The result of the run ``run_id`` that ended with ``ending``: ``spent`` is what the
    request has spent (a top-level run's), ``children`` its sub-agents so far."""
    request = control.request
    honoured = control.honoured_at is not None
    handoff = Handoff(
        ending.outcome,
        ending.evidence,
        ending.artifacts,
        ending.next_step,
        stopped_by=request.requested_by if request and honoured else None,
        question=ending.question,
    )
    return RunResult(
        run_id=run_id,
        outcome=ending.outcome,
        exit_code=ending.exit_code,
        handoff=handoff,
        stop_reason=request.reason if request else None,
        turns=tally.reached_turns,
        usage=tally.usage,
        timings=Timings(started_at, utcnow(), control.first_requested_at, control.honoured_at),
        final_text=ending.final_text,
        error=ending.error,
        children=tuple(c.result for c in children if c.result is not None),
        undelivered_guidance=undelivered,
        ended_because=classify(
            dataclasses.replace(ending.clues, stop=request.reason if request else None)
        ),
        retry_after_s=ending.retry_after_s,
        continued_from=continued_from,
        spent=spent,
    )
