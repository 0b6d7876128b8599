"""A mention whose taker died before starting its run is not lost to Slack's retries.

The delivery log says a delivery was *taken*; a worker killed between taking a mention and
starting its run would otherwise drop every retry of it as a duplicate. Here "another
worker" is the shared delivery log holding the event's key, as that worker left it.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING

from agent_core import RunRecord, RunState, ThreadKey
from agent_core.values.clock import utcnow
from bot.inbound.dedupe import event_key
from tests.bot.harness import is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.bot.harness import Bot


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


def a_minute_old_mention(text: str) -> dict[str, object]:
    """The mention as Slack's second retry delivers it, about a minute after it was sent."""
    ts = f"{time.time() - 61:.6f}"
    return slack_requests.app_mention(f"<@{DEFAULT_WORKSPACE.bot_user_id}> {text}", ts=ts)


async def test_a_retry_of_a_mention_whose_taker_died_starts_the_run(bot: Bot, llm: LLMock) -> None:
    llm.reply("Answered after all.")
    envelope = a_minute_old_mention("are you there?")
    # Another worker took the first delivery, then was killed before starting the run.
    assert await store_of(bot).first_delivery(
        event_key(DEFAULT_WORKSPACE.team_id, str(envelope["event_id"]))
    )

    assert await bot.event(envelope, retry_num=2) == 200

    thread_ts = str(envelope["event"]["ts"])  # type: ignore[index]
    status = await bot.status_message(DEFAULT_CHANNEL, thread_ts)
    final = await bot.until(status, is_final)
    assert "Answered after all." in str(final.text) + str(final.blocks)


async def test_a_retry_of_a_mention_that_did_start_its_run_is_dropped(
    bot: Bot, llm: LLMock
) -> None:
    envelope = a_minute_old_mention("are you there?")
    event = envelope["event"]
    assert isinstance(event, dict)
    store = store_of(bot)
    assert await store.first_delivery(
        event_key(DEFAULT_WORKSPACE.team_id, str(envelope["event_id"]))
    )
    # The worker that took it did start its run (and lives on elsewhere, holding it).
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, str(event["ts"]))
    await store.create_run(
        RunRecord(
            id="elsewhere",
            thread=thread,
            requester=DEFAULT_USER,
            task="t",
            state=RunState.RUNNING,
            owner="worker-elsewhere",
            lease_expires_at=utcnow() + timedelta(minutes=5),
        )
    )

    assert await bot.event(envelope, retry_num=2) == 200
    # Something the app does for every event it takes, after this one: a second mention.
    llm.reply("The next one.")
    _, next_status = await bot.mention("next question")
    await bot.until(next_status, is_final)

    assert [m for m in bot.slack.thread(DEFAULT_CHANNEL, str(event["ts"])) if m.is_bot] == []
    assert len(llm.requests) == 1
