"""One live run per thread, across workers (issue 28, item 4).

Two mentions sent at once in a finished thread, one to each of two real workers, used to
start two runs (two status messages, two model streams) in most trials: each worker
looked for a live run in the thread, found none, and inserted its own. The database now
decides, in the admission's transaction: one run starts, and the other mention is told
the thread is busy. SQLite and PostgreSQL (the ``database_url`` fixture).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

import pytest

from agent_core import ThreadKey
from bot import messages
from tests.bot.harness import is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

TRIALS = 4


def statuses(slack: FakeSlack, thread_ts: str) -> list[Message]:
    """The app's status messages in the thread (a stream is not one)."""
    return [
        m
        for m in slack.thread(DEFAULT_CHANNEL, thread_ts)
        if m.is_bot and m.stream is None and m.ts != thread_ts
    ]


def told_busy(slack: FakeSlack, thread_ts: str) -> int:
    return sum(
        e.thread_ts == thread_ts and e.text == messages.THREAD_BUSY
        for e in slack.ephemerals(DEFAULT_CHANNEL)
    )


async def answered(
    slack: FakeSlack, store: Store, thread_ts: str, first_ts: str
) -> tuple[list[str], int, int] | None:
    """Once both mentions are answered (a run that finished, "busy", or guidance for the
    live run): the new runs' status messages, how many were told busy, and how many
    became guidance."""
    new = [m.ts for m in statuses(slack, thread_ts) if m.ts != first_ts]
    if not all(is_final(slack.message(DEFAULT_CHANNEL, ts)) for ts in new):
        return None
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
    runs = await store.find_runs(thread=thread)
    guided = sum([len(await store.guidance_for(r.id)) for r in runs])
    busy = told_busy(slack, thread_ts)
    return (new, busy, guided) if len(new) + busy + guided >= 2 else None


async def test_two_mentions_at_once_in_a_finished_thread_start_one_run(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    slack = cluster.slack
    bot_user = DEFAULT_WORKSPACE.bot_user_id
    for trial in range(TRIALS):
        llm.reply(f"First answer {trial}.")
        thread_ts, first = await cluster.mention(a, f"first question {trial}")
        await cluster.final(first)
        streams = len(journal.records())

        llm.reply(f"Second answer {trial}.")
        llm.reply(f"A second run's answer {trial}.")  # only if a second run starts
        mentions = [
            slack_requests.app_mention(f"<@{bot_user}> again {trial}", thread_ts=thread_ts)
            for _ in (a, b)
        ]
        for envelope in mentions:
            event = envelope["event"]
            slack.seed_message(
                DEFAULT_CHANNEL,
                event["text"],
                user=DEFAULT_USER,
                ts=event["ts"],
                thread_ts=thread_ts,
            )
        acks = await asyncio.gather(*(w.event(e) for w, e in zip((a, b), mentions, strict=True)))
        assert acks == [200, 200]

        new, busy, guided = await until_async(
            partial(answered, slack, store, thread_ts, first.ts),
            what=f"trial {trial}: both mentions answered",
        )
        assert len(new) == 1, f"trial {trial}: {len(new)} runs started"  # one status message
        assert busy + guided == 1, (busy, guided)  # the other: told busy, or guidance
        thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
        assert len(await store.find_runs(thread=thread)) == 2  # the finished one, and one
        if busy:  # one model stream (guidance may take the run one more turn)
            assert len(journal.records()) == streams + 1
        assert journal.in_flight == 0
