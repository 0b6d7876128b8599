"""A run this worker accepted (stored before the ack) starts here only while its lease is
still this worker's.

While the worker is away longer than the lease (the database out of its reach, its loop
stalled), another worker's reconciler puts the accepted run back in the queue, and a
worker with room takes it. The worker that accepted it must then not start it as well:
two status messages and two answers in one thread, and a row two workers write.

The real app on a SQLite file, the fake Slack and llmock. The mention is made inside a
thread, so the app reads the thread before it starts the run; the fake holds that read
(then answers 504, and the app reads again), and meanwhile the test makes the other
worker's moves on the same database, as its reconciler and its queue's taker make them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from structlog.testing import capture_logs

from agent_core import RunRecord, RunState, ThreadKey
from tests.bot.harness import WAIT_S, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from bot.handlers.context import BotContext
    from tests.bot.harness import Bot

OTHER_WORKER = "worker-b"


async def accepted_while_reading(bot: Bot) -> tuple[ThreadKey, RunRecord]:
    """Mention the app in a thread whose reading the fake holds; the accepted row, once
    the app is reading (accepted, acknowledged, not started)."""
    slack = bot.slack
    parent = slack.seed_message(DEFAULT_CHANNEL, "the plan for the launch", user=DEFAULT_USER)
    slack.time_out_next("conversations.replies", hold_s=1.0)
    mention = slack_requests.app_mention(
        f"<@{slack.workspace.bot_user_id}> summarise this thread", thread_ts=parent
    )
    assert await bot.event(mention) == 200
    await slack.wait_for_call("conversations.replies", timeout=WAIT_S)
    thread = ThreadKey(slack.workspace.team_id, DEFAULT_CHANNEL, parent)
    (accepted,) = await context(bot).store.find_runs(thread=thread)
    assert accepted.state is RunState.QUEUED and accepted.owner is not None
    return thread, accepted


def context(bot: Bot) -> BotContext:
    assert bot.app.ctx is not None
    return bot.app.ctx


def logged(name: str) -> tuple[asyncio.Event, Any]:
    """An event set when a log line named ``name`` is written, and its processor."""
    seen = asyncio.Event()

    def processor(_logger: Any, _method: str, event: Any) -> Any:
        if event.get("event") == name:
            seen.set()
        return event

    return seen, processor


async def test_an_accepted_run_another_worker_took_meanwhile_is_not_started_here(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply("Here is the summary.")
    gave_up, processor = logged("run.not_started")
    with capture_logs(processors=[processor]) as logs:
        thread, accepted = await accepted_while_reading(bot)
        store = context(bot).store
        # The other worker: its reconciler found the lease lapsed and queued the run
        # again, and its taker took it.
        assert accepted.owner is not None
        assert await store.requeue_run(accepted.id, accepted.owner)
        taken = await store.claim_queued(OTHER_WORKER, 30.0)
        assert taken is not None and taken.id == accepted.id
        async with asyncio.timeout(WAIT_S):
            await gave_up.wait()
            # The session it had begun (nothing shown yet) ends; the thread is free.
            left = context(bot).supervisor.live_in_thread(thread)
            if left is not None and left.task is not None:
                await asyncio.wait([left.task])

    assert [line["reason"] for line in logs if line["event"] == "run.not_started"] == [
        "its lease lapsed: the queue has it"
    ]
    # Nothing of it here: no status message, no model request, the thread free.
    assert [m for m in bot.slack.thread(thread.channel, thread.thread_ts) if m.is_bot] == []
    assert llm.requests == []
    assert context(bot).supervisor.live_in_thread(thread) is None
    row = await store.get_run(accepted.id)
    assert row is not None and (row.state, row.owner) == (RunState.RUNNING, OTHER_WORKER)


async def test_an_accepted_run_put_back_in_the_queue_meanwhile_runs_once(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply("Here is the summary.")
    thread, accepted = await accepted_while_reading(bot)
    store = context(bot).store
    # Queued again by another worker's reconciler; nobody has taken it yet.
    assert accepted.owner is not None
    assert await store.requeue_run(accepted.id, accepted.owner)

    # This worker has room: its queue takes the run, and it runs once: one status
    # message, one model request.
    status = await bot.status_message(thread.channel, thread.thread_ts)
    final = await bot.settled(status)

    assert is_final(final)
    in_thread = bot.slack.thread(thread.channel, thread.thread_ts)
    assert [m.ts for m in in_thread if m.is_bot and is_final(m)] == [final.ts]
    assert len(llm.requests) == 1
    row = await store.get_run(accepted.id)
    assert row is not None and row.state is RunState.FINISHED
