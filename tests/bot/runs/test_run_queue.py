"""The durable run queue (docs/operations.md, Queue and MAX_LIVE_RUNS), end to end: the
real app on a real SQLite file, fake Slack, llmock.

With ``MAX_LIVE_RUNS=1`` one stalled run fills the worker; the next mentions wait in the
queue, in their own status messages ("Queued: n ahead", Stop and Abort). A Stop or Abort
there ends the run without it ever reaching the model; a run starts in its queued message
once the slot frees, with the guidance written to it while it waited; and queued runs
outlive a restart.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agent_core import RunState
from agent_core.values.records import is_waiting
from bot import messages
from bot.runs.queue_places import worth_refreshing
from bot.runs.run_queue import history_of, starting_conversation
from tests.bot.harness import (
    ACTION_ABORT,
    ACTION_STOP,
    SHORT_TEXT,
    block_text,
    buttons,
    is_final,
    run_id_of,
    stalled_answer,
)
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_messages import Message

QUEUE = {"MAX_LIVE_RUNS": 1}


def asked_about(llm: LLMock, text: str) -> bool:
    """True if any request llmock received carried ``text`` (a task, a guidance)."""
    return any(text in json.dumps(r.body or {}) for r in llm.requests)


async def fill_the_worker(bot: Bot, llm: LLMock) -> Message:
    """Start one run that stalls mid-answer: the worker's only slot is taken."""
    llm.add(*stalled_answer(60.0, with_tool=False, text=SHORT_TEXT))
    _, running = await bot.mention("the long task")
    await bot.until(running, lambda m: "Working" in block_text(m))
    return running


async def queued(bot: Bot, task: str, ahead: int) -> Message:
    _, message = await bot.mention(task)
    assert f"Queued: {ahead} ahead" in block_text(message)
    assert buttons(message) == [ACTION_STOP, ACTION_ABORT]
    assert bot.live_run(message) is None  # nobody runs it
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    # The message is posted first, then the run (stored when it was accepted) is let go
    # to the queue with it.

    async def waiting() -> bool:
        record = await store.get_run(run_id_of(message))
        return record is not None and is_waiting(record) and record.status_ts == message.ts

    await until_async(waiting, what="the queued run to wait in its message")
    return message


def bot_messages(bot: Bot, message: Message) -> list[Message]:
    assert message.thread_ts is not None
    return [m for m in bot.slack.thread(message.channel, message.thread_ts) if m.is_bot]


async def test_stop_and_abort_end_queued_runs_without_the_model(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**QUEUE)
    running = await fill_the_worker(bot, llm)
    first = await queued(bot, "queued task one", ahead=0)
    second = await queued(bot, "queued task two", ahead=1)

    assert await bot.click(first, ACTION_STOP) == 200
    stopped = await bot.final(first)
    text = block_text(stopped)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert messages.QUEUED_NEVER_STARTED in text
    assert ACTION_STOP not in buttons(stopped) and ACTION_ABORT not in buttons(stopped)

    assert await bot.click(second, ACTION_ABORT) == 200
    aborted = await bot.final(second)
    assert f"aborted by <@{DEFAULT_USER}>" in block_text(aborted)
    assert messages.QUEUED_NEVER_STARTED in block_text(aborted)

    # One status message each, ended once; the model never heard of either task.
    for message in (first, second):
        (only,) = bot_messages(bot, message)
        assert is_final(only)
    assert not asked_about(llm, "queued task one")
    assert not asked_about(llm, "queued task two")
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    for message, reason in ((first, "stop"), (second, "abort")):
        record = await store.get_run(run_id_of(message))
        assert record is not None and record.state is RunState.USERINTERLUDE
        assert record.stop_reason is not None and record.stop_reason.value == reason
        assert record.owner is None
    assert await store.count_queued() == 0
    assert await bot.click(running, ACTION_ABORT) == 200
    await bot.final(running)


