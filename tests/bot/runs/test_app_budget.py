"""The app runs every mention under the budget its settings describe (docs/stopping.md,
Budgets): the real app on loopback, the fake Slack, llmock as a model that never stops
calling tools."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, StreamFault, ToolCall

from tests.agent_core.helpers import offered_tools, tool_results
from tests.bot.harness import (
    ACTION_STOP,
    SHORT_TEXT,
    block_text,
    buttons,
    is_final,
    stalled_answer,
)

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.fakes.slack_messages import Message


async def test_a_mention_that_spends_its_budget_wraps_up_blocked_and_names_it(
    make_bot: BotFactory, llm: LLMock
) -> None:
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),) * 3, times=None))
    bot = await make_bot(
        RUN_TOOL_CALL_BUDGET="1", MAX_TOOL_CALLS_PER_STEP="2", MODEL_MAX_OUTPUT_TOKENS="777"
    )
    _, status = await bot.mention("what time is it, again and again?")
    final = await bot.final(status)

    # One call ran, the second found the budget spent, the third was past the step's cap;
    # then the forced final turn, and nothing more.
    assert len(llm.requests) == 2
    results = tool_results(llm.requests[1])
    assert "tool-call budget is spent" in results[1]
    assert "MAX_TOOL_CALLS_PER_STEP" in results[2]
    assert offered_tools(llm.requests[1]) == ["final_report"]
    assert all((r.body or {})["max_completion_tokens"] == 777 for r in llm.requests)
    text = block_text(final)
    assert "Blocked" in text
    assert "EXIT-BUDGET" in text
    assert "tool-call budget is spent: 1 tool call used of 1 (RUN_TOOL_CALL_BUDGET)" in text
    assert "Why it ended: its budget was spent." in text


SPEND = re.compile(r"(\d+) tokens · (\d+) tool calls? · \$(\d+\.\d\d)")


def spend_shown(message: Message) -> tuple[int, int, float] | None:
    """The request's spend as the status message shows it: tokens, tool calls, USD."""
    found = SPEND.search(block_text(message))
    if found is None:
        return None
    return int(found[1]), int(found[2]), float(found[3])


async def test_the_status_message_shows_what_the_request_has_spent_while_it_runs(
    make_bot: BotFactory, llm: LLMock
) -> None:
    # Faults are taken in order, one a request: the first reply's is a no-op, so the
    # second reply is the one that stalls.
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)), StreamFault("stall", 1, 0.0))
    # The answer, held long enough to read the status on the way.
    llm.add(*stalled_answer(5.0, with_tool=False, text=SHORT_TEXT))
    # 10,000 USD per million tokens either way: a cent a token, so the cost is exact.
    bot = await make_bot(MODEL_PRICE_INPUT="10000", MODEL_PRICE_OUTPUT="10000")
    _, status = await bot.mention("what time is it?")

    # The first reply's tokens and its tool call, while the second reply stalls.
    def after_the_tool(message: Message) -> bool:
        shown = spend_shown(message)
        return shown is not None and shown[1] == 1

    live = await bot.until(status, after_the_tool)
    assert not is_final(live)
    shown = spend_shown(live)
    assert shown is not None
    tokens, _, cost = shown
    assert tokens > 0
    assert cost == pytest.approx(tokens / 100)
    assert ACTION_STOP in buttons(live)

    final = await bot.final(status)
    # The final message counts the whole request: both replies' tokens, one tool call.
    ended = spend_shown(final)
    assert ended is not None
    assert ended[0] > tokens
    assert ended[1] == 1
    assert ended[2] == pytest.approx(ended[0] / 100)


async def test_without_prices_the_status_shows_no_cost(make_bot: BotFactory, llm: LLMock) -> None:
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)))
    llm.reply("It is noon.")
    bot = await make_bot()
    _, status = await bot.mention("what time is it?")
    final = await bot.final(status)
    text = block_text(final)
    assert re.search(r"\d+ tokens · 1 tool call\b", text)
    assert "$" not in text


async def test_the_status_counts_what_a_sub_agent_spends_while_it_works(
    make_bot: BotFactory, llm: LLMock
) -> None:
    delegate = ToolCall("delegate", {"task": "read the clock", "tools": ["current_time"]})
    no_stall = StreamFault("stall", 1, 0.0)
    llm.add(Reply(tool_calls=(delegate,)), no_stall)  # the parent
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)), no_stall)  # the sub-agent
    llm.add(*stalled_answer(5.0, with_tool=False, text=SHORT_TEXT))  # its answer, held
    llm.reply("The sub-agent read the clock.")  # the parent's answer
    bot = await make_bot()
    _, status = await bot.mention("ask a sub-agent for the time")

    # While the sub-agent's answer is held: the parent's delegate and its tool call.
    def both_calls(message: Message) -> bool:
        return re.search(r"\d+ tokens · 2 tool calls\b", block_text(message)) is not None

    live = await bot.until(status, both_calls)
    assert not is_final(live)
    final = await bot.final(status)
    assert re.search(r"\d+ tokens · 2 tool calls\b", block_text(final))
