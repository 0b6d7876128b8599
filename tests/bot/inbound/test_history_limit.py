"""Thread history under Slack's limits for distributed apps (``SLACK_HISTORY_LIMIT``).

``distributed``: one ``conversations.replies`` call a minute per workspace, of at most 15
messages. When that is spent a run starts at once from what the app kept of its thread
(the thread's latest run) and its status says older messages were not read;
``slack_read_thread`` tells the model the same. The real app, the fake Slack, llmock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmock.scenarios import Reply, ToolCall

from bot import messages
from bot.config.settings import HistoryLimit
from bot.runs.tools import SLACK_READ_THREAD
from bot.slack_api.history_allowance import (
    DISTRIBUTED_MESSAGES,
    DISTRIBUTED_WINDOW_S,
    Grant,
    HistoryAllowance,
)
from tests.bot.harness import (
    ACTION_STOP,
    SHORT_TEXT,
    WAIT_S,
    block_text,
    buttons,
    stalled_answer,
)
from tests.bot.inbound.test_thread_history import PERSON, long_thread, sent
from tests.bot.runs.test_mcp_app import tool_messages
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message


def test_tier3_grants_every_page_and_distributed_one_short_page_a_minute() -> None:
    assert HistoryAllowance(HistoryLimit.TIER3).take(10) == Grant(10, None)
    now = [0.0]
    one, other = (HistoryAllowance(HistoryLimit.DISTRIBUTED, clock=lambda: now[0]) for _ in "ab")
    assert one.take(10) == Grant(1, DISTRIBUTED_MESSAGES)
    assert one.take(10).pages == 0  # spent: answered at once, never waited for
    assert other.take(10).pages == 1  # another workspace has its own minute
    now[0] = DISTRIBUTED_WINDOW_S - 0.1
    assert one.take(10).pages == 0
    now[0] = DISTRIBUTED_WINDOW_S
    assert one.take(10).pages == 1


async def test_a_distributed_app_reads_one_short_page_then_starts_from_what_it_kept(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(SLACK_HISTORY_LIMIT="distributed")
    parent = long_thread(bot.slack, 30)
    llm.reply("First answer.")
    _, status = await bot.mention("what happened first?", thread_ts=parent)
    await bot.final(status)
    (call,) = bot.slack.calls("conversations.replies")
    assert int(call.args["limit"]) == DISTRIBUTED_MESSAGES
    first = [str(m["content"]) for m in sent(llm, 0)]
    assert f"<@{PERSON}>: update 0" in first

    # Within the minute: no call, the run starts from the thread's latest run, and says so.
    llm.add(*stalled_answer(2.0, with_tool=False, text=SHORT_TEXT))
    assert await bot.event(slack_requests.app_mention("and then?", thread_ts=parent)) == 200

    def noted(slack: FakeSlack) -> Message | None:
        for message in slack.thread(DEFAULT_CHANNEL, parent):
            if message.is_bot and messages.HISTORY_NOT_READ in block_text(message):
                return message
        return None

    live = await bot.slack.wait_until(noted, timeout=WAIT_S)
    assert live is not None
    assert ACTION_STOP in buttons(live)  # said while the run is live
    await bot.final(live)
    assert len(bot.slack.calls("conversations.replies")) == 1
    second = [str(m["content"]) for m in sent(llm, 1)]
    assert "First answer." in second  # the app's own answer, as it kept it
    assert f"<@{PERSON}>: update 0" in second
    assert second[-1] == "and then?"


async def test_slack_read_thread_tells_the_model_when_the_allowance_is_spent(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(SLACK_HISTORY_LIMIT="distributed")
    parent = long_thread(bot.slack, 3)
    read = Reply(tool_calls=(ToolCall(SLACK_READ_THREAD, {}),))
    llm.add(read)
    llm.reply("Read it.")
    _, status = await bot.mention("read the thread", thread_ts=parent)
    await bot.final(status)

    # The mention's own read took the minute's call: the tool is told, it does not wait.
    assert len(bot.slack.calls("conversations.replies")) == 1
    answers: list[Any] = tool_messages(llm.requests[1])
    assert answers == [messages.HISTORY_NOT_READ_TOOL]


async def test_tier3_is_the_default_with_a_bot_token(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot()
    assert bot.app.settings.history_limit is HistoryLimit.TIER3
    for text in ("one", "two"):
        parent = long_thread(bot.slack, 3)
        llm.reply(SHORT_TEXT)
        _, status = await bot.mention(text, thread_ts=parent)
        assert messages.HISTORY_NOT_READ not in block_text(await bot.final(status))
    assert len(bot.slack.calls("conversations.replies")) == 2