async def test_a_queued_run_starts_when_the_slot_frees_and_takes_its_guidance(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**QUEUE)
    running = await fill_the_worker(bot, llm)
    waiting = await queued(bot, "the waiting task", ahead=0)
    assert waiting.thread_ts is not None

    # A reply in its thread while it waits is guidance, committed before the ack and
    # kept for when it starts.
    reply = slack_requests.thread_reply("please answer in French", thread_ts=waiting.thread_ts)
    assert await bot.event(reply) == 200
    assert bot.app.ctx is not None
    (guidance,) = await bot.app.ctx.store.pending_guidance([run_id_of(waiting)])
    assert guidance.text == "please answer in French"
    # A second mention in its thread is not a second run.
    mention = slack_requests.app_mention(
        f"<@{bot.slack.workspace.bot_user_id}> another", thread_ts=waiting.thread_ts
    )
    assert await bot.event(mention) == 200

    llm.reply("Bonjour: the waiting task is done.")
    assert await bot.click(running, ACTION_ABORT) == 200
    await bot.final(running)

    done = await bot.final(waiting)  # the same status message, now the run's report
    assert "Finished" in block_text(done)
    assert asked_about(llm, "the waiting task")
    last = json.dumps(llm.requests[-1].body or {})
    assert "the waiting task" in last and "please answer in French" in last
    assert len([m for m in bot_messages(bot, waiting) if ACTION_STOP in buttons(m)]) == 0
    streamed = [m for m in bot_messages(bot, waiting) if "Bonjour" in (m.text or "")]
    assert streamed, "the answer streamed into the thread"


async def test_queued_runs_survive_a_restart(make_bot: BotFactory, llm: LLMock) -> None:
    first = await make_bot(**QUEUE, AUTO_RESUME="")
    await fill_the_worker(first, llm)
    waiting = await queued(first, "survives the restart", ahead=0)
    await first.app.shutdown()

    llm.reply("Done after the restart.")
    second = await make_bot(MAX_LIVE_RUNS=2, AUTO_RESUME="")
    done = await second.final(waiting)
    assert "Finished" in block_text(done)
    assert asked_about(llm, "survives the restart")


async def test_the_queue_gauge_counts_waiting_runs(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(**QUEUE, LEASE_TTL=3)
    running = await fill_the_worker(bot, llm)
    await queued(bot, "one", ahead=0)
    await queued(bot, "two", ahead=1)
    assert bot.app.ctx is not None
    await bot.app.ctx.worker.queue.tick()  # the worker's tick, now rather than in a second
    async with bot.http.get(f"{bot.url}/metrics") as response:
        body = await response.text()
    assert "threadpilot_queued_runs 2.0" in body
    assert await bot.click(running, ACTION_ABORT) == 200


# -- the pieces ------------------------------------------------------------------------------


def test_refreshes_are_kept_for_moves_that_matter() -> None:
    assert worth_refreshing(3, 2) and worth_refreshing(12, 9)
    assert not worth_refreshing(100, 90) and worth_refreshing(100, 75)
    assert not worth_refreshing(5, 5) and not worth_refreshing(5, 6)


def test_the_starting_conversation_gives_back_its_history() -> None:
    from agent_core.values.records import Checkpoint

    history: list[dict[str, Any]] = [
        {"role": "user", "content": "<@U1>: earlier"},
        {"role": "assistant", "content": "reply"},
    ]
    conversation = starting_conversation("system prompt", history, "the task")
    assert conversation[0]["role"] == "system" and conversation[-1]["content"] == "the task"
    assert history_of(Checkpoint("r", 0, conversation), "the task") == history
    assert history_of(Checkpoint("r", 3, conversation), "the task") == []
    assert history_of(None, "the task") == []


async def test_a_run_waiting_for_slack_to_take_its_final_message_leaves_its_slot(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """A run whose loop has ended uses no model capacity: its slot goes to the queue at
    once, not when Slack's rate limit lets its final message through."""
    bot = await make_bot(**QUEUE)
    running = await fill_the_worker(bot, llm)
    waiting = await queued(bot, "the waiting task", ahead=0)
    llm.reply("The waiting task is done.")
    # Slack refuses message updates for longer than this test waits.
    bot.slack.fail_next("chat.update", status=429, retry_after=60)
    assert await bot.click(running, ACTION_ABORT) == 200

    def answered(_: object) -> bool:
        return any("waiting task is done" in (m.text or "") for m in bot_messages(bot, waiting))

    await bot.slack.wait_until(answered, timeout=10.0)
    assert not is_final(bot.slack.message(running.channel, running.ts))
