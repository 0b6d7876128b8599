"""One person's share (docs/operations.md, Queue and MAX_LIVE_RUNS, "One person's
share"): at most ``MAX_RUNS_PER_USER`` runs live or queued per workspace. Past it a
mention gets an ephemeral note and starts nothing: no run row, no status message, no
model request. The real app on a real SQLite file, fake Slack, llmock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import LIVE_STATES, ThreadKey
from bot import messages
from tests.bot.harness import ACTION_ABORT, block_text
from tests.bot.runs.test_run_queue import asked_about, fill_the_worker, queued
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

SOMEONE_ELSE = "U0TPOTHER01"


async def refused(bot: Bot, task: str, *, earlier_notes: int = 0) -> str:
    """Mention the app with ``task`` (as the default user); the thread it would have run
    in, once the person's note has arrived."""
    envelope = slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> {task}")
    assert await bot.event(envelope) == 200
    notes = await bot.ephemerals(DEFAULT_USER, count=earlier_notes + 1)
    assert notes[-1] == messages.too_many_runs(3)
    return str(envelope["event"]["ts"])


async def test_a_persons_fourth_run_is_refused_and_never_reaches_the_model(
    make_bot: BotFactory, llm: LLMock
) -> None:
    # One slot: the first run works, the next two wait in the queue. Live or queued,
    # they are the person's three.
    bot = await make_bot(MAX_LIVE_RUNS=1, MAX_RUNS_PER_USER=3)  # 3: the app's default
    running = await fill_the_worker(bot, llm)
    await queued(bot, "the second task", ahead=0)
    await queued(bot, "the third task", ahead=1)

    thread_ts = await refused(bot, "the fourth task")
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
    assert await store.find_runs(thread=thread) == []  # no run row
    assert not [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.is_bot]
    mine = await store.find_runs(states=LIVE_STATES, limit=100)
    assert len(mine) == 3

    # Someone else is not held back by it (they wait in the queue like anyone).
    other = slack_requests.app_mention(
        f"<@{bot.slack.workspace.bot_user_id}> someone else's task", user=SOMEONE_ELSE
    )
    assert await bot.event(other) == 200
    theirs = await bot.status_message(DEFAULT_CHANNEL, str(other["event"]["ts"]))
    assert "Queued" in block_text(theirs)

    # Once one of the three ends, the person may start another.
    for n in range(3):
        llm.reply(f"Done, number {n}.")
    assert await bot.click(running, ACTION_ABORT) == 200
    await bot.final(running)
    _, fifth = await bot.mention("the fifth task")
    assert "Queued" in block_text(fifth) or "Working" in block_text(fifth)

    # The model heard of every task but the refused one.
    await bot.final(fifth)
    assert asked_about(llm, "the fifth task")
    assert not asked_about(llm, "the fourth task")


async def test_a_dm_past_the_limit_is_refused_too(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(MAX_LIVE_RUNS=1, MAX_RUNS_PER_USER=1)
    running = await fill_the_worker(bot, llm)
    dm = slack_requests.dm_message("a task by DM")
    assert await bot.event(dm) == 200
    channel = str(dm["event"]["channel"])
    (note,) = await bot.ephemerals(DEFAULT_USER, channel=channel)
    assert note == messages.too_many_runs(1)
    assert not [m for m in bot.slack.thread(channel, str(dm["event"]["ts"])) if m.is_bot]
    assert await bot.click(running, ACTION_ABORT) == 200
    await bot.final(running)
    assert not asked_about(llm, "a task by DM")


async def test_zero_turns_the_limit_off(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(MAX_LIVE_RUNS=1, MAX_RUNS_PER_USER=0)
    running = await fill_the_worker(bot, llm)
    for n in range(4):
        await queued(bot, f"queued task {n}", ahead=n)
    assert bot.ephemerals_for(DEFAULT_USER, DEFAULT_CHANNEL) == []
    assert await bot.click(running, ACTION_ABORT) == 200
