"""Who gets room, end to end (docs/operations.md, Queue and MAX_LIVE_RUNS): room that
frees goes to the oldest queued run of the person with the fewest runs going, not to the
oldest queued run; and a due resume takes room like a new run, waiting for it on a full
worker. The real app on a real SQLite file, fake Slack, llmock. (Several workers on
PostgreSQL: tests/system/test_resume_spread.py.)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agent_core import RunState
from agent_core.values.records import ResumeState, is_waiting
from bot.views.status import ACTION_RESUME_NOW
from tests.bot.harness import ACTION_ABORT, block_text, run_id_of
from tests.bot.runs.test_run_queue import fill_the_worker, queued
from tests.bot.workers.test_resume import (
    ANSWER,
    FAST,
    events,
    finished,
    paused,
    rate_limited,
    run_id_of_done,
    stored,
)
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory

SOMEONE_ELSE = "U0TPOTHER01"


def first_asked(llm: LLMock, text: str) -> int:
    """The index of the first request llmock received that carried ``text``."""
    for n, request in enumerate(llm.requests):
        if text in json.dumps(request.body or {}):
            return n
    raise AssertionError(f"the model was never asked about {text!r}")


async def test_freed_room_goes_to_the_person_with_fewer_runs_going(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(MAX_LIVE_RUNS=2)
    # The default user holds both places, and queues a third run.
    first = await fill_the_worker(bot, llm)
    second = await fill_the_worker(bot, llm)
    theirs = await queued(bot, "the busy person's third task", ahead=0)
    # Then someone else asks, and waits behind it.
    mention = slack_requests.app_mention(
        f"<@{bot.slack.workspace.bot_user_id}> someone else's first task", user=SOMEONE_ELSE
    )
    assert await bot.event(mention) == 200
    others = await bot.status_message(DEFAULT_CHANNEL, str(mention["event"]["ts"]))
    assert "Queued: 1 ahead" in block_text(others)

    llm.reply("Someone else's answer.")
    llm.reply("The third task's answer.")
    assert await bot.click(first, ACTION_ABORT) == 200
    await bot.final(first)

    # The freed place went to someone else's run (they had none going, the default user
    # still one), although the default user's third run is older.
    done = await bot.final(others)
    assert "Finished" in block_text(done)
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    # Its end freed the place again: now the third run's turn.
    third = await bot.final(theirs)
    assert "Finished" in block_text(third)
    assert first_asked(llm, "someone else's first task") < first_asked(
        llm, "the busy person's third task"
    )
    record = await store.get_run(run_id_of(theirs))
    assert record is not None and not is_waiting(record)
    assert await bot.click(second, ACTION_ABORT) == 200
    await bot.final(second)


async def test_a_due_resume_waits_for_room_on_a_full_worker(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(MAX_LIVE_RUNS=1, **FAST)
    llm.add(rate_limited(600.0))
    _, status = await bot.mention("summarise the report")
    status = await bot.until(status, paused)
    run_id = run_id_of_done(status, bot)
    filler = await fill_the_worker(bot, llm)  # the one place, taken by another run

    # Resume now: due at once, but there is no room. A pass of the schedule leaves it.
    assert await bot.click(status, ACTION_RESUME_NOW) == 200
    await until_async(
        lambda: events(bot, run_id, "resume.hurried"), what="the resume to be due now"
    )
    assert bot.app.ctx is not None
    await bot.app.ctx.worker.resumes.run_pending()
    record = await stored(bot, run_id)
    assert (record.state, record.resume) == (RunState.BLOCKED, ResumeState.SCHEDULED)
    assert await events(bot, run_id, "run.resumed") == []

    # The place frees: the resume takes it, in its own message, and finishes.
    llm.reply(ANSWER)
    assert await bot.click(filler, ACTION_ABORT) == 200
    await bot.until(status, finished)
    (resumed,) = await events(bot, run_id, "run.resumed")
    (abort,) = await bot.app.ctx.store.stop_requests_for(run_id_of(filler))
    assert resumed.at >= abort.requested_at
