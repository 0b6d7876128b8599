"""A mention acknowledged, then its worker killed or stopped before the run started: the
run still happens, once, on another worker (docs/operations.md: no mention lost to
``kill -9``). The acknowledgement tells Slack (and so the person) "accepted"; the run's
row is written before it, and a row whose worker went away before starting it goes back
in the queue for any worker to take.

Here worker ``a`` is held on the thread's history (``conversations.replies``, answered
only after ``HOLD_S``) when it is killed or asked to stop, so the kill always lands after
the ack and before the run's status message.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import pytest

from agent_core import RunState, ThreadKey
from tests.bot.harness import is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.system.workers import WAIT_S, until_async

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = pytest.mark.slow

HOLD_S = 60.0
EARLIER = "the deploy failed at step 3"


async def _mention_in_thread(cluster: Cluster, worker: WorkerProcess, text: str) -> str:
    """A thread with a person's message, then a mention of the app in it; its ts."""
    slack = cluster.slack
    thread_ts = slack.seed_message(DEFAULT_CHANNEL, EARLIER, user=DEFAULT_USER)
    envelope = slack_requests.app_mention(
        f"<@{slack.workspace.bot_user_id}> {text}", thread_ts=thread_ts
    )
    event = envelope["event"]
    slack.seed_message(
        DEFAULT_CHANNEL, event["text"], user=event["user"], ts=event["ts"], thread_ts=thread_ts
    )
    slack.time_out_next("conversations.replies", hold_s=HOLD_S)
    assert await worker.event(envelope) == 200
    await slack.wait_for_call("conversations.replies", timeout=WAIT_S)
    return thread_ts


async def _ran_once(
    cluster: Cluster, store: Store, journal: Journal, thread_ts: str, *, by: str
) -> Message:
    """The thread's one status message, once final; checks the run and what the model saw."""

    def statuses() -> list[Message]:
        thread = cluster.slack.thread(DEFAULT_CHANNEL, thread_ts)
        return [m for m in thread if m.is_bot and m.stream is None]

    async def final() -> Message | None:
        found = statuses()
        return found[0] if found and is_final(found[0]) else None

    status = await until_async(final, what="the mention's run to end in its thread")
    assert len(statuses()) == 1, "one status message, never a second"
    where = ThreadKey(cluster.slack.workspace.team_id, DEFAULT_CHANNEL, thread_ts)
    (run,) = await store.find_runs(thread=where, limit=10)
    assert (run.state, run.owner) == (RunState.FINISHED, by)
    (request,) = journal.records()
    said = [m.get("content") for m in request.body["messages"]]
    assert said.count(f"<@{DEFAULT_USER}>: {EARLIER}") == 1  # the thread's history
    assert said[-1] == "what went wrong?"  # the task, once, last
    assert said.count("what went wrong?") == 1
    return status


async def test_a_mention_whose_worker_is_killed_after_the_ack_runs_on_another(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.reply("Step 3 ran out of disk.")
    thread_ts = await _mention_in_thread(cluster, a, "what went wrong?")

    assert await a.kill() == -9

    await _ran_once(cluster, store, journal, thread_ts, by="b")
    thread = cluster.slack.thread(DEFAULT_CHANNEL, thread_ts)
    assert any("Step 3 ran out of disk." in m.text for m in thread if m.stream is not None)
    assert b.logged("run.requeued")
    assert b.logged("run.dequeued")


async def test_a_mention_whose_worker_shuts_down_before_starting_it_runs_on_another(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.reply("Step 3 ran out of disk.")
    thread_ts = await _mention_in_thread(cluster, a, "what went wrong?")

    assert a.process is not None
    a.process.send_signal(signal.SIGTERM)
    assert await a.stop() == 0

    await _ran_once(cluster, store, journal, thread_ts, by="b")
    assert a.logged("run.released")
    assert b.logged("run.dequeued")
