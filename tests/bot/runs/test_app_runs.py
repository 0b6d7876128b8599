"""End to end: a mention starts a run in its thread; Stop and Abort do what docs/stopping.md says.

The app runs for real on a loopback port; Slack is the local fake (real HTTP, signed
requests), the model is llmock (real streaming HTTP).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault, ToolCall

from tests.agent_core.helpers import offered_tools
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, block_text, buttons
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

LONG_TEXT = " ".join(f"word{i}" for i in range(60))


def stalled_answer(seconds: float = 30.0, *, with_tool: bool = True) -> tuple[Reply, StreamFault]:
    calls = (ToolCall("current_time", {}),) if with_tool else ()
    return (
        Reply(text=LONG_TEXT, tool_calls=calls),
        StreamFault("stall", after_chunks=3, stall_seconds=seconds),
    )


async def test_a_mention_runs_in_its_thread_and_ends_with_the_handoff(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply("The answer is 42: see https://example.com/answer.")
    thread_ts, status = await bot.mention("what is the answer?")

    assert status.thread_ts == thread_ts
    assert sorted(buttons(status)) == sorted([ACTION_STOP, ACTION_ABORT])
    final = await bot.final(status)
    text = block_text(final)
    for heading in ("Outcome", "Evidence", "Artifacts", "Handoff"):
        assert heading in text
    assert "Finished" in text
    assert "https://example.com/answer" in text
    await bot.slack.wait_for_call(
        "agents.sessions.setStatus", lambda c: c.args["status"] == "closed", timeout=15
    )
    statuses = [c.args["status"] for c in bot.slack.calls("agents.sessions.setStatus")]
    assert statuses == ["processing", "closed"]
    start = bot.slack.calls("chat.startStream")[0]
    assert start.args["thread_ts"] == thread_ts
    assert start.args["recipient_user_id"] == DEFAULT_USER
    assert bot.slack.calls("chat.stopStream")
    streamed = [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.stream is not None]
    assert "The answer is 42" in streamed[0].text
    posts = [c for c in bot.slack.calls("chat.postMessage") if c.ok]
    assert len(posts) == 1  # one status message, updated in place


async def test_stop_mid_stream_posts_the_final_turn_summary(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer(0.5))
    llm.reply("Stopped early: nothing was checked yet.")
    _thread_ts, status = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=15)

    assert await bot.click(status, ACTION_STOP) == 200
    stopping = await bot.until(status, lambda m: buttons(m) == [ACTION_ABORT])
    assert "Stopping" in block_text(stopping)
    final = await bot.final(status)

    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "Stopped early: nothing was checked yet." in text
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert llm.requests[0].completed  # the step in flight finished
    assert not buttons(final)


async def test_abort_mid_stream_closes_the_model_connection(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer())
    _, status = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=15)

    assert await bot.click(status, ACTION_ABORT) == 200
    final = await bot.final(status)

    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    (record,) = llm.requests
    assert not record.completed  # the model server saw the connection close...
    assert record.duration < 30  # ...long before the 30 s stall would have ended


async def test_stop_then_abort(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer())
    _, status = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=15)

    await bot.click(status, ACTION_STOP)
    stopping = await bot.until(status, lambda m: buttons(m) == [ACTION_ABORT])
    assert await bot.click(stopping, ACTION_ABORT) == 200
    final = await bot.final(status)

    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    assert len(llm.requests) == 1 and not llm.requests[0].completed


async def test_slacks_native_stop_is_a_graceful_stop(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer(0.5))
    llm.reply("Stopped from Slack's own button.")
    thread_ts, status = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=15)

    envelope = slack_requests.agent_session_stopped(
        channel=DEFAULT_CHANNEL, thread_ts=thread_ts, user=DEFAULT_USER
    )
    assert await bot.event(envelope) == 200
    final = await bot.final(status)

    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert offered_tools(llm.requests[-1]) == ["final_report"]


async def test_without_streaming_methods_the_answer_goes_in_the_status_message(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot()
    bot.slack.make_unknown("chat.startStream")
    bot.slack.make_unknown("agents.sessions.setStatus")
    llm.reply("Fallback answer without streaming.")
    _, status = await bot.mention("hello")
    final = await bot.final(status)

    assert "Fallback answer without streaming." in block_text(final)
    assert len(bot.slack.calls("chat.startStream")) == 1  # tried once, then fell back
    assert bot.slack.calls("chat.appendStream") == []

    llm.reply("Second run, same workspace.")
    _, second = await bot.mention("again")
    await bot.final(second)
    assert len(bot.slack.calls("chat.startStream")) == 1  # not retried: known unavailable
    assert len(bot.slack.calls("agents.sessions.setStatus")) == 1


async def test_a_reply_in_a_finished_thread_continues_with_its_history(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply("First answer: the deploy is green.")
    thread_ts, status = await bot.mention("is the deploy green?")
    await bot.final(status)

    llm.reply("Second answer, with context.")
    reply = slack_requests.thread_reply("and staging?", thread_ts=thread_ts)
    assert await bot.event(reply) == 200
    await bot.slack.wait_until(
        lambda s: len([c for c in s.calls("chat.postMessage") if c.ok]) == 2, timeout=15
    )
    second_status = next(
        m
        for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts)
        if m.is_bot and m.ts != status.ts and m.stream is None
    )
    await bot.final(second_status)

    messages = llm.requests[-1].body["messages"]
    contents = [str(m.get("content")) for m in messages]
    assert any("is the deploy green?" in c for c in contents)
    assert contents[-1] == "and staging?"


async def test_a_dm_starts_a_run(bot: Bot, llm: LLMock) -> None:
    llm.reply("Hello in private.")
    envelope = slack_requests.dm_message("hi there")
    assert await bot.event(envelope) == 200
    channel, ts = envelope["event"]["channel"], envelope["event"]["ts"]
    status = await bot.status_message(channel, ts)
    final = await bot.final(status)
    assert "Finished" in block_text(final)
    assert llm.requests[0].body["messages"][-1]["content"] == "hi there"


async def test_a_reply_continues_a_thread_whose_run_lived_in_another_worker(
    make_bot: BotFactory, llm: LLMock
) -> None:
    worker_a = await make_bot()
    worker_b = await make_bot()  # same database, same Slack: a second worker process
    llm.reply("First answer, from worker A.")
    thread_ts, status = await worker_a.mention("is the deploy green?")
    await worker_a.final(status)

    llm.reply("Second answer, from worker B.")
    assert await worker_b.event(slack_requests.thread_reply("and staging?", thread_ts=thread_ts))
    await worker_b.slack.wait_until(
        lambda s: len([c for c in s.calls("chat.postMessage") if c.ok]) == 2, timeout=15
    )
    second_status = next(
        m
        for m in worker_b.slack.thread(DEFAULT_CHANNEL, thread_ts)
        if m.is_bot and m.ts != status.ts and m.stream is None
    )
    await worker_b.final(second_status)
    messages = llm.requests[-1].body["messages"]
    assert messages[-1]["content"] == "and staging?"
    assert any("First answer, from worker A." in str(m.get("content")) for m in messages)
