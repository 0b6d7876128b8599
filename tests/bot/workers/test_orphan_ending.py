"""The ending written for a run whose worker went away names who stopped it as the run
itself would have: the first person to ask with the strongest request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_core import (
    ExitCode,
    Outcome,
    RunRecord,
    RunState,
    StopReason,
    StopRequestRecord,
    ThreadKey,
)
from bot.workers.orphan_results import orphan_result

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
THREAD = ThreadKey("T1", "C1", "1.0")
RECORD = RunRecord("run1", THREAD, "U0", "the task", state=RunState.STOPPING, created_at=T0)


def _stop(kind: StopReason, by: str, second: int) -> StopRequestRecord:
    at = T0 + timedelta(seconds=second)
    return StopRequestRecord(f"r{second}", "run1", THREAD, kind, by, requested_at=at)


def test_two_people_stopping_an_orphan_name_the_first() -> None:
    stops = [_stop(StopReason.STOP, "U1", 1), _stop(StopReason.STOP, "U2", 2)]
    result = orphan_result(RECORD, stops, None, T0 + timedelta(seconds=9))
    assert result.handoff.stopped_by == "U1"
    assert result.timings.stop_requested_at == T0 + timedelta(seconds=1)
    assert (result.outcome, result.exit_code) == (Outcome.USERINTERLUDE, ExitCode.USER_STOP)


def test_an_abort_outranks_an_earlier_stop_and_a_restart() -> None:
    stops = [
        _stop(StopReason.STOP, "U1", 1),
        _stop(StopReason.SHUTDOWN, "system:shutdown", 2),
        _stop(StopReason.ABORT, "U2", 3),
    ]
    result = orphan_result(RECORD, stops, None, T0 + timedelta(seconds=9))
    assert (result.handoff.stopped_by, result.exit_code) == ("U2", ExitCode.USER_ABORT)
    assert result.label() == "User interlude: aborted by U2"


def test_a_restart_alone_leaves_the_orphan_blocked() -> None:
    stops = [_stop(StopReason.SHUTDOWN, "system:shutdown", 1)]
    result = orphan_result(RECORD, stops, None, T0 + timedelta(seconds=9))
    assert (result.outcome, result.exit_code, result.handoff.stopped_by) == (
        Outcome.BLOCKED,
        ExitCode.SHUTDOWN,
        None,
    )
