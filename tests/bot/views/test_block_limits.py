"""Every message and view stays within Block Kit's limits, whatever it holds.

The limits live in bot/views/block_limits.py; the fake Slack refuses what breaks them
(``invalid_blocks``), as Slack does, so every test that renders through it exercises
them. Here: the table agrees with slack_sdk's Block Kit models (an independent copy of
Slack's numbers), the fake refuses blocks over them, and the worst cases each surface can
be asked to show (the longest texts, the most tasks, runs and votes) render within them.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownBlock,
    SectionBlock,
)
from slack_sdk.models.views import View
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import (
    AuditEvent,
    ExitCode,
    Guidance,
    Handoff,
    Outcome,
    RunRecord,
    RunResult,
    RunState,
    Spent,
    StopReason,
    StopRequestRecord,
    ThreadKey,
    Timings,
    Usage,
)
from bot.views import block_limits as limits
from bot.views.answer import render_answer
from bot.views.blocks import section
from bot.views.home import ListedRun, Listing, render_home, render_list_message
from bot.views.status import ChildTask, StatusSnapshot, render_status

if TYPE_CHECKING:
    from tests.fakes.slack_api import FakeSlack

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HUGE = ("é🙂 <!channel> & `code` " * 3_000).strip()
"""Long, wide (emoji count double in UTF-16), and full of what mrkdwn must escape."""


def test_the_limits_are_slacks() -> None:
    """The same numbers as slack_sdk's models, which follow Slack's Block Kit reference."""
    assert limits.SECTION_TEXT == SectionBlock.text_max_length == 3_000
    assert limits.SECTION_FIELDS == SectionBlock.fields_max_length == 10
    assert limits.HEADER_TEXT == HeaderBlock.text_max_length == 150
    assert limits.MARKDOWN_TEXT == MarkdownBlock.text_max_length == 12_000
    assert limits.CONTEXT_ELEMENTS == ContextBlock.elements_max_length == 10
    assert limits.ACTIONS_ELEMENTS == ActionsBlock.elements_max_length == 25
    assert limits.BUTTON_TEXT == ButtonElement.text_max_length == 75
    assert limits.ACTION_VALUE == ButtonElement.value_max_length == 2_000
    assert limits.ACTION_ID == ButtonElement.action_id_max_length == 255
    assert limits.URL == ButtonElement.url_max_length == 3_000
    assert limits.BLOCK_ID == SectionBlock.block_id_max_length == 255
    assert limits.CONFIRM_TITLE == ConfirmObject.title_max_length == 100
    assert limits.CONFIRM_TEXT == ConfirmObject.text_max_length == 300
    assert limits.CONFIRM_BUTTON == ConfirmObject.confirm_max_length == 30
    assert limits.VIEW_BLOCKS == View.blocks_max_length == 100
    assert limits.MESSAGE_BLOCKS == 50
    assert limits.FIELD_TEXT == 2_000


def test_problems_names_each_limit_broken() -> None:
    button = {
        "type": "button",
        "action_id": "a",
        "text": {"type": "plain_text", "text": "x" * 76},
        "value": "v" * 2_001,
    }
    blocks = [
        section("x" * 3_001),
        {"type": "header", "text": {"type": "plain_text", "text": "h" * 151}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "c"}] * 11},
        {"type": "actions", "elements": [button]},
    ]
    found = limits.problems(blocks)
    assert len(found) == 5, found
    assert limits.problems([section("x" * 3_000)]) == []
    assert limits.problems([section("🙂" * 1_501)]) != []  # counted in UTF-16 units
    assert limits.problems([section("x")] * 51) == ["51 blocks, more than 50"]
    assert limits.problems([section("x")] * 51, max_blocks=limits.VIEW_BLOCKS) == []


async def test_the_fake_slack_refuses_blocks_over_the_limits(slack: FakeSlack) -> None:
    client = AsyncWebClient(token="xoxb-test-token", base_url=slack.api_url)
    too_long = [section("x" * 3_001)]
    with pytest.raises(SlackApiError) as posted:
        await client.chat_postMessage(channel="C1", text="t", blocks=too_long)
    assert posted.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as published:
        await client.views_publish(user_id="U1", view={"type": "home", "blocks": too_long})
    assert published.value.response["error"] == "invalid_blocks"
    answer = await client.chat_postMessage(channel="C1", text="t", blocks=[section("x" * 3_000)])
    assert answer["ok"]


# -- the worst cases -------------------------------------------------------------------


def within(blocks: list[dict[str, Any]], max_blocks: int = limits.MESSAGE_BLOCKS) -> None:
    assert limits.problems(blocks, max_blocks=max_blocks) == []


def worst_result() -> RunResult:
    guidance = tuple(Guidance(f"g{i}", f"U{i}", HUGE) for i in range(200))
    return RunResult(
        run_id="run-1",
        outcome=Outcome.ASK_USER_QUESTION,
        exit_code=ExitCode.FINAL_ANSWER,
        handoff=Handoff(
            Outcome.ASK_USER_QUESTION,
            HUGE,
            tuple(HUGE for _ in range(1_000)),
            HUGE,
            "U" + "9" * 500,
            HUGE,
        ),
        stop_reason=StopReason.ABORT,
        turns=10_000,
        usage=Usage(prompt_tokens=10**12, completion_tokens=10**12),
        timings=Timings(NOW, NOW + timedelta(days=400)),
        final_text=HUGE,
        undelivered_guidance=guidance,
    )


def test_the_status_message_fits_whatever_it_holds() -> None:
    children = tuple(ChildTask(f"child-{i}", HUGE, activity=HUGE) for i in range(500))
    ended = tuple(dataclasses.replace(child, result=worst_result()) for child in children[:250])
    common: dict[str, Any] = {
        "run_id": "r" * 200,
        "requester": "U" + "1" * 500,
        "turn": 10**9,
        "elapsed_s": 10**9,
        "spent": Spent(10**15, 10**15, 10**12, 10**9, 10.0**12),
        "answer": HUGE,
        "activity": HUGE,
        "stop_requested_by": "U" + "2" * 500,
    }
    for phase in ("queued", "starting", "running"):
        within(render_status(StatusSnapshot(phase=phase, children=children, **common)).blocks)
    for reason in StopReason:
        snapshot = StatusSnapshot(phase="stopping", stop_reason=reason, children=children, **common)
        within(render_status(snapshot).blocks)
    done = StatusSnapshot(
        phase="done",
        result=worst_result(),
        children=children[250:] + ended,
        escalated_from="U" + "3" * 500,
        **common,
    )
    within(render_status(done).blocks)
    answer = render_answer(HUGE * 10)
    assert answer is not None
    for message in (answer.first, *answer.rest):
        within(message.blocks)


def worst_listing(*, admin: bool) -> Listing:
    def run(i: int, state: RunState) -> RunRecord:
        return RunRecord(
            id=f"{i:04}" + "r" * 60,
            thread=ThreadKey("T1", "C" + "1" * 20, f"{1_772_366_000 + i}.000100"),
            requester=f"U{i:08}",
            task=HUGE,
            state=state,
            status_ts=f"{1_772_366_000 + i}.000200",
            created_at=NOW - timedelta(days=400),
            updated_at=NOW,
            stopped_by="U" + "4" * 500,
        )

    pending = StopRequestRecord("req", "x", ThreadKey("T1", "C", "1"), StopReason.STOP, "U5")
    live = tuple(
        ListedRun(run(i, RunState.STOPPING), turns_done=10**9, pending=pending)
        for i in range(2_000)
    )
    votes = tuple(
        AuditEvent("x", "feedback", f"U{n % 300:08}", NOW, {"value": "positive"})
        for n in range(5_000)
    )
    ended = tuple(ListedRun(run(i, RunState.FAILED), feedback=votes) for i in range(10))
    return Listing(
        viewer="U00000001",
        admin=admin,
        now=NOW,
        live=live,
        ended=ended,
        team_url="https://" + "w" * 200 + ".slack.com/",
        notice="Stop all: 2,000 runs asked to stop.",
        live_not_listed=10**6,
    )


@pytest.mark.parametrize("admin", [False, True])
def test_app_home_and_the_list_fit_whatever_they_hold(admin: bool) -> None:
    listing = worst_listing(admin=admin)
    view = render_home(listing)
    within(view["blocks"], limits.VIEW_BLOCKS)
    assert len(json.dumps(view).encode()) <= limits.VIEW_BYTES
    within(render_list_message(listing).blocks)
