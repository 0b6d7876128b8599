"""Canonical outcomes, legacy normalisation and softener stripping (docs/stopping.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.values.errors import UnknownOutcome
from agent_core.values.outcomes import Outcome, normalize_outcome, strip_softeners

LEGACY = {
    "finish": Outcome.FINISHED,
    "complete": Outcome.FINISHED,
    "completed": Outcome.FINISHED,
    "done": Outcome.FINISHED,
    "cancelled": Outcome.USERINTERLUDE,
    "canceled": Outcome.USERINTERLUDE,
    "abort": Outcome.USERINTERLUDE,
    "aborted": Outcome.USERINTERLUDE,
}


@pytest.mark.parametrize(("legacy", "canonical"), sorted(LEGACY.items()))
def test_legacy_words_map_to_canonical_outcomes(legacy: str, canonical: Outcome) -> None:
    assert normalize_outcome(legacy) is canonical
    assert normalize_outcome(f"  {legacy.upper()} ") is canonical


def test_blocked_on_user_depends_on_whether_a_question_was_asked() -> None:
    assert normalize_outcome("blocked_on_user", question_asked=True) is Outcome.ASK_USER_QUESTION
    assert normalize_outcome("blocked_on_user") is Outcome.USERINTERLUDE
    assert normalize_outcome("blocked-on-user", question_asked=True) is Outcome.ASK_USER_QUESTION


def test_unknown_words_are_refused() -> None:
    with pytest.raises(UnknownOutcome, match="'maybe'"):
        normalize_outcome("maybe")


@given(st.sampled_from(list(Outcome)), st.booleans())
def test_canonical_outcomes_are_fixed_points(outcome: Outcome, asked: bool) -> None:
    assert normalize_outcome(outcome.value, question_asked=asked) is outcome
    assert normalize_outcome(normalize_outcome(outcome.value).value) is outcome


@given(st.sampled_from(sorted(LEGACY)))
def test_no_legacy_word_ever_reaches_users(word: str) -> None:
    assert normalize_outcome(word).value not in LEGACY


SOFTENERS = [
    "If you want, I can open a PR for it.",
    "If you'd like, I can rerun the tests.",
    "Would you like me to continue?",
    "Let me know if you want more detail.",
    "Do you want me to deploy it?",
    "Shall I go ahead?",
]


@pytest.mark.parametrize("softener", SOFTENERS)
def test_trailing_softeners_are_removed(softener: str) -> None:
    assert strip_softeners(f"Tests pass on main.\n\n{softener}") == "Tests pass on main."
    assert strip_softeners(f"Tests pass on main. {softener}") == "Tests pass on main."


def test_several_trailing_softeners_are_all_removed() -> None:
    text = "Done.\nWould you like me to continue?\nIf you want, I can also add docs."
    assert strip_softeners(text) == "Done."


def test_an_offer_in_the_middle_is_content_and_stays() -> None:
    text = "If you want, I can deploy is what the old bot said.\nThe new one deploys."
    assert strip_softeners(text) == text


sentences = st.text(
    alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd", "Zs")), min_size=1, max_size=40
).map(lambda s: s.strip() + ".")


@given(st.lists(sentences, min_size=1, max_size=5), st.sampled_from(SOFTENERS))
def test_stripping_keeps_the_content_and_is_idempotent(body: list[str], softener: str) -> None:
    content = " ".join(body)
    stripped = strip_softeners(f"{content} {softener}")
    assert content.startswith(stripped)
    assert strip_softeners(stripped) == stripped
    assert not any(stripped.endswith(s) for s in SOFTENERS)


@given(st.text(max_size=200))
def test_stripping_never_adds_text(text: str) -> None:
    stripped = strip_softeners(text)
    assert text.startswith(stripped) or text.rstrip().startswith(stripped)
    assert strip_softeners(stripped) == stripped
