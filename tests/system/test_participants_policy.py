"""``STOP_POLICY=participants`` decided alike by every worker (docs/stopping.md).

Who wrote in a run's thread may stop it. The worker that sees their message is rarely
the one their click lands on (Slack picks a connection at random), so who wrote where
is kept in the database, and a worker that never saw the thread decides from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agent_core import StopReason, ThreadKey
from bot import messages
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, block_text, run_id_of, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.workers import WAIT_S, until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

PARTICIPANT = "U0TPPART001"
"""Wrote in the run's thread; did not start the run."""
STRANGER = "U0TPSTRANGE"
"""In the channel, never wrote in the thread."""
STALL_S = 6.0


async def test_a_participant_may_stop_from_a_worker_that_never_saw_them_write(
    cluster: Cluster, store: Store, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b", STOP_POLICY="participants")
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Stopped early: nothing was checked yet.")
    thread_ts, status = await cluster.mention(a, "check the time")  # a owns the run
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    # The participant writes in the thread; worker a receives the message.
    reply = slack_requests.thread_reply(
        "I'll take it from here", thread_ts=thread_ts, user=PARTICIPANT
    )
    event = reply["event"]
    cluster.slack.seed_message(
        DEFAULT_CHANNEL, event["text"], user=PARTICIPANT, ts=event["ts"], thread_ts=thread_ts
    )
    assert await a.event(reply) == 200
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)

    async def recorded() -> bool:
        return PARTICIPANT in await store.participants(thread)

    await until_async(recorded, what="the participant to be recorded")

    # Both press on worker b, which never saw the thread: the stranger is refused...
    assert await b.click(cluster.current(status), ACTION_ABORT, user=STRANGER) == 200
    await b.wait_log("click.handled", run_id=run_id, verdict="not_allowed")
    # ...the participant is not.
    assert await b.click(cluster.current(status), ACTION_STOP, user=PARTICIPANT) == 200
    final = await cluster.final(status)

    assert f"User interlude: stopped by <@{PARTICIPANT}>" in block_text(final)
    assert "Stopped early: nothing was checked yet." in block_text(final)
    requests = await store.stop_requests_for(run_id)
    assert [(r.kind, r.requested_by) for r in requests] == [(StopReason.STOP, PARTICIPANT)]
    assert b.logged("click.handled", run_id=run_id, local=False, verdict="stop")
    refused = [e.text for e in cluster.slack.ephemerals(DEFAULT_CHANNEL) if e.user == STRANGER]
    assert refused == [messages.not_allowed("participants", DEFAULT_USER)]
    assert [e for e in cluster.slack.ephemerals(DEFAULT_CHANNEL) if e.user == PARTICIPANT] == []
