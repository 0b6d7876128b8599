"""A click's effect shows at once, whatever else waits for Slack's ``chat.update`` budget
(docs/stopping.md, The path of a click).

The workspace's ``chat.update`` budget is spent: Slack answered the run's first progress
update 429 with a minute's Retry-After, so every ``chat.update`` of the workspace waits
(as it would behind 200 runs streaming). A Stop, then an Abort, pressed on the run's
status message still change it at once: the app answers each click through its own
``response_url`` with ``replace_original``, which Slack does not count against
``chat.update``. The real app, the fake Slack (which applies ``replace_original`` to the
message the click came from, as Slack does) and llmock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.bot.harness import (
    ACTION_ABORT,
    ACTION_STOP,
    SHORT_TEXT,
    block_text,
    buttons,
    stalled_answer,
)
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory

SLACK_PAUSE_S = 60
"""Longer than any wait of this test: only the click's own answer can show in time."""


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
