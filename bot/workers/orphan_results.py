"""The results written for runs whose own loop never wrote one: a run abandoned before it
started (:func:`stored_result`), and a run whose worker went away (:func:`orphan_result`:
ended by the person's stop request if one is pending, else as a lost worker, from its
last checkpoint). The reconciler writes them (:mod:`bot.workers.reconciler`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import (
    EndedBecause,
    ExitCode,
    Handoff,
    Outcome,
    RunResult,
    StopReason,
    Timings,
    Usage,
    ended_by_person,
    strongest,
)
from bot import messages

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core import Checkpoint, RunRecord, StopRequestRecord

__all__ = ["orphan_result", "stored_result"]


def stored_result(record: RunRecord) -> RunResult:
    """The terminal run's stored result; for a run abandoned before it started (its status
    post failed, so nothing ran and no result was stored), one that says so."""
    if record.result is not None:
        return RunResult.from_dict(record.result)
    outcome = record.outcome or Outcome.FAILED
    return RunResult(
        run_id=record.id,
        outcome=outcome,
        exit_code=record.exit_code or ExitCode.ERROR,
        handoff=Handoff(outcome, evidence=messages.STATUS_POST_IN_DOUBT),
        stop_reason=record.stop_reason,
        turns=0,
        usage=Usage(),
        timings=Timings(record.created_at, record.updated_at),
    )


def orphan_result(
    record: RunRecord,
    stops: list[StopRequestRecord],
    checkpoint: Checkpoint | None,
    now: datetime,
    *,
    answered: bool = False,
) -> RunResult:
    """The ending of a run whose worker went away, from what the database knows.

    ``answered``: its final message reached Slack, only its terminal write was lost. It
    is recorded as ended with no way to resume (that would replace the answer).
    """
    turns = checkpoint.turn if checkpoint else 0
    person = strongest(r for r in stops if r.kind.by_person)
    if answered:
        return _ending_unrecorded(record, now, turns, person)
    if person is not None:
        return ended_by_person(
            record.id,
            person.kind,
            person.requested_by,
            evidence=messages.worker_lost_stopped(turns),
            next_step=messages.default_next_step(Outcome.USERINTERLUDE),
            turns=turns,
            timings=Timings(record.created_at, now, person.requested_at, None),
        )
    return _worker_lost(record, now, checkpoint)


def _ending_unrecorded(
    record: RunRecord, now: datetime, turns: int, person: StopRequestRecord | None
) -> RunResult:
    """A run whose final message reached Slack and only its terminal write was lost."""
    handoff = Handoff(
        Outcome.FAILED,
        evidence=messages.ENDING_NOT_RECORDED,
        next_step=messages.ENDING_NOT_RECORDED_NEXT_STEP,
    )
    return RunResult(
        run_id=record.id,
        outcome=handoff.outcome,
        exit_code=ExitCode.ERROR,
        handoff=handoff,
        stop_reason=None,
        turns=turns,
        usage=Usage(),
        timings=Timings(record.created_at, now, person.requested_at if person else None, None),
        ended_because=EndedBecause.UNKNOWN,
    )


def _worker_lost(record: RunRecord, now: datetime, checkpoint: Checkpoint | None) -> RunResult:
    """A run blocked by its lost worker, up to its ``checkpoint``: its resume goes on
    from there, with what the request had spent by then (a ``kill -9`` does not reset the
    request's budget)."""
    turns = checkpoint.turn if checkpoint else 0
    handoff = Handoff(
        Outcome.BLOCKED,
        evidence=messages.worker_lost_checkpointed(turns),
        next_step=messages.WORKER_LOST_NEXT_STEP,
    )
    return RunResult(
        run_id=record.id,
        outcome=handoff.outcome,
        exit_code=ExitCode.SHUTDOWN,
        handoff=handoff,
        stop_reason=StopReason.SHUTDOWN,
        turns=turns,
        usage=Usage(),
        timings=Timings(record.created_at, now, None, None),
        # Blocked by its lost worker (not a shutdown, which is what the stop reason says).
        ended_because=EndedBecause.WORKER_LOST,
        spent=checkpoint.spent if checkpoint else None,
    )
