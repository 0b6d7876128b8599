"""The database writes Slack's events cost (docs/architecture.md, The path of a mention).

A workspace sends the app every message of the channels it is in. Only the events that
can start or steer a run are written down (the delivery log, the thread's participants):
a storm of chatter the app has nothing to do with writes nothing, so clicks never queue
behind it on SQLite's one writer. The events that can act are still taken once, however
often Slack delivers them. Writes are counted by SQLite itself: triggers on every table
of the app's database file add one per row written.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiosqlite

from agent_core import StopReason, ThreadKey
from tests.bot.harness import SECRET, WAIT_S, run_id_of, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import (
    DEFAULT_CHANNEL,
    DEFAULT_DM_CHANNEL,
    DEFAULT_WORKSPACE,
    next_ts,
)
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_workspace import Json

OTHER = "U0TPOTHER01"
TEAM = DEFAULT_WORKSPACE.team_id


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


def database_of(bot: Bot) -> str:
    return bot.app.settings.DATABASE_URL.removeprefix("sqlite:///")


async def count_writes(path: str) -> None:
    """Count every row written to the database at ``path`` from now on (:func:`writes`)."""
    async with aiosqlite.connect(path) as db:
        tables = await db.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        await db.execute("CREATE TABLE test_writes (n INTEGER NOT NULL)")
        await db.execute("INSERT INTO test_writes VALUES (0)")
        for (table,) in tables:
            for change in ("INSERT", "UPDATE", "DELETE"):
                await db.execute(
                    f"CREATE TRIGGER test_{change.lower()}_{table} AFTER {change} ON {table} "
                    "BEGIN UPDATE test_writes SET n = n + 1; END"
                )
        await db.commit()


async def writes(path: str) -> int:
    async with aiosqlite.connect(path) as db:
        [(count,)] = await db.execute_fetchall("SELECT n FROM test_writes")
        return int(count)


def chatter() -> list[Json]:
    """What a busy workspace sends an app that is in its channels and has nothing to do."""
    storm: list[Json] = []
    for i in range(40):
        storm.append(slack_requests.channel_message(f"lunch at {i}?", user=OTHER))
        storm.append(slack_requests.thread_reply(f"+{i}", thread_ts=next_ts(), user=OTHER))
    for i in range(10):
        edited = slack_requests.channel_message(f"lunch at {i}!", user=OTHER)
        message = edited["event"]
        edited["event"] = {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "channel": DEFAULT_CHANNEL,
            "message": message,
            "ts": next_ts(),
            "event_ts": next_ts(),
        }
        storm.append(edited)
        by_app = slack_requests.thread_reply(f"build {i} passed", thread_ts=next_ts())
        by_app["event"] |= {"subtype": "bot_message", "bot_id": "B0CIBOT0001"}
        del by_app["event"]["user"]  # a webhook's post has none
        storm.append(by_app)
    return storm


async def test_a_storm_of_chatter_writes_nothing(make_bot: BotFactory) -> None:
    bot = await make_bot(STOP_POLICY="participants")
    path = database_of(bot)
    await count_writes(path)
    storm = chatter()

    answers = await asyncio.gather(
        *(bot.post(slack_requests.event_request(envelope, SECRET)) for envelope in storm)
    )

    assert [a.status for a in answers] == [200] * len(storm)
    assert await writes(path) == 0


async def test_what_can_act_is_still_taken_once_and_its_authors_recorded(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(STOP_POLICY="participants")
    store = store_of(bot)
    llm.add(*stalled_answer(3.0))
    llm.reply("Stopped: nothing checked yet.")
    llm.reply("Hello in private.")
    llm.reply("Continued.")
    thread_ts, status = await bot.mention("what time is it?")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    thread = ThreadKey(TEAM, DEFAULT_CHANNEL, thread_ts)
    run_id = run_id_of(status)

    guidance = slack_requests.thread_reply("Use UTC.", thread_ts=thread_ts, user=OTHER)
    stop = slack_requests.thread_reply("stop", thread_ts=thread_ts)
    dm = slack_requests.dm_message("hi there")
    for envelope in (guidance, guidance, stop, stop, dm, dm):
        assert await bot.event(envelope) == 200

    await bot.final(status)
    assert len(await store.guidance_for(run_id)) == 1
    assert OTHER in await store.participants(thread)
    requests = await store.stop_requests_for(run_id)
    assert [r.kind for r in requests] == [StopReason.STOP]  # one Stop, not escalated
    dm_ts = str(dm["event"]["ts"])
    await bot.final(await bot.status_message(DEFAULT_DM_CHANNEL, dm_ts))
    dm_thread = ThreadKey(TEAM, DEFAULT_DM_CHANNEL, dm_ts)
    assert len(await store.find_runs(thread=dm_thread)) == 1

    # A reply in the finished run's thread continues it, once; its author takes part.
    later = slack_requests.thread_reply("and in Paris?", thread_ts=thread_ts, user="U0TPLATER1")
    assert await bot.event(later) == 200
    assert await bot.event(later) == 200

    async def continued() -> list[Any] | None:
        runs = await store.find_runs(thread=thread)
        return runs if len(runs) == 2 else None

    await until_async(continued, what="the continuation's run", timeout=WAIT_S)
    assert "U0TPLATER1" in await store.participants(thread)
    await bot.slack.wait_until(lambda _: len(llm.requests) == 4, timeout=WAIT_S)
    assert len(await store.find_runs(thread=thread)) == 2


async def test_who_wrote_in_a_thread_before_the_app_was_asked_takes_part(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(STOP_POLICY="participants")
    parent = bot.slack.seed_message(DEFAULT_CHANNEL, "Is the deploy stuck?", user=OTHER)
    bot.slack.seed_message(DEFAULT_CHANNEL, "Looks like it.", thread_ts=parent, user="U0TPEARLY1")
    thread = ThreadKey(TEAM, DEFAULT_CHANNEL, parent)
    assert await store_of(bot).participants(thread) == set()  # the app was not part of it
    llm.reply("It is waiting for an approval.")

    _, status = await bot.mention("can you check?", thread_ts=parent)
    await bot.final(status)

    assert await store_of(bot).participants(thread) == {OTHER, "U0TPEARLY1"}
