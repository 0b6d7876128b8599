"""Guidance written to a run that another worker owns (docs/stopping.md, Guidance).

Slack hands each event to any of the app's connections, so a reply in a live run's
thread usually lands in a worker that does not run it. Worker ``b`` commits the reply to
the ``guidance`` table before it acknowledges the event; worker ``a``, the owner, learns
of it through the same wake-up path as a stop request (NOTIFY on PostgreSQL, the poll on
SQLite), marks it ``eyes``, sends it with its next model request and marks it
``white_check_mark``; a Stop that wins leaves it ``heavy_minus_sign`` and listed in the
handoff. An owner killed with guidance still queued loses none of it: the worker that
resumes the run delivers it in its first scan.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from agent_core import GuidanceStatus, RunState
from agent_core.values.prompts import RESUMED_NOTE
from bot import messages
from bot.steering.guidance import DELIVERED, QUEUED, UNDELIVERED
from tests.bot.harness import ACTION_STOP, block_text, run_id_of, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.test_owner_killed import (
    RESUMED_ANSWER,
    finished,
    reconciled_within_bound,
    script_a_run_to_kill,
)
from tests.system.workers import WAIT_S, until, until_async

if TYPE_CHECKING:
    from llmock.journal import Journal, RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import GuidanceRecord
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = pytest.mark.slow

STALL_S = 4.0
"""The owner's first answer stalls this long: the reply is written during it."""
BOT = DEFAULT_WORKSPACE.bot_user_id


def guidance_in(record: RequestRecord) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = (record.body or {}).get("messages", [])
    return [m for m in sent if "while you were working" in str(m.get("content"))]


async def write_reply(cluster: Cluster, worker: WorkerProcess, status: Message, text: str) -> Json:
    """A reply in the run's thread, as a person writes it, delivered to ``worker``."""
    assert status.thread_ts is not None
    envelope = slack_requests.thread_reply(text, thread_ts=status.thread_ts)
    event = envelope["event"]
    cluster.slack.seed_message(
        event["channel"], text, user=event["user"], ts=event["ts"], thread_ts=event["thread_ts"]
    )
    assert await worker.event(envelope) == 200
    return envelope


async def until_only_reaction(cluster: Cluster, envelope: Json, name: str) -> None:
    event = envelope["event"]
    await cluster.slack.wait_until(
        lambda s: s.message(event["channel"], event["ts"]).reactions == {name: (BOT,)},
        timeout=WAIT_S,
    )


def reactions_of(cluster: Cluster, envelope: Json) -> dict[str, tuple[str, ...]]:
    event = envelope["event"]
    return cluster.slack.message(event["channel"], event["ts"]).reactions


async def settled_as(store: Store, run_id: str, status: GuidanceStatus) -> GuidanceRecord:
    """The run's one guidance, once the table says ``status`` (the owner writes it beside
    the reactions, not before them)."""

    async def check() -> GuidanceRecord | None:
        [record] = await store.guidance_for(run_id)
        return record if record.status is status else None

    return await until_async(check, what=f"the guidance to be {status.value}")


async def requests(journal: Journal, count: int) -> list[RequestRecord]:
    return await until(
        lambda: r if len(r := journal.records()) >= count else None,
        what=f"{count} finished model request(s)",
    )


async def test_guidance_sent_to_another_worker_reaches_the_owners_next_request(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(STALL_S))
    llm.reply("It is noon, UTC.")
    _, status = await cluster.mention(a, "what time is it?")
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)  # now stalled

    steer = await write_reply(cluster, b, status, "Please answer in UTC.")
    # b acknowledged only once the reply was durable: it is there, for anyone to read.
    [committed] = await store.guidance_for(run_id)
    assert (committed.author, committed.status) == (DEFAULT_USER, GuidanceStatus.QUEUED)

    await cluster.slack.wait_until(lambda _: QUEUED in reactions_of(cluster, steer), WAIT_S)
    eyes_at = time.monotonic()
    final = await cluster.final(status)

    assert "Finished" in block_text(final)
    first, second = await requests(journal, 2)
    assert eyes_at < first.ended_at  # the owner had it while its first answer streamed...
    assert guidance_in(first) == []  # ...which never saw it; the very next request did
    assert guidance_in(second) == [
        {
            "role": "user",
            "content": f"Guidance from <@{DEFAULT_USER}> while you were working: "
            "Please answer in UTC.",
        }
    ]
    await until_only_reaction(cluster, steer, DELIVERED)
    await settled_as(store, run_id, GuidanceStatus.DELIVERED)
    # b committed it, a (the owner) took it from the table and delivered it.
    assert b.logged("guidance.committed", run_id=run_id, local=False)
    assert a.logged("guidance.taken", run_id=run_id)
    assert not b.logged("guidance.taken")
    kinds = [(e.kind, e.actor) for e in await store.events_for(run_id)]
    assert ("guidance.queued", DEFAULT_USER) in kinds
    assert ("guidance.delivered", DEFAULT_USER) in kinds


async def test_a_stop_on_another_worker_wins_over_guidance_queued_there(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Stopped early: the time was not checked.")
    _, status = await cluster.mention(a, "what time is it?")
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    steer = await write_reply(cluster, b, status, "Also give the date.")
    await cluster.slack.wait_until(lambda _: QUEUED in reactions_of(cluster, steer), WAIT_S)
    assert await b.click(cluster.current(status), ACTION_STOP) == 200
    final = await cluster.final(status)

    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert messages.UNDELIVERED_GUIDANCE in text
    assert f"<@{DEFAULT_USER}>: Also give the date." in text
    assert all(guidance_in(r) == [] for r in await requests(journal, 2))
    await until_only_reaction(cluster, steer, UNDELIVERED)
    await settled_as(store, run_id, GuidanceStatus.UNDELIVERED)
    record = await store.get_run(run_id)
    assert record is not None and record.state is RunState.USERINTERLUDE


async def test_guidance_queued_when_the_owner_dies_reaches_the_resumed_run(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    script_a_run_to_kill(llm, resumed_answer=True)
    _, status = await cluster.mention(a, "what time is it?")
    run_id = run_id_of(status)
    await until(
        lambda: len(journal.records()) == 1 and journal.in_flight == 1,
        what="turn 1 done and turn 2 streaming",
    )
    steer = await write_reply(cluster, b, status, "Answer in UTC, please.")
    await cluster.slack.wait_until(lambda _: QUEUED in reactions_of(cluster, steer), WAIT_S)
    killed_at = time.monotonic()
    assert await a.kill() == -9  # a took the reply into its inbox, and died with it

    await reconciled_within_bound(cluster, status, killed_at)
    final = await cluster.until_message(status, finished)

    assert RESUMED_ANSWER in block_text(final)
    _, killed, resumed = await requests(journal, 3)
    assert guidance_in(killed) == []
    conversation = resumed.body["messages"]
    # The resumed run's first request: the checkpoint, the restart note, then the reply.
    assert conversation[-2:] == [
        {"role": "system", "content": RESUMED_NOTE},
        {
            "role": "user",
            "content": f"Guidance from <@{DEFAULT_USER}> while you were working: "
            "Answer in UTC, please.",
        },
    ]
    await until_only_reaction(cluster, steer, DELIVERED)
    await settled_as(store, run_id, GuidanceStatus.DELIVERED)
    assert b.logged("guidance.taken", run_id=run_id)
