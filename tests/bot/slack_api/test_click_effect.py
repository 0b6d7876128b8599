"""A click's effect shows at once, whatever else waits for Slack's ``chat.update`` budget
(docs/stopping.md, The path of a click).

In each test the workspace's ``chat.update`` budget is spent: Slack answered a progress
update 429 with a minute's Retry-After, so every ``chat.update`` of the workspace waits
(as it would behind 200 runs streaming). A click on a status message still changes it at
once: the app answers through the click's own ``response_url`` with
``replace_original``, which Slack does not count against ``chat.update``. A Stop, then an
Abort, on a live run; a Stop on a queued run (its ending); ``Don't resume`` on a paused
one. The real app, the fake Slack (which applies ``replace_original`` to the message the
click came from, as Slack does) and llmock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmock.scenarios import Fail

from agent_core.values.records import is_waiting
from bot import messages
from bot.views.status import ACTION_DONT_RESUME
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
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

SLACK_PAUSE_S = 60
"""Longer than any wait of this test: only the click's own answer can show in time."""


async def spend_chat_update(bot: Bot, llm: LLMock, task: str = "a long task") -> None:
    """Start a run that stalls mid-answer; Slack answers its first progress update 429
    with SLACK_PAUSE_S to wait, and the workspace's budget pauses every chat.update."""
    bot.slack.fail_next("chat.update", status=429, retry_after=SLACK_PAUSE_S)
    llm.add(*stalled_answer(30.0, with_tool=False, text=SHORT_TEXT))
    await bot.mention(task)
    await bot.slack.wait_until(lambda s: s.rate_limited("chat.update"))


async def test_stop_and_abort_show_at_once_while_chat_update_is_rate_limited(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot()
    bot.slack.fail_next("chat.update", status=429, retry_after=SLACK_PAUSE_S)
    llm.add(*stalled_answer(30.0, with_tool=False, text=SHORT_TEXT))
    _, status = await bot.mention("a long task")
    await bot.slack.wait_until(lambda s: s.rate_limited("chat.update"))
    updates = len(bot.slack.calls("chat.update"))

    assert await bot.click(status, ACTION_STOP) == 200
    stopping = await bot.until(status, lambda m: buttons(m) == [ACTION_ABORT])
    assert "Stopping" in block_text(stopping)
    assert f"<@{DEFAULT_USER}>" in block_text(stopping)  # who asked

    assert await bot.click(stopping, ACTION_ABORT) == 200
    aborting = await bot.until(status, lambda m: "Aborting" in block_text(m))
    assert buttons(aborting) == []

    # Both came through the clicks' response URLs, not chat.update (still paused).
    answers = [r for r in aborting.history if r.method == "response_url"]
    assert len(answers) == 2
    assert len(bot.slack.calls("chat.update")) == updates
    assert all(post.accepted for post in bot.slack.response_url_posts())


async def test_a_stop_on_a_queued_run_shows_its_ending_at_once(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(MAX_LIVE_RUNS=1)
    await spend_chat_update(bot, llm)  # this run fills the worker
    _, waiting = await bot.mention("a queued task")
    assert "Queued: 0 ahead" in block_text(waiting)
    assert bot.app.ctx is not None
    store = bot.app.ctx.store

    async def let_go() -> bool:  # the run waits in the queue, with its message
        record = await store.get_run(run_id_of(waiting))
        return record is not None and is_waiting(record) and record.status_ts == waiting.ts

    await until_async(let_go, what="the queued run to wait in its message")

    assert await bot.click(waiting, ACTION_STOP) == 200

    ended = await bot.until(waiting, is_final)
    assert messages.QUEUED_NEVER_STARTED in block_text(ended)
    assert ended.history[-1].method == "response_url"


async def test_dont_resume_shows_at_once(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(MAX_RETRY_AFTER=0.1)
    llm.add(Fail(429, retry_after=60.0, code="rate_limit_exceeded"))
    _, status = await bot.mention("summarise the report")
    paused = await bot.until(status, lambda m: ACTION_DONT_RESUME in buttons(m))
    await spend_chat_update(bot, llm, "another task")

    assert await bot.click(paused, ACTION_DONT_RESUME) == 200

    cancelled = await bot.until(status, lambda m: not buttons(m))
    assert messages.resume_cancelled(DEFAULT_USER) in block_text(cancelled)
    assert cancelled.history[-1].method == "response_url"
