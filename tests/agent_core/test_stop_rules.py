"""The stop rules every surface asks about, written once (agent_core.values.stop, outcomes):
which request is in force, whether a person asked, and the ending a person's stop
writes where the run's loop could not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent_core import (
    ExitCode,
    Outcome,
    RunControl,
    StopReason,
    StopRequestRecord,
    ThreadKey,
    Timings,
    ended_by_person,
    exit_code_of,
    strongest,
)

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
THREAD = ThreadKey("T1", "C1", "1.0")


def _request(kind: StopReason, by: str, second: int) -> StopRequestRecord:
    at = T0 + timedelta(seconds=second)
    return StopRequestRecord(f"r{second}", "run1", THREAD, kind, by, requested_at=at)


ORDERS = [
    [("stop", "U1"), ("stop", "U2")],
    [("stop", "U1"), ("abort", "U2"), ("abort", "U3")],
    [("shutdown", "system:shutdown"), ("stop", "U1"), ("abort", "U2")],
    [("stop", "U1"), ("shutdown", "system:shutdown"), ("stop", "U2")],
]


@pytest.mark.parametrize("order", ORDERS)
def test_the_stored_requests_in_force_is_the_one_the_live_run_keeps(
    order: list[tuple[str, str]],
) -> None:
    """The table and the run's own control agree on who stopped it, whichever worker
    reads it: the highest rank, and of those the first."""
    control = RunControl("run1")
    for kind, by in order:
        control.request_stop(StopReason(kind), by)
    stored = [_request(StopReason(kind), by, i) for i, (kind, by) in enumerate(order)]
    # Rows may come back in any order.
    found = strongest(reversed(stored))
    assert control.request is not None and found is not None
    assert (found.kind, found.requested_by) == (control.reason, control.request.requested_by)


def test_no_request_is_in_force_among_none() -> None:
    assert strongest([]) is None


def test_only_stop_and_abort_are_a_persons() -> None:
    assert [r for r in StopReason if r.by_person] == [StopReason.STOP, StopReason.ABORT]


def test_each_reason_has_its_exit_code() -> None:
    assert [exit_code_of(r) for r in (StopReason.STOP, StopReason.ABORT, StopReason.SHUTDOWN)] == [
        ExitCode.USER_STOP,
        ExitCode.USER_ABORT,
        ExitCode.SHUTDOWN,
    ]


@pytest.mark.parametrize("reason", [StopReason.STOP, StopReason.ABORT])
def test_a_person_ended_this_run_reads_as_their_interlude(reason: StopReason) -> None:
    result = ended_by_person(
        "run1",
        reason,
        "U1",
        evidence="It never started.",
        next_step="Mention me again.",
        turns=0,
        timings=Timings(T0, T0),
    )
    assert (result.outcome, result.exit_code, result.stop_reason) == (
        Outcome.USERINTERLUDE,
        exit_code_of(reason),
        reason,
    )
    verb = "aborted" if reason is StopReason.ABORT else "stopped"
    assert result.label() == f"User interlude: {verb} by U1"
    assert result.ended_because.value == "user_exit"


def test_a_restart_is_not_a_person_ending_a_run() -> None:
    with pytest.raises(ValueError, match="not shutdown"):
        ended_by_person(
            "run1",
            StopReason.SHUTDOWN,
            "system:shutdown",
            evidence="",
            next_step="",
            turns=0,
            timings=Timings(T0, T0),
        )
