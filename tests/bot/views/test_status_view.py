"""The status message's Block Kit and the wording in bot/messages.py.

Snapshots: each case's rendered message is compared with the committed JSON file
``tests/bot/views/snapshots/<case>.json``. After an intended change to wording or layout,
regenerate them and review the diff before committing::

    UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/bot/views/test_status_view.py

Besides the snapshots, the button rules are asserted directly, every rendered block is
parsed and validated by slack_sdk's Block Kit models, and hypothesis checks that no input
(huge evidence, thousands of artifacts, huge answers) breaks Slack's limits or loses a
part of the handoff.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_sdk.models.blocks import Block

from agent_core import (
    EndedBecause,
    ExitCode,
    Handoff,
    Outcome,
    RunResult,
    Spent,
    StopReason,
    Timings,
    Usage,
)
from bot import messages as m
from bot.messages import ANSWER_CONTINUES
from bot.views.answer import MARKDOWN_LIMIT, answer_metadata, render_answer
from bot.views.status import (
    ACTION_ABORT,
    ACTION_STOP,
    BLOCKS_TEXT_BUDGET,
    CONTROLS_BLOCK_ID,
    SECTION_TEXT_LIMIT,
    TEXT_LIMIT,
    RenderedMessage,
    StatusSnapshot,
    fit,
    render_status,
    run_metadata,
)
from tests.fakes.slack_blocks import blocks_text

SNAPSHOTS = Path(__file__).parent / "snapshots"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
RUN = "run-7f3a"


def result(
    outcome: Outcome,
    exit_code: ExitCode,
    *,
    reason: StopReason | None = None,
    stopped_by: str | None = None,
    evidence: str = "Read 3 files and ran the test suite: 42 passed.",
    artifacts: tuple[str, ...] = (),
    next_step: str = "",
    question: str | None = None,
    final_text: str = "",
) -> RunResult:
    handoff = Handoff(outcome, evidence, artifacts, next_step, stopped_by, question)
    return RunResult(
        run_id=RUN,
        outcome=outcome,
        exit_code=exit_code,
        handoff=handoff,
        stop_reason=reason,
        turns=3,
        usage=Usage(prompt_tokens=1_000, completion_tokens=234),
        timings=Timings(T0, T0 + timedelta(seconds=75)),
        final_text=final_text,
    )


SPENT = Spent(prompt_tokens=11_000, completion_tokens=1_400, tool_calls=7, cost_usd=0.0312)
"""What the request has spent in the live cases: "12.4k tokens · 7 tool calls · $0.03"."""


def live(phase: Any, **fields: Any) -> StatusSnapshot:
    base: dict[str, Any] = {"turn": 3, "elapsed_s": 42.5, "spent": SPENT}
    return StatusSnapshot(run_id=RUN, requester="U1", phase=phase, **(base | fields))


def done(run: RunResult, **fields: Any) -> StatusSnapshot:
    return StatusSnapshot(run_id=RUN, requester="U1", phase="done", result=run, **fields)


CASES: dict[str, StatusSnapshot] = {
    "starting": live("starting", turn=0, elapsed_s=0.0, spent=Spent()),
    "running": live("running", activity=m.activity_tool("search")),
    "running_with_answer": live(
        "running",
        activity=m.ACTIVITY_WRITING_ANSWER,
        answer="So far: `a < b` & the *cache* is cold.",
    ),
    "stopping": live(
        "stopping",
        stop_reason=StopReason.STOP,
        stop_requested_by="U1",
        activity=m.activity_tool("search"),
    ),
    "aborting": live("stopping", stop_reason=StopReason.ABORT, stop_requested_by="U2"),
    "aborting_after_stop": live(
        "stopping", stop_reason=StopReason.ABORT, stop_requested_by="U2", escalated_from="U1"
    ),
    "aborting_timed_out": live(
        "stopping",
        stop_reason=StopReason.ABORT,
        stop_requested_by="system:final-turn-timeout",
        escalated_from="U1",
        final_turn_timeout_s=90.0,
    ),
    "restarting": live(
        "stopping", stop_reason=StopReason.SHUTDOWN, stop_requested_by="signal:SIGTERM"
    ),
    "done_finished": done(
        result(
            Outcome.FINISHED,
            ExitCode.FINAL_ANSWER,
            artifacts=("reports/summary.md", "https://github.com/acme/app/pull/42"),
            next_step="You review PR #42 and merge it.",
            final_text="The cache was cold because <TTL> was 0 & nobody noticed.",
        )
    ),
    "done_userinterlude": done(
        result(
            Outcome.USERINTERLUDE,
            ExitCode.USER_STOP,
            reason=StopReason.STOP,
            stopped_by="U1",
            evidence="Stopped after turn 3: two of five files were migrated.",
            artifacts=("src/a.py", "src/b.py"),
            next_step="You decide whether to migrate the other three files.",
        )
    ),
    "done_aborted": done(
        result(
            Outcome.USERINTERLUDE,
            ExitCode.USER_ABORT,
            reason=StopReason.ABORT,
            stopped_by="U2",
            evidence="Aborted during turn 3 while running the tool search.",
            next_step="Nothing is running. Reply in the thread to start again.",
        )
    ),
    "done_aborted_after_stop": done(
        result(
            Outcome.USERINTERLUDE,
            ExitCode.USER_ABORT,
            reason=StopReason.ABORT,
            stopped_by="system:final-turn-timeout",
            evidence="Aborted during turn 4 while streaming the model's answer.",
            next_step="Nothing is running. Reply in the thread to start again.",
        ),
        escalated_from="U1",
        final_turn_timeout_s=90.0,
    ),
    "done_shutdown": done(
        result(
            Outcome.BLOCKED,
            ExitCode.SHUTDOWN,
            reason=StopReason.SHUTDOWN,
            stopped_by="signal:SIGTERM",
            evidence="Interrupted by a restart during turn 3; turn 2 is checkpointed.",
            next_step="threadpilot resumes it from the checkpoint after the restart.",
        )
    ),
    "done_askuserquestion": done(
        result(
            Outcome.ASK_USER_QUESTION,
            ExitCode.FINAL_ANSWER,
            evidence="Both staging and production match the request.",
            question="Deploy to staging or production?",
        )
    ),
    "done_failed": done(
        result(
            Outcome.FAILED,
            ExitCode.ERROR,
            evidence="The model API answered 401 Unauthorized.",
            next_step="An admin checks OPENAI_API_KEY; then reply in the thread to retry.",
        )
    ),
}


def assert_snapshot(name: str, rendered: RenderedMessage) -> None:
    """Compare with the committed snapshot, or rewrite it when UPDATE_SNAPSHOTS=1."""
    path = SNAPSHOTS / f"{name}.json"
    actual = {"text": rendered.text, "blocks": rendered.blocks, "metadata": rendered.metadata}
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", "utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path}; create it with UPDATE_SNAPSHOTS=1 and review it")
    assert actual == json.loads(path.read_text("utf-8"))


def buttons(rendered: RenderedMessage) -> list[str]:
    return [
        element["action_id"]
        for block in rendered.blocks
        for element in [*block.get("elements", []), block.get("accessory")]
        if isinstance(element, dict) and element.get("type") == "button"
    ]


def block_texts(rendered: RenderedMessage) -> list[str]:
    texts: list[str] = []
    for block in rendered.blocks:
        if "text" in block:
            texts.append(block["text"]["text"])
        texts += [e["text"] for e in block.get("elements", []) if isinstance(e.get("text"), str)]
    return texts


def validated(block: dict[str, Any]) -> dict[str, Any]:
    """The block as slack_sdk's models see it: raises on a limit they know, and differs
    from the input if a field was misspelt or misplaced."""
    parsed = Block.parse(block)
    assert parsed is not None
    return parsed.to_dict()


def units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


# -- snapshots and button rules --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(name: str) -> None:
    assert_snapshot(name, render_status(CASES[name]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocks_are_valid_block_kit(name: str) -> None:
    rendered = render_status(CASES[name])
    for block in rendered.blocks:
        assert validated(block) == block
    assert rendered.text


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("starting", [ACTION_STOP, ACTION_ABORT]),
        ("running", [ACTION_STOP, ACTION_ABORT]),
        ("stopping", [ACTION_ABORT]),
        ("aborting", []),
        ("aborting_after_stop", []),
        ("aborting_timed_out", []),
        ("restarting", []),
        *[(name, []) for name in CASES if name.startswith("done_")],
    ],
)
def test_button_rules(name: str, expected: list[str]) -> None:
    rendered = render_status(CASES[name])
    assert buttons(rendered) == expected
    controls = [b for b in rendered.blocks if b["type"] == "actions"]
    assert [b["block_id"] for b in controls] == ([CONTROLS_BLOCK_ID] if expected else [])
    for element in controls[0]["elements"] if controls else []:
        assert element["value"] == RUN
        if element["action_id"] == ACTION_ABORT:
            assert element["style"] == "danger"
            assert element["confirm"]["text"]["text"] == m.ABORT_CONFIRM_TEXT
        else:
            assert "style" not in element and "confirm" not in element


def test_activity_equal_to_the_status_is_said_once() -> None:
    rendered = render_status(live("starting", activity=m.STATUS_STARTING))
    assert rendered.blocks[0]["text"]["text"] == "*Starting...*"
    assert rendered.text == "Starting..."


def test_done_needs_a_result() -> None:
    with pytest.raises(ValueError, match="RunResult"):
        StatusSnapshot(run_id=RUN, requester="U1", phase="done")


def test_streamed_answer_is_not_repeated() -> None:
    run = result(Outcome.FINISHED, ExitCode.FINAL_ANSWER, final_text="A long answer.")
    assert "A long answer." in "".join(block_texts(render_status(done(run))))
    rendered = render_status(done(run, answer_streamed=True))
    assert "A long answer." not in "".join(block_texts(rendered))
    assert all(b["type"] != "divider" for b in rendered.blocks)


def test_answer_equal_to_evidence_is_shown_once() -> None:
    run = result(Outcome.FINISHED, ExitCode.FINAL_ANSWER, evidence="42.", final_text="42.")
    assert "".join(block_texts(render_status(done(run)))).count("42.") == 1


def test_streamed_softener_is_removed_from_the_final_answer() -> None:
    run = result(Outcome.FINISHED, ExitCode.FINAL_ANSWER)
    rendered = render_status(done(run, answer="It is 42.\n\nIf you want, I can explain."))
    text = "".join(block_texts(rendered))
    assert "It is 42." in text and "If you want" not in text


# -- wording ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "expected"),
    [
        ("U1", "<@U1>"),
        ("W012ABC", "<@W012ABC>"),
        ("system:final-turn-timeout", "threadpilot"),
        ("signal:SIGTERM", "threadpilot"),
        ("<!channel>", "&lt;!channel&gt;"),
        (None, "someone"),
    ],
)
def test_mention(actor: str | None, expected: str) -> None:
    assert m.mention(actor) == expected


@pytest.mark.parametrize(
    ("outcome", "reason", "code", "by", "expected"),
    [
        (Outcome.FINISHED, None, ExitCode.FINAL_ANSWER, None, "Finished"),
        (
            Outcome.USERINTERLUDE,
            StopReason.STOP,
            ExitCode.USER_STOP,
            "U1",
            "User interlude: stopped by <@U1>",
        ),
        (
            Outcome.USERINTERLUDE,
            StopReason.ABORT,
            ExitCode.USER_ABORT,
            "U1",
            "User interlude: aborted by <@U1>",
        ),
        # Legacy records without a stop reason: the exit code tells stop from abort.
        (
            Outcome.USERINTERLUDE,
            None,
            ExitCode.USER_ABORT,
            "U2",
            "User interlude: aborted by <@U2>",
        ),
        (Outcome.USERINTERLUDE, None, None, None, "User interlude: stopped"),
        (
            Outcome.USERINTERLUDE,
            StopReason.ABORT,
            ExitCode.USER_ABORT,
            "system:final-turn-timeout",
            "User interlude: aborted by threadpilot",
        ),
        (
            Outcome.BLOCKED,
            StopReason.SHUTDOWN,
            ExitCode.SHUTDOWN,
            "signal:SIGTERM",
            "Blocked: interrupted by a restart",
        ),
        (Outcome.BLOCKED, None, ExitCode.ERROR, None, "Blocked"),
        (Outcome.ASK_USER_QUESTION, None, ExitCode.FINAL_ANSWER, None, "Question for you"),
        (Outcome.FAILED, None, ExitCode.ERROR, None, "Failed"),
        (
            Outcome.FINISHED,
            StopReason.STOP,
            ExitCode.FINAL_ANSWER,
            "U1",
            "Finished (stop requested by <@U1>)",
        ),
    ],
)
def test_outcome_label(
    outcome: Outcome,
    reason: StopReason | None,
    code: ExitCode | None,
    by: str | None,
    expected: str,
) -> None:
    label = m.slack_outcome_label(outcome, stop_reason=reason, exit_code=code, stopped_by=by)
    assert label == expected


def test_ephemeral_replies() -> None:
    assert m.not_allowed("requester", "U1") == (
        "Only <@U1> or an admin can stop or abort this run."
    )
    assert "people taking part in this thread" in m.not_allowed("participants", "U1")
    assert "(User interlude: aborted by <@U2>)" in m.run_already_finished(
        "User interlude: aborted by <@U2>"
    )
    aborted = CASES["done_aborted"].result
    assert m.run_already_finished(aborted) == m.run_already_finished(
        "User interlude: aborted by <@U2>"
    )
    assert m.run_already_finished(None) == m.RUN_ALREADY_FINISHED
    assert m.ALREADY_STOPPING.startswith("Already stopping: press Abort")


def test_status_lines() -> None:
    assert m.status_turn(3) == "Working: turn 3"
    assert m.activity_tool("a`b<c") == "Running the tool `a'b&lt;c`"
    assert m.activity_retry(12.4, "rate limited") == (
        "Waiting to retry the model (in 12s: rate limited)"
    )
    assert m.STATUS_STOPPING == (
        "Stopping: finishing this step, then a summary. Stop again or Abort to cut it off."
    )
    assert m.stop_requested_note("U1", "Writing the final report") == (
        "Requested by <@U1> · Writing the final report"
    )
    assert m.status_aborting() == "Aborting..."
    assert m.status_aborting("U2") == "Aborting... (requested by <@U2>)"
    assert [m.format_elapsed(s) for s in (0, 65.9, 3_725)] == ["00:00", "01:05", "1:02:05"]


# -- fitting ---------------------------------------------------------------------------


def test_fit_escapes_and_marks_what_it_cut() -> None:
    assert fit("a < b & c", 100) == "a &lt; b &amp; c"
    cut = fit("word " * 1_000, 300)
    assert units(cut) <= 300
    assert re.search(r"_… \(truncated, [\d,]+ characters more\)_$", cut)


def test_fit_never_splits_an_entity_or_leaves_a_fence_open() -> None:
    for size in range(60, 90):
        cut = fit("&" * 500, size)
        assert re.fullmatch(r"(&amp;)*\n_… \(truncated, [\d,]+ characters more\)_", cut)
    cut = fit("```\n" + "code line\n" * 500, 400)
    assert cut.count("```") % 2 == 0


# -- limits, for any input -------------------------------------------------------------

_TOKENS = ["a", "word ", "\n", "&", "<", ">", "`", "```", "*", "é", "😀", "<@U9>", "<!here>"]
_chunk = st.lists(st.sampled_from(_TOKENS), max_size=30).map("".join)
_big = st.builds(lambda text, times: text * times, _chunk, st.integers(0, 4_000))
_actors = st.sampled_from([None, "U1", "W2", "system:x", "signal:SIGTERM", "x" * 500, "<@U3>"])
_MENTION = re.compile(r"<@[UW][A-Z0-9]+>")
_ENTITY = re.compile(r"&(?!amp;|lt;|gt;)")


def check_limits(rendered: RenderedMessage) -> None:
    assert 0 < len(rendered.blocks) <= 50
    texts = block_texts(rendered)
    for block in rendered.blocks:
        if block["type"] == "section":
            assert units(block["text"]["text"]) <= SECTION_TEXT_LIMIT < 3_000
        validated(block)
    assert sum(units(t) for t in texts) <= BLOCKS_TEXT_BUDGET
    assert units(rendered.text) <= TEXT_LIMIT < 40_000
    for text in [*texts, rendered.text]:
        # Only mentions we generate survive as markup; model text is escaped whole.
        assert not re.search(r"[<>]", _MENTION.sub("", text)), text
        assert not _ENTITY.search(text), text


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(
    outcome=st.sampled_from(Outcome),
    code=st.sampled_from(ExitCode),
    reason=st.none() | st.sampled_from(StopReason),
    stopped_by=_actors,
    evidence=_big,
    artifacts=st.builds(
        lambda items, times: tuple(items * times),
        st.lists(_chunk, max_size=10),
        st.integers(0, 500),
    ),
    next_step=_big,
    question=st.none() | _big,
    answer=_big,
    final_text=_big,
)
def test_done_fits_slack_and_keeps_the_handoff(
    outcome: Outcome,
    code: ExitCode,
    reason: StopReason | None,
    stopped_by: str | None,
    evidence: str,
    artifacts: tuple[str, ...],
    next_step: str,
    question: str | None,
    answer: str,
    final_text: str,
) -> None:
    run = result(
        outcome,
        code,
        reason=reason,
        stopped_by=stopped_by,
        evidence=evidence,
        artifacts=artifacts,
        next_step=next_step,
        question=question,
        final_text=final_text,
    )
    rendered = render_status(done(run, answer=answer))
    check_limits(rendered)
    assert buttons(rendered) == []
    assert all(b["type"] != "actions" for b in rendered.blocks)
    heads = [b["text"]["text"].split("\n", 1)[0] for b in rendered.blocks[:5] if "text" in b]
    assert heads == ["*Outcome*", "*Evidence*", "*Artifacts*", "*Handoff*"]
    if units(m.escape(evidence)) > 2_900:
        evidence_block = rendered.blocks[2]["text"]["text"]
        shown_below = (answer or final_text).strip() == evidence.strip()
        if shown_below:
            # A long answer that is its own evidence is shown once, in the Answer section.
            assert evidence_block == f"*Evidence*\n{m.EVIDENCE_IS_THE_ANSWER}"
            below = "\n".join(str(b.get("text", {}).get("text", "")) for b in rendered.blocks[5:])
            assert "*Answer*" in below  # whole, or cut with its own marker
        else:
            assert "characters more)_" in evidence_block


@_SETTINGS
@given(
    phase=st.sampled_from(["starting", "running", "stopping"]),
    reason=st.none() | st.sampled_from(StopReason),
    requested_by=_actors,
    why=_big,
    answer=_big,
    requester=st.sampled_from(["U1", "system:cli"]),
)
def test_live_fits_slack(
    phase: Any,
    reason: StopReason | None,
    requested_by: str | None,
    why: str,
    answer: str,
    requester: str,
) -> None:
    snapshot = StatusSnapshot(
        run_id=RUN,
        requester=requester,
        phase=phase,
        turn=7,
        activity=m.activity_retry(30, why),
        stop_reason=reason if phase == "stopping" else None,
        stop_requested_by=requested_by,
        answer=answer,
    )
    rendered = render_status(snapshot)
    check_limits(rendered)
    if phase != "stopping":
        assert buttons(rendered) == [ACTION_STOP, ACTION_ABORT]
    elif reason in (None, StopReason.STOP):
        assert buttons(rendered) == [ACTION_ABORT]
    else:
        assert buttons(rendered) == []


# -- run metadata and the rewritten answer -----------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_render_names_its_run_in_metadata(name: str) -> None:
    assert render_status(CASES[name]).metadata == run_metadata(RUN)
    assert run_metadata(RUN) == {"event_type": "threadpilot_run", "event_payload": {"run_id": RUN}}


def test_the_answer_metadata_is_told_apart_from_the_status_message() -> None:
    assert answer_metadata(RUN)["event_type"] == run_metadata(RUN)["event_type"]
    assert answer_metadata(RUN)["event_payload"] == {"run_id": RUN, "part": "answer"}


def test_a_short_answer_is_rewritten_as_it_is() -> None:
    messages = render_answer("**Done**: 42 <items> & more\n")

    assert messages is not None and messages.rest == ()
    rendered = messages.first
    assert rendered.blocks == [{"type": "markdown", "text": "**Done**: 42 <items> & more"}]
    assert [validated(b) for b in rendered.blocks] == rendered.blocks
    assert rendered.text == "**Done**: 42 <items> & more"


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(answer=_big)
def test_a_rewritten_answer_fits_slack(answer: str) -> None:
    messages = render_answer(answer)

    if not answer.strip():
        assert messages is None
        return
    assert messages is not None
    for rendered in (messages.first, *messages.rest):
        ((block),) = rendered.blocks
        assert units(block["text"]) <= MARKDOWN_LIMIT
        assert units(rendered.text) <= TEXT_LIMIT
    ((first),) = messages.first.blocks
    if units(answer.strip()) > MARKDOWN_LIMIT:
        # Never cut silently: the rest follows in more messages (tests/bot/runs/test_long_answer.py).
        assert first["text"].endswith(ANSWER_CONTINUES) and messages.rest
    else:
        assert first["text"] == answer.strip() and messages.rest == ()


def test_spend_reads_at_a_glance() -> None:
    assert m.spend(Spent(prompt_tokens=11_000, completion_tokens=1_400, tool_calls=7)) == (
        "12.4k tokens · 7 tool calls"
    )
    assert m.spend(Spent(prompt_tokens=1, tool_calls=1, cost_usd=0.0001)) == (
        "1 token · 1 tool call · under $0.01"
    )
    assert m.spend(Spent(prompt_tokens=999, cost_usd=0.0)) == "999 tokens · 0 tool calls · $0.00"
    assert m.format_tokens_short(1_000) == "1k tokens"
    assert m.format_tokens_short(999_960) == "1M tokens"  # not "1000k"
    assert m.format_tokens_short(2_345_678) == "2.3M tokens"
    assert m.format_tokens_short(10**15) == "1,000,000B tokens"


def test_the_terminal_report_says_what_the_request_spent_when_known() -> None:
    run = result(Outcome.BLOCKED, ExitCode.BUDGET)
    with_spend = blocks_text(render_status(done(run, spent=SPENT)).blocks)
    assert (
        "`EXIT-BUDGET` (budget spent) · 3 turns · 01:15 · 12.4k tokens · 7 tool calls · $0.03"
        in with_spend
    )
    # A report rebuilt from the stored run alone: the run's own tokens, as before.
    stored = blocks_text(render_status(done(run)).blocks)
    assert "· 01:15 · 1,234 tokens" in stored


def test_every_reason_a_run_ends_is_worded_for_people() -> None:
    for reason in EndedBecause:  # not its code ("budget_exhausted")
        assert "_" not in m.ended_because_words(reason.value), reason
