"""Why a run ended (docs/stopping.md): the classifier's mappings and its priorities, and
``ended_because`` on every result, stored and read back."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.values.budget import Spent
from agent_core.values.chat import Usage
from agent_core.values.ended import PRIORITY, Clues, EndedBecause, classify
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    RateLimited,
    RetryableModelError,
    StorageError,
)
from agent_core.values.outcomes import ExitCode, Handoff, Outcome, RunResult, Timings
from agent_core.values.stop import StopReason

R = EndedBecause

# docs/stopping.md's order, restated here rather than read from the module.
DOCUMENTED_ORDER = [
    R.RATE_LIMIT,
    R.COMPLETED,
    R.CONTEXT_EXHAUSTED,
    R.BUDGET_EXHAUSTED,
    R.USER_EXIT,
    R.SHUTDOWN,
    R.WORKER_LOST,
    R.ERROR,
    R.UNKNOWN,
]


def test_the_priority_is_the_specs() -> None:
    assert list(PRIORITY) == DOCUMENTED_ORDER
    original = [R.RATE_LIMIT, R.COMPLETED, R.CONTEXT_EXHAUSTED, R.USER_EXIT, R.UNKNOWN]
    assert [r for r in PRIORITY if r in original] == original


def test_no_clue_is_unknown() -> None:
    assert classify(Clues()) is R.UNKNOWN


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (0, R.COMPLETED),
        (130, R.USER_EXIT),  # SIGINT, Ctrl+C
        (131, R.USER_EXIT),  # SIGQUIT, Ctrl+\
        (143, R.SHUTDOWN),  # SIGTERM
        (129, R.SHUTDOWN),  # SIGHUP: the terminal closed
        (137, R.WORKER_LOST),  # SIGKILL
        (139, R.ERROR),  # SIGSEGV
        (1, R.ERROR),
        (2, R.ERROR),
    ],
)
def test_exit_statuses(status: int, expected: EndedBecause) -> None:
    assert classify(Clues(exit_status=status)) is expected


@pytest.mark.parametrize(
    ("signum", "expected"),
    [
        (signal.SIGINT, R.USER_EXIT),
        (signal.SIGTERM, R.SHUTDOWN),
        (signal.SIGHUP, R.SHUTDOWN),
        (signal.SIGKILL, R.WORKER_LOST),
        (signal.SIGABRT, R.ERROR),
    ],
)
def test_signals(signum: int, expected: EndedBecause) -> None:
    assert classify(Clues(signal=signum)) is expected


@pytest.mark.parametrize(
    ("clues", "expected"),
    [
        (Clues(error=RateLimited("HTTP 429", retry_after=3)), R.RATE_LIMIT),
        (Clues(status=429), R.RATE_LIMIT),
        (Clues(code="rate_limit_exceeded"), R.RATE_LIMIT),
        (Clues(message="model endpoint answered HTTP 429: slow down"), R.RATE_LIMIT),
        (Clues(error=ContextOverflow("too long", status=400)), R.CONTEXT_EXHAUSTED),
        (Clues(status=400, code="context_length_exceeded"), R.CONTEXT_EXHAUSTED),
        (Clues(message="This model's maximum context length is 8192 tokens"), R.CONTEXT_EXHAUSTED),
        (Clues(error=FatalModelError("bad key", status=401)), R.ERROR),
        (Clues(error=RetryableModelError("HTTP 503", status=503)), R.ERROR),
        (Clues(error=StorageError("database gone")), R.ERROR),
        (Clues(status=500), R.ERROR),
        # A 429 that waiting does not cure: the account's quota is spent.
        (Clues(error=RateLimited("no quota", code="insufficient_quota")), R.ERROR),
        (Clues(message="You exceeded your current quota, check your plan"), R.ERROR),
        (Clues(answered=True), R.COMPLETED),
        (Clues(context_full=True), R.CONTEXT_EXHAUSTED),
        (Clues(stop=StopReason.STOP), R.USER_EXIT),
        (Clues(stop=StopReason.ABORT), R.USER_EXIT),
        (Clues(stop=StopReason.SHUTDOWN), R.SHUTDOWN),
        (Clues(worker_lost=True), R.WORKER_LOST),
    ],
)
def test_single_clues(clues: Clues, expected: EndedBecause) -> None:
    assert classify(clues) is expected


def test_a_ctrl_c_with_an_error_is_a_user_exit_but_a_rate_limit_wins() -> None:
    # The documented rule: user exit is lower than rate limit and context, not than errors.
    assert classify(Clues(exit_status=130, error=RuntimeError("boom"))) is R.USER_EXIT
    assert classify(Clues(exit_status=130, status=429)) is R.RATE_LIMIT
    assert classify(Clues(stop=StopReason.STOP, code="context_length_exceeded")) is (
        R.CONTEXT_EXHAUSTED
    )


# -- the priorities, as properties ----------------------------------------------------
# Each generator yields a clue and, stated independently, the reason it points to alone.

Clue = tuple[dict[str, Any], EndedBecause]

error_clues: st.SearchStrategy[Clue] = st.sampled_from(
    [
        ({"error": RateLimited("429", retry_after=1)}, R.RATE_LIMIT),
        ({"status": 429, "code": "rate_limit_exceeded"}, R.RATE_LIMIT),
        ({"error": ContextOverflow("too long", status=400)}, R.CONTEXT_EXHAUSTED),
        ({"code": "context_length_exceeded"}, R.CONTEXT_EXHAUSTED),
        ({"error": FatalModelError("HTTP 401", status=401)}, R.ERROR),
        ({"error": ValueError("a bug")}, R.ERROR),
        ({"status": 429, "code": "insufficient_quota"}, R.ERROR),
    ]
)
stop_clues: st.SearchStrategy[Clue] = st.sampled_from(
    [
        ({"stop": StopReason.STOP}, R.USER_EXIT),
        ({"stop": StopReason.ABORT}, R.USER_EXIT),
        ({"stop": StopReason.SHUTDOWN}, R.SHUTDOWN),
    ]
)
signal_clues: st.SearchStrategy[Clue] = st.sampled_from(
    [
        ({"signal": signal.SIGINT}, R.USER_EXIT),
        ({"signal": signal.SIGTERM}, R.SHUTDOWN),
        ({"signal": signal.SIGHUP}, R.SHUTDOWN),
        ({"signal": signal.SIGKILL}, R.WORKER_LOST),
    ]
)
exit_clues: st.SearchStrategy[Clue] = st.sampled_from(
    [
        ({"exit_status": 0}, R.COMPLETED),
        ({"exit_status": 130}, R.USER_EXIT),
        ({"exit_status": 143}, R.SHUTDOWN),
        ({"exit_status": 129}, R.SHUTDOWN),
        ({"exit_status": 137}, R.WORKER_LOST),
        ({"exit_status": 1}, R.ERROR),
    ]
)
flag_clues: st.SearchStrategy[Clue] = st.sampled_from(
    [
        ({"answered": True}, R.COMPLETED),
        ({"context_full": True}, R.CONTEXT_EXHAUSTED),
        ({"worker_lost": True}, R.WORKER_LOST),
    ]
)


@st.composite
def clue_sets(draw: st.DrawFn) -> list[Clue]:
    chosen: list[Clue] = []
    for kind in (error_clues, stop_clues, signal_clues, exit_clues):
        if draw(st.booleans()):
            chosen.append(draw(kind))
    chosen.extend(draw(st.lists(flag_clues, max_size=3, unique_by=lambda c: tuple(c[0]))))
    return chosen


@given(clue_sets())
def test_conflicting_clues_resolve_by_the_specs_priority(clues: list[Clue]) -> None:
    fields: dict[str, Any] = {}
    for values, _ in clues:
        fields.update(values)
    pointed = {reason for _, reason in clues}
    expected = min(pointed, key=DOCUMENTED_ORDER.index, default=R.UNKNOWN)
    assert classify(Clues(**fields)) is expected


@given(clue_sets())
def test_a_rate_limit_always_wins(clues: list[Clue]) -> None:
    fields: dict[str, Any] = {}
    for values, _ in clues:
        fields.update(values)
    fields.pop("status", None)
    fields.pop("code", None)  # an insufficient_quota code would make it another error
    fields["error"] = RateLimited("429")
    assert classify(Clues(**fields)) is R.RATE_LIMIT


@given(clue_sets())
def test_a_user_exit_never_outranks_rate_limit_completion_or_context(clues: list[Clue]) -> None:
    fields: dict[str, Any] = {}
    for values, _ in clues:
        fields.update(values)
    fields["stop"] = StopReason.STOP
    result = classify(Clues(**fields))
    stronger = {R.RATE_LIMIT, R.COMPLETED, R.CONTEXT_EXHAUSTED}
    assert result is R.USER_EXIT or result in stronger


# -- ended_because on results -----------------------------------------------------------


def _result(**changes: Any) -> RunResult:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    fields: dict[str, Any] = {
        "run_id": "r1",
        "outcome": Outcome.BLOCKED,
        "exit_code": ExitCode.MAX_RETRIES,
        "handoff": Handoff(Outcome.BLOCKED, "rate limited"),
        "stop_reason": None,
        "turns": 2,
        "usage": Usage(10, 5),
        "timings": Timings(now - timedelta(seconds=30), now),
        "ended_because": R.RATE_LIMIT,
        "retry_after_s": 42.0,
        "continued_from": "r0",
    }
    fields.update(changes)
    return RunResult(**fields)


def test_ended_because_and_the_resume_time_round_trip() -> None:
    result = _result()
    stored = result.to_dict()

    assert stored["ended_because"] == "rate_limit"
    assert stored["retry_after_s"] == 42.0
    assert stored["resume_after"] == "2026-01-01T12:00:42+00:00"
    assert stored["continued_from"] == "r0"
    back = RunResult.from_dict(stored)
    assert back.ended_because is R.RATE_LIMIT
    assert back.resume_after == datetime(2026, 1, 1, 12, 0, 42, tzinfo=UTC)
    assert back.continued_from == "r0"


def test_the_requests_spend_round_trips_and_is_absent_from_older_results() -> None:
    spent = Spent(1_200, 300, 7, 12.5, 0.25)
    stored = _result(spent=spent).to_dict()

    assert stored["spent"]["total_tokens"] == 1_500
    assert RunResult.from_dict(stored).spent == spent
    del stored["spent"]  # a result stored before the field existed
    assert RunResult.from_dict(stored).spent is None
    assert _result().to_dict()["spent"] is None


@pytest.mark.parametrize(
    ("exit_code", "outcome", "stop_reason", "error", "expected"),
    [
        (ExitCode.FINAL_ANSWER, Outcome.FINISHED, None, None, R.COMPLETED),
        (ExitCode.FINAL_ANSWER, Outcome.FINISHED, StopReason.STOP, None, R.COMPLETED),
        (ExitCode.USER_STOP, Outcome.USERINTERLUDE, StopReason.STOP, None, R.USER_EXIT),
        (ExitCode.USER_ABORT, Outcome.USERINTERLUDE, None, None, R.USER_EXIT),
        (ExitCode.SHUTDOWN, Outcome.BLOCKED, StopReason.SHUTDOWN, None, R.SHUTDOWN),
        (ExitCode.TOKEN_LIMIT, Outcome.BLOCKED, None, "too long", R.CONTEXT_EXHAUSTED),
        (ExitCode.MAX_RETRIES, Outcome.BLOCKED, None, "answered HTTP 429: x", R.RATE_LIMIT),
        (ExitCode.MAX_RETRIES, Outcome.FAILED, None, "answered HTTP 503: x", R.ERROR),
        (ExitCode.ERROR, Outcome.FAILED, None, "answered HTTP 401: x", R.ERROR),
        (ExitCode.MAX_TURNS, Outcome.BLOCKED, None, None, R.UNKNOWN),
        (ExitCode.MAX_TURNS, Outcome.FINISHED, None, None, R.COMPLETED),
    ],
)
def test_a_stored_result_without_it_is_classified_from_what_it_records(
    exit_code: ExitCode,
    outcome: Outcome,
    stop_reason: StopReason | None,
    error: str | None,
    expected: EndedBecause,
) -> None:
    stored = _result(
        exit_code=exit_code, outcome=outcome, stop_reason=stop_reason, error=error
    ).to_dict()
    for key in ("ended_because", "retry_after_s", "resume_after", "continued_from"):
        del stored[key]
    stored["handoff"]["outcome"] = outcome.value

    back = RunResult.from_dict(stored)
    assert back.ended_because is expected
    assert back.retry_after_s is None and back.resume_after is None
    assert back.continued_from is None


def test_a_result_built_without_it_is_classified_too() -> None:
    # The reconciler builds results for runs it finds interrupted.
    result = _result(
        exit_code=ExitCode.SHUTDOWN,
        stop_reason=StopReason.SHUTDOWN,
        ended_because=R.UNKNOWN,
        retry_after_s=None,
    )
    assert result.ended_because is R.SHUTDOWN
    assert _result(ended_because=R.WORKER_LOST).ended_because is R.WORKER_LOST


def test_an_unreadable_stored_reason_is_classified_again() -> None:
    stored = _result(exit_code=ExitCode.USER_STOP, outcome=Outcome.USERINTERLUDE).to_dict()
    stored["handoff"]["outcome"] = "userinterlude"
    stored["ended_because"] = "gremlins"
    assert RunResult.from_dict(stored).ended_because is R.USER_EXIT
