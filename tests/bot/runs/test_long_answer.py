"""An answer is never cut silently (docs/architecture.md, The path of a mention).

After Slack ends a stream (about five minutes in) the answer's message is written with
``chat.update``, its tasks as a plan above the text. Text and task cards share one
budget, and what does not fit goes on in follow-up messages in the thread; if Slack
refuses the final rewrite all the same, everything the message does not show is posted
after it. The fake Slack refuses what Slack refuses (``msg_blocks_too_long``,
``invalid_blocks``); the real app, llmock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.messages import ANSWER_CONTINUES
from bot.views.answer import ANSWER_BUDGET, FOLLOW_UPS, MARKDOWN_LIMIT, Task, render_answer
from bot.views.blocks import units
from tests.bot.harness import LONG_TEXT, WAIT_S, stalled_answer
from tests.bot.runs.test_agent_surfaces import streamed
from tests.fakes.slack_messages import StreamState
from tests.fakes.slack_workspace import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message

HUGE = " ".join(f"word{i}" for i in range(4_000))  # about 31,000 characters
TOOLS = 60


def answer_messages(slack: FakeSlack, thread_ts: str) -> list[Message]:
    """The streamed answer's message and the ones that carry its rest, in order."""
    first = streamed(slack, thread_ts)
    assert first is not None
    rest = [
        m
        for m in slack.thread(DEFAULT_CHANNEL, thread_ts)
        if m.metadata and m.metadata["event_payload"].get("piece")
    ]
    return [first, *sorted(rest, key=lambda m: m.metadata["event_payload"]["piece"])]  # type: ignore[index]


def words_shown(messages: list[Message]) -> list[str]:
    """The answer's words as a person reads them down the messages (notes left out)."""
    said: list[str] = []
    for message in messages:
        markdown = [b["text"] for b in message.blocks or [] if b["type"] == "markdown"]
        text = "\n".join(markdown) if message.blocks else message.text
        said += text.replace(ANSWER_CONTINUES, "").split()
    return said


async def test_a_long_answer_with_many_tasks_after_the_stream_expired_loses_nothing(
    bot: Bot, llm: LLMock
) -> None:
    bot.slack.state.stream_ttl_s = 0.3
    llm.add(Reply(tool_calls=tuple(ToolCall("current_time", {}) for _ in range(TOOLS))))
    llm.add(*stalled_answer(1.0, with_tool=False, text=HUGE))
    thread_ts, status = await bot.mention("write it all down")

    await bot.settled(status)
    messages = answer_messages(bot.slack, thread_ts)

    first = messages[0]
    assert first.stream is StreamState.EXPIRED
    assert first.history[-1].method == "chat.update"
    assert [b["type"] for b in first.blocks or []] == ["plan", "markdown"]
    assert len(messages) > 1
    assert words_shown(messages) == HUGE.split()
    refused = [c for c in bot.slack.calls() if c.error in ("msg_blocks_too_long", "invalid_blocks")]
    assert refused == []


async def test_when_slack_refuses_the_rewrite_the_rest_follows(bot: Bot, llm: LLMock) -> None:
    bot.slack.state.stream_ttl_s = 0.3
    llm.add(*stalled_answer(1.0, with_tool=False))
    thread_ts, status = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    def the_answer_message(args: dict[str, Any]) -> bool:
        message = streamed(bot.slack, thread_ts)
        return message is not None and args.get("ts") == message.ts

    bot.slack.fail_next(
        "chat.update", error="msg_blocks_too_long", times=100, only=the_answer_message
    )
    await bot.settled(status)

    messages = answer_messages(bot.slack, thread_ts)
    first = messages[0]
    assert first.history[-1].method != "chat.update"  # as it stood when the stream ended
    assert words_shown(messages) == LONG_TEXT.split()
    assert len(messages) == 2


def test_text_and_task_cards_share_one_budget() -> None:
    tasks = [Task(f"t{i}", f"step {i}: " + "x" * 180, "complete") for i in range(80)]
    rendered = render_answer(HUGE, title="Release 2.0", tasks=tasks)

    assert rendered is not None
    plan, markdown = rendered.first.blocks
    carried = units(plan["title"]) + sum(units(c["title"]) for c in plan["tasks"])
    assert carried + units(markdown["text"]) <= ANSWER_BUDGET
    assert plan["tasks"][-1]["task_id"] == "t79"  # the latest tasks are the ones shown
    assert plan["title"].startswith("Release 2.0 (and ")
    assert 1 <= len(rendered.rest) <= FOLLOW_UPS
    assert all(units(m.blocks[0]["text"]) <= MARKDOWN_LIMIT for m in rendered.rest)


async def test_the_fake_refuses_blocks_slack_refuses(slack: FakeSlack) -> None:
    client = AsyncWebClient(token="xoxb-test-token", base_url=slack.api_url)
    posted = await client.chat_postMessage(channel=DEFAULT_CHANNEL, text="x")
    ts = str(posted["ts"])
    too_long: list[dict[str, Any]] = [{"type": "markdown", "text": "x" * 12_001}]
    cards = [
        {"type": "task_card", "task_id": str(i), "title": "y" * 200, "status": "complete"}
        for i in range(20)
    ]
    too_much: list[dict[str, Any]] = [
        {"type": "plan", "title": "Release", "tasks": cards},
        {"type": "markdown", "text": "x" * 8_000},
    ]
    for blocks, error in ((too_long, "invalid_blocks"), (too_much, "msg_blocks_too_long")):
        with pytest.raises(SlackApiError) as refused:
            await client.chat_update(channel=DEFAULT_CHANNEL, ts=ts, text="x", blocks=blocks)
        assert refused.value.response["error"] == error
