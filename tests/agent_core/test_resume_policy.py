"""Whether and when a run resumes on its own (docs/stopping.md): the policy table and the three
settings' parsers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.values.ended import EndedBecause
from agent_core.values.errors import ConfigError
from agent_core.values.resume_policy import (
    DEFAULT_AUTO_RESUME,
    DontResume,
    ResumeAt,
    ResumeDecision,
    ResumeNow,
    ResumeSettings,
    decide_resume,
    parse_auto_resume,
    parse_max_auto_resumes,
    parse_user_exit_grace,
    rate_limit_backoff,
    weighs_last_stop,
)

R = EndedBecause
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
DEFAULTS = ResumeSettings()


def decide(
    reason: EndedBecause,
    *,
    settings: ResumeSettings = DEFAULTS,
    resumes: int = 0,
    stopped_ago: timedelta | None = None,
    not_before: datetime | None = None,
) -> ResumeDecision:
    return decide_resume(
        reason,
        settings=settings,
        resumes_in_thread=resumes,
        last_user_stop_at=None if stopped_ago is None else NOW - stopped_ago,
        not_before=not_before,
        now=NOW,
    )


# -- the table, by example ------------------------------------------------------------


def test_a_user_exit_is_never_resumed_and_says_so_in_the_seeds_words() -> None:
    decision = decide(R.USER_EXIT)
    assert decision == DontResume("Session ended by user, not auto-resuming")


@pytest.mark.parametrize("reason", [R.COMPLETED, R.ERROR, R.UNKNOWN, R.BUDGET_EXHAUSTED])
def test_what_the_default_does_not_list_is_not_resumed(reason: EndedBecause) -> None:
    decision = decide(reason)
    assert isinstance(decision, DontResume)
    assert "not auto-resuming" in decision.reason or "nothing to resume" in decision.reason


def test_a_spent_budget_is_never_resumed_even_where_it_is_listed() -> None:
    """A person decides whether a request may spend more: settings built around the
    parser (which refuses to list it) still get no resume."""
    listed = ResumeSettings(auto_resume=frozenset({R.BUDGET_EXHAUSTED}))
    decision = decide(R.BUDGET_EXHAUSTED, settings=listed)
    assert decision == DontResume("The request's budget is spent, not auto-resuming")


def test_a_rate_limit_resumes_at_its_retry_after() -> None:
    at = NOW + timedelta(seconds=90)
    decision = decide(R.RATE_LIMIT, not_before=at)
    assert decision == ResumeAt(at, decision.reason)
    assert (
        decision.reason == "Rate limited by the model provider; resuming at 09:01:30 UTC (in 90 s)"
    )


def test_a_rate_limit_without_retry_after_backs_off_more_each_resume() -> None:
    waits = []
    for resumes in range(3):
        decision = decide(R.RATE_LIMIT, resumes=resumes)
        assert isinstance(decision, ResumeAt)
        waits.append(decision.at - NOW)
    assert waits == [timedelta(seconds=60), timedelta(seconds=120), timedelta(seconds=240)]
    assert rate_limit_backoff(10_000) == timedelta(minutes=30)


def test_a_retry_after_already_past_resumes_now() -> None:
    decision = decide(R.RATE_LIMIT, not_before=NOW - timedelta(seconds=1))
    assert isinstance(decision, ResumeNow)


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (R.CONTEXT_EXHAUSTED, "from a summary"),
        (R.SHUTDOWN, "from the checkpoint"),
        (R.WORKER_LOST, "from the checkpoint"),
    ],
)
def test_the_others_resume_now(reason: EndedBecause, words: str) -> None:
    decision = decide(reason)
    assert isinstance(decision, ResumeNow)
    assert words in decision.reason


def test_a_user_stop_in_the_thread_suppresses_resumes_for_the_grace() -> None:
    inside = decide(R.SHUTDOWN, stopped_ago=timedelta(minutes=3))
    assert inside == DontResume(
        "A person stopped a run in this thread 3 min ago (USER_EXIT_GRACE 10 min); "
        "not auto-resuming"
    )
    assert isinstance(decide(R.SHUTDOWN, stopped_ago=timedelta(minutes=10)), ResumeNow)


def test_the_limit_on_resumes() -> None:
    assert isinstance(decide(R.SHUTDOWN, resumes=2), ResumeNow)
    decision = decide(R.SHUTDOWN, resumes=3)
    assert decision == DontResume(
        "Already auto-resumed 3 times in this thread (MAX_AUTO_RESUMES 3); not auto-resuming"
    )


def test_an_admin_may_list_errors_but_the_grace_still_holds() -> None:
    settings = ResumeSettings(auto_resume=frozenset({R.ERROR, R.USER_EXIT}))
    assert isinstance(decide(R.ERROR, settings=settings), ResumeNow)
    assert isinstance(decide(R.SHUTDOWN, settings=settings), DontResume)
    # The stop that ended this very run counts: a user exit resumes only with no grace.
    assert isinstance(decide(R.USER_EXIT, settings=settings, stopped_ago=timedelta()), DontResume)
    no_grace = ResumeSettings(auto_resume=frozenset({R.USER_EXIT}), user_exit_grace=timedelta())
    assert isinstance(decide(R.USER_EXIT, settings=no_grace, stopped_ago=timedelta()), ResumeNow)


def test_decisions_serialise_for_the_audit_trail() -> None:
    at = NOW + timedelta(minutes=2)
    assert decide(R.RATE_LIMIT, not_before=at).to_dict() == {
        "decision": "resume_at",
        "at": "2026-03-01T09:02:00+00:00",
        "reason": "Rate limited by the model provider; resuming at 09:02:00 UTC (in 2 min)",
    }
    assert decide(R.USER_EXIT).to_dict()["decision"] == "dont_resume"
    assert decide(R.SHUTDOWN).to_dict()["decision"] == "resume_now"


# -- the table, as properties ---------------------------------------------------------

reasons = st.sampled_from(list(EndedBecause))
settings_strategy = st.builds(
    ResumeSettings,
    # What parse_auto_resume accepts: never completed or budget_exhausted (tested above).
    auto_resume=st.frozensets(reasons.filter(lambda r: r not in (R.COMPLETED, R.BUDGET_EXHAUSTED))),
    max_auto_resumes=st.integers(0, 5),
    user_exit_grace=st.timedeltas(timedelta(0), timedelta(hours=1)),
)
offsets = st.none() | st.timedeltas(timedelta(hours=-2), timedelta(hours=2))


@given(reasons, settings_strategy, st.integers(0, 8), offsets, offsets)
def test_the_policy_table(
    reason: EndedBecause,
    settings: ResumeSettings,
    resumes: int,
    stopped_ago: timedelta | None,
    wait: timedelta | None,
) -> None:
    last_stop = None if stopped_ago is None else NOW - abs(stopped_ago)
    not_before = None if wait is None else NOW + wait
    decision = decide_resume(
        reason,
        settings=settings,
        resumes_in_thread=resumes,
        last_user_stop_at=last_stop,
        not_before=not_before,
        now=NOW,
    )
    in_grace = last_stop is not None and NOW - last_stop < settings.user_exit_grace
    allowed = (
        reason in settings.auto_resume and not in_grace and resumes < settings.max_auto_resumes
    )
    assert decision.reason  # every decision says why
    if not allowed:
        assert isinstance(decision, DontResume)
        return
    match decision:
        case ResumeAt(at=at):
            assert at > NOW
            if not_before is not None:
                assert at == not_before  # never earlier than the provider asked
            else:
                assert reason is R.RATE_LIMIT
                assert at - NOW == rate_limit_backoff(resumes)
        case ResumeNow():
            assert not_before is None or not_before <= NOW
            assert reason is not R.RATE_LIMIT or not_before is not None
        case DontResume():
            raise AssertionError(f"allowed but refused: {decision}")


@given(reasons, settings_strategy, st.integers(0, 8), offsets, offsets)
def test_the_last_stop_is_read_only_where_it_can_change_the_answer(
    reason: EndedBecause,
    settings: ResumeSettings,
    resumes: int,
    stopped_ago: timedelta | None,
    wait: timedelta | None,
) -> None:
    """The app reads when a person last stopped a run in the thread only if
    ``weighs_last_stop``: wherever it says no, the answer is the same without it."""
    not_before = None if wait is None else NOW + wait

    def answer(ago: timedelta | None) -> ResumeDecision:
        return decide(
            reason, settings=settings, resumes=resumes, stopped_ago=ago, not_before=not_before
        )

    if not weighs_last_stop(reason, settings):
        assert answer(None) == answer(abs(stopped_ago or timedelta(0)))


@given(reasons, st.integers(0, 8), offsets)
def test_a_user_exit_never_resumes_under_the_default_settings(
    reason: EndedBecause, resumes: int, wait: timedelta | None
) -> None:
    decision = decide_resume(
        R.USER_EXIT,
        settings=DEFAULTS,
        resumes_in_thread=resumes,
        last_user_stop_at=None,
        not_before=None if wait is None else NOW + wait,
        now=NOW,
    )
    assert decision == DontResume("Session ended by user, not auto-resuming")


# -- the settings ---------------------------------------------------------------------


def test_auto_resume_parses_lists_any_case_and_none() -> None:
    assert parse_auto_resume(None) == DEFAULT_AUTO_RESUME
    assert parse_auto_resume("  ") == DEFAULT_AUTO_RESUME
    assert parse_auto_resume("Rate_Limit, shutdown") == {R.RATE_LIMIT, R.SHUTDOWN}
    assert parse_auto_resume("none") == frozenset()
    assert DEFAULT_AUTO_RESUME == {R.RATE_LIMIT, R.CONTEXT_EXHAUSTED, R.SHUTDOWN, R.WORKER_LOST}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("rate_limit,sunspots", "unknown reason 'sunspots'"),
        ("completed", "'completed' cannot resume"),
        ("shutdown,budget_exhausted", "'budget_exhausted' cannot resume on its own"),
    ],
)
def test_auto_resume_refuses_what_it_cannot_do(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_auto_resume(raw)
    assert refused.value.setting == "AUTO_RESUME"
    assert problem in str(refused.value)


def test_max_auto_resumes() -> None:
    assert parse_max_auto_resumes(None) == 3
    assert parse_max_auto_resumes(" 0 ") == 0
    assert parse_max_auto_resumes("7") == 7
    for bad in ("-1", "2.5", "lots"):
        with pytest.raises(ConfigError) as refused:
            parse_max_auto_resumes(bad)
        assert refused.value.setting == "MAX_AUTO_RESUMES"
        assert str(refused.value).startswith("MAX_AUTO_RESUMES: ")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, timedelta(minutes=10)),
        ("", timedelta(minutes=10)),
        ("600", timedelta(minutes=10)),
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("10 min", timedelta(minutes=10)),
        ("1.5h", timedelta(minutes=90)),
        ("0", timedelta()),
    ],
)
def test_user_exit_grace(raw: str | None, expected: timedelta) -> None:
    assert parse_user_exit_grace(raw) == expected


@pytest.mark.parametrize("raw", ["-5", "ten minutes", "5 fortnights", "1e3"])
def test_user_exit_grace_refuses_what_is_not_a_duration(raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_user_exit_grace(raw)
    assert refused.value.setting == "USER_EXIT_GRACE"
