"""Group DMs (``mpim``) work like DMs (issue 10): a message there starts a run in its
thread, and one that @-mentions the app (Slack then sends both a ``message`` and an
``app_mention`` for it) starts exactly one.

Slack's shapes: a group DM's ``message`` event has ``channel_type: mpim`` and a ``G``
channel id (``message.mpim``, scope ``mpim:history``); outside one-to-one DMs a mention
also arrives as ``app_mention``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.bot.harness import block_text, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_GROUP_DM_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.harness import Bot


async def test_a_group_dm_message_starts_a_run_in_its_thread(bot: Bot, llm: LLMock) -> None:
    llm.reply("Hello from a group DM.")
    envelope = slack_requests.group_dm_message("what time is it?")
    ts = envelope["event"]["ts"]

    assert await bot.event(envelope) == 200

    status = await bot.status_message(DEFAULT_GROUP_DM_CHANNEL, ts)
    final = await bot.until(status, is_final)
    assert "Hello from a group DM." in block_text(final)


async def test_a_mention_in_a_group_dm_starts_one_run(bot: Bot, llm: LLMock) -> None:
    llm.reply("Just one answer.")
    mention = f"<@{bot.slack.workspace.bot_user_id}>"
    message = slack_requests.group_dm_message("what time is it?", mention=True)
    ts = message["event"]["ts"]
    app_mention = slack_requests.app_mention(
        "what time is it?", channel=DEFAULT_GROUP_DM_CHANNEL, ts=ts
    )
    assert message["event"]["text"].startswith(mention)

    assert await bot.event(message) == 200
    assert await bot.event(app_mention) == 200

    status = await bot.status_message(DEFAULT_GROUP_DM_CHANNEL, ts)
    await bot.until(status, is_final)
    posts = [c for c in bot.slack.calls("chat.postMessage") if c.args.get("thread_ts") == ts]
    assert len(posts) == 1  # one status message: one run
    assert bot.ephemerals_for(DEFAULT_USER, DEFAULT_GROUP_DM_CHANNEL) == []  # no "busy"
    assert len(llm.requests) == 1
