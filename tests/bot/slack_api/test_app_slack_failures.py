"""When Slack says no: rate limits, server errors and refused optional methods.

docs/slack-setup.md, Rate limits: progress updates are coalesced and dropped before
terminal messages are; 429s are retried after Retry-After; ``chat.postMessage`` is never
blindly retried; terminal messages are written with ``chat.update`` on the stored ``ts``, once. The
streaming methods are optional: refused, the answer goes into the status message.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import pytest
from llmock.scenarios import Reply, StreamFault
from structlog.testing import capture_logs

from agent_core import ThreadKey
from bot import messages
from bot.errors import SlackRefused
from bot.runs.session import AnswerStream
from bot.slack_api.surface import SlackSurface
from bot.views.status import ACTION_ABORT, ACTION_STOP
from tests.bot.harness import (
    LONG_TEXT,
    WAIT_S,
    block_text,
    buttons_in,
    is_final,
    stalled_answer,
)
from tests.fakes import slack_requests
from tests.fakes.slack_messages import StreamState
from tests.fakes.slack_workspace import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from bot.slack_api.rate_budget import SlackRateBudget
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import ApiCall, FakeSlack
    from tests.fakes.slack_messages import Message


def ends_the_run(args: dict[str, Any]) -> bool:
    """A chat.update that takes the Stop and Abort buttons away: the terminal write."""
    return not {ACTION_STOP, ACTION_ABORT} & set(buttons_in(args.get("blocks")))


def updates_of(slack: FakeSlack, message: Message) -> list[ApiCall]:
    """Every chat.update attempt on ``message``, failed ones included."""
    return [c for c in slack.calls("chat.update") if c.args.get("ts") == message.ts]


@pytest.mark.parametrize(
    ("status", "retry_after", "times"), [(429, 1, 3), (500, 0, 2)], ids=["429-storm", "500"]
)
async def test_chat_update_failures_still_give_one_terminal_write(
    bot: Bot, llm: LLMock, status: int, retry_after: int, times: int
) -> None:
    # Without streaming every chunk of the answer changes the status message: plenty of
    # progress to coalesce.
    bot.slack.make_unknown("chat.startStream")
    llm.add(*stalled_answer(0.3, with_tool=False))
    _, running = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)  # the stall began
    # The terminal write's attempts fail, whatever progress the budget sends before it.
    bot.slack.fail_next(
        "chat.update", status=status, retry_after=retry_after, times=times, only=ends_the_run
    )

    final = await bot.settled(running)

    text = block_text(final)
    assert is_final(final)
    assert "Finished" in text
    assert "word59" in text  # the answer, all of it
    writes = [r for r in final.history if r.blocks == final.blocks]
    assert len(writes) == 1 and writes[0] is final.history[-1]  # once, and nothing after it
    attempts = updates_of(bot.slack, final)
    failed = [c for c in attempts if c.status == status]
    assert len(failed) == times
    assert all(c.args["blocks"] == final.blocks for c in failed)  # resent, same content
    assert len([c for c in attempts if c.ok and c.args["blocks"] == final.blocks]) == 1
    # Progress was coalesced: far fewer writes than chunks the model streamed.
    (request,) = llm.requests
    assert len([c for c in attempts if c.ok]) < request.chunks_sent / 4


async def test_a_status_post_whose_fate_cannot_be_checked_is_not_resent_and_no_model_is_called(
    bot: Bot, llm: LLMock
) -> None:
    # A 500 leaves the post's fate unknown, and the thread cannot be read to find out
    # (a post that can be checked is, and is posted again if absent: test_slack_post_faults).
    bot.slack.fail_next("chat.postMessage", status=500)
    bot.slack.fail_next("conversations.replies", status=500, times=3)
    llm.reply("Answer to the second request.")
    first = slack_requests.app_mention("the first request")
    thread_ts = first["event"]["ts"]

    assert await bot.event(first) == 200
    failed = await bot.slack.wait_for_call("chat.postMessage", timeout=WAIT_S)
    await bot.slack.wait_until(lambda s: len(s.calls("conversations.replies")) == 3, WAIT_S)
    # A later mention elsewhere runs normally; by the time it has, any resend of the
    # failed post or run of the first request would have happened.
    _, other = await bot.mention("the second request")
    await bot.final(other)

    assert failed.status == 500 and failed.args["thread_ts"] == thread_ts
    posts = bot.slack.calls("chat.postMessage")
    assert [c.args["thread_ts"] for c in posts].count(thread_ts) == 1  # one attempt, no resend
    assert [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.is_bot] == []
    (request,) = llm.requests
    assert request.body["messages"][-1]["content"] == "the second request"
    assert bot.app.ctx is not None
    thread = ThreadKey(bot.slack.workspace.team_id, DEFAULT_CHANNEL, thread_ts)
    assert bot.app.ctx.supervisor.live_in_thread(thread) is None  # the thread is free again


@pytest.mark.parametrize("error", ["not_allowed_token_type", "missing_scope"])
async def test_refused_streaming_falls_back_to_the_status_message(
    bot: Bot, llm: LLMock, error: str
) -> None:
    bot.slack.fail_next("chat.startStream", error=error)
    llm.reply(f"Fallback answer: {LONG_TEXT}")  # chunks arrive while startStream is out

    with capture_logs() as logs:
        thread_ts, running = await bot.mention("run the checks")
        final = await bot.final(running)

    assert "Fallback answer: word0" in block_text(final)
    assert "word59" in block_text(final)
    assert len(bot.slack.calls("chat.startStream")) == 1  # tried once, then fell back
    assert bot.slack.calls("chat.appendStream") == []
    assert [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.stream] == []
    # The refused stream let go at once: the terminal write did not wait out its timeout.
    assert [e for e in logs if e["event"] == "stream.close_timed_out"] == []


async def test_appends_refused_mid_stream_fall_back_and_the_stream_is_stopped(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer(0.3, with_tool=False))  # the stream starts before the stall
    bot.slack.fail_next("chat.appendStream", error="missing_scope")

    thread_ts, running = await bot.mention("write a lot")
    final = await bot.settled(running)

    assert "word59" in block_text(final)  # the rest of the answer is in the status message
    (streamed,) = [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.stream]
    assert streamed.stream is StreamState.STOPPED  # not left "streaming" for good


# -- the answer after a retried step -------------------------------------------------------

STALE = " ".join(f"stale{i}" for i in range(30))
FRESH = "The fresh answer: 42."


def retried_answer(llm: LLMock) -> None:
    """The model streams part of an answer, the connection drops, and the retried step
    gives a different, whole answer."""
    llm.add(Reply(text=STALE), StreamFault("disconnect", after_chunks=8))
    llm.reply(FRESH)


async def test_text_of_a_failed_attempt_is_not_in_the_final_status(bot: Bot, llm: LLMock) -> None:
    bot.slack.make_unknown("chat.startStream")  # the answer goes into the status message
    retried_answer(llm)

    _, running = await bot.mention("what is the answer?")
    final = await bot.settled(running)

    failed, retried = llm.requests
    assert not failed.completed and retried.completed
    text = block_text(final)
    assert FRESH in text
    assert "stale" not in text


async def test_text_of_a_failed_attempt_does_not_stay_in_the_streamed_answer(
    bot: Bot, llm: LLMock
) -> None:
    retried_answer(llm)

    thread_ts, running = await bot.mention("what is the answer?")
    final = await bot.settled(running)

    (streamed,) = [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.stream]
    assert streamed.stream is StreamState.STOPPED
    # While it happened, the stream said so...
    assert any(messages.STREAM_RETRYING in r.text for r in streamed.history)
    assert any("stale0" in r.text for r in streamed.history)
    # ...and at the end it shows the answer that counts, and only that.
    for shown in (streamed.text, block_text(streamed)):
        assert FRESH in shown
        assert "stale" not in shown and messages.STREAM_RETRYING not in shown
    assert "stale" not in block_text(final)


# -- the answer stream, on its own ---------------------------------------------------------


class RefusingBudget:
    """Stands in for a workspace budget: every call is held until ``answer`` is set, then
    refused as Slack refuses a missing scope."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.called = asyncio.Event()
        self.answer = asyncio.Event()

    async def call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(method)
        self.called.set()
        await self.answer.wait()
        raise SlackRefused(method, "missing_scope")


async def test_a_refused_stream_with_text_still_buffered_finishes_at_once() -> None:
    # Deterministic form of the race above: more answer text arrives while
    # chat.startStream is out, then Slack refuses it.
    budget = RefusingBudget()
    surface = SlackSurface("T1", cast("SlackRateBudget", budget))
    stream = AnswerStream(surface, "C1", "1.0", "U1", "T1")
    stream.start()
    stream.push("first words ")
    await budget.called.wait()
    stream.push("more words")
    budget.answer.set()

    with capture_logs() as logs:
        await stream.finish()

    assert [e["event"] for e in logs if e["event"].startswith("stream.")] == []
    assert budget.calls == ["chat.startStream"]
    assert not stream.active
