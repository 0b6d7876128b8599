"""App Home shows what each run has spent (docs/slack-setup.md, Home tab): a live run
what its request has spent so far, from the run itself on the worker that holds it; an
ended run what its stored result says, and nothing at all where nothing was stored.
The real app, the fake Slack, llmock reporting usage in its stream."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core import ExitCode, Outcome, RunRecord, RunState, ThreadKey
from agent_core.values.clock import utcnow
from bot import messages
from tests.bot.dashboard.test_home import home, open_home, says, view_text
from tests.bot.harness import SHORT_TEXT, stalled_answer
from tests.bot.runs.test_app_budget import spend_shown
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.fakes.slack_messages import Message

PRICED = {"MODEL_PRICE_INPUT": "10000", "MODEL_PRICE_OUTPUT": "10000"}
"""A cent a token: the cost shown is exact."""


async def test_home_shows_what_a_live_run_and_an_ended_run_spent(
    make_bot: BotFactory, llm: LLMock
) -> None:
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)), StreamFault("stall", 1, 0.0))
    llm.add(*stalled_answer(5.0, with_tool=False, text=SHORT_TEXT))
    bot = await make_bot(**PRICED)
    _, status = await bot.mention("what time is it?")

    def tool_ran(message: Message) -> bool:
        shown = spend_shown(message)
        return shown is not None and shown[1] == 1

    live = await bot.until(status, tool_ran)
    shown = spend_shown(live)
    assert shown is not None
    tokens, _, cost = shown
    spent = f"{tokens} tokens · 1 tool call · ${cost:.2f}"

    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says("Working: turn 2"))
    assert spent in view_text(view)

    final = await bot.final(status)
    ended = spend_shown(final)
    assert ended is not None
    # Ended: the stored result's tokens (the run had no sub-agents: all of the request's).
    view = await home(bot, DEFAULT_USER, says(messages.NO_LIVE_RUNS))
    assert re.search(rf"\b{ended[0]} tokens\b", view_text(view)), view_text(view)


async def test_an_ended_run_with_nothing_stored_shows_no_spend(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot()
    assert bot.app.ctx is not None
    now = utcnow()
    await bot.app.ctx.store.create_run(
        RunRecord(
            id="run-without-result",
            thread=ThreadKey("T0TPTEAM001", DEFAULT_CHANNEL, "1700000000.000100"),
            requester=DEFAULT_USER,
            task="an old request",
            state=RunState.FAILED,
            outcome=Outcome.FAILED,
            exit_code=ExitCode.ERROR,
            created_at=now,
            updated_at=now,
        )
    )
    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says("an old request"))
    assert "token" not in view_text(view)
    assert "tool call" not in view_text(view)
