"""The app runs every mention under the budget its settings describe (docs/stopping.md,
Budgets): the real app on loopback, the fake Slack, llmock as a model that never stops
calling tools."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmock.scenarios import Reply, ToolCall

from tests.agent_core.helpers import offered_tools, tool_results
from tests.bot.harness import block_text

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory


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
