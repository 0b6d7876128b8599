"""One Slack delivery taken once, whichever workers receive it (issue 7, class 5).

Slack re-sends an event it believes was not acknowledged (``X-Slack-Retry-Num``) and may
hand a click over twice; with several workers the repeat usually lands in another
process than the first. Each worker keeps a memory of what it took, but only the
database's delivery log is shared: a repeat must start no second run (nor get a "thread
is busy" reply), and a repeated Stop must not count as a second press (which, once the
run is stopping, escalates to Abort).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from agent_core import StopReason, ThreadKey
from tests.bot.harness import ACTION_STOP, SECRET, block_text, run_id_of, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.workers import until

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = pytest.mark.slow

STALL_S = 6.0
"""The stopped step's model stream stalls this long: the repeats land while it runs."""


def app_posts(slack: FakeSlack, thread_ts: str) -> list[Message]:
    return [m for m in slack.thread(DEFAULT_CHANNEL, thread_ts) if m.is_bot and m.stream is None]


def dropped(workers: list[WorkerProcess], event: str) -> int:
    return sum(len(w.logged(event)) for w in workers)


async def test_an_event_delivered_to_both_workers_starts_one_run(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.reply("The one answer.")
    envelope = slack_requests.app_mention(f"<@{DEFAULT_WORKSPACE.bot_user_id}> answer once")
    event = envelope["event"]
    thread_ts = event["ts"]
    cluster.slack.seed_message(DEFAULT_CHANNEL, event["text"], user=DEFAULT_USER, ts=thread_ts)

    def delivery(retry: int | None) -> slack_requests.SignedRequest:
        return slack_requests.event_request(envelope, SECRET, retry_num=retry)

    # The first delivery and Slack's retry of it, at the same moment, to both workers.
    first, retry = await asyncio.gather(a.post(delivery(None)), b.post(delivery(1)))
    assert (first, retry) == (200, 200)
    status = await cluster.status_message(DEFAULT_CHANNEL, thread_ts)
    final = await cluster.final(status)
    # Later retries, after the run ended (where a repeat would start a fresh run).
    assert await b.post(delivery(2)) == 200
    assert await a.post(delivery(3)) == 200

    def settled() -> bool:
        repeated = len(app_posts(cluster.slack, thread_ts)) > 1
        answered = cluster.slack.ephemerals(DEFAULT_CHANNEL)
        return repeated or bool(answered) or dropped([a, b], "event.duplicate_dropped") >= 3

    await until(settled, what="the three repeats to be dropped (or acted on)")
    assert [m.ts for m in app_posts(cluster.slack, thread_ts)] == [status.ts]
    assert "The one answer." in block_text(final)
    assert cluster.slack.ephemerals(DEFAULT_CHANNEL) == []  # no "thread is busy" either
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
    assert [r.id for r in await store.find_runs(thread=thread)] == [run_id_of(status)]
    assert len(journal.records()) == 1 and journal.in_flight == 0


async def test_a_click_delivered_to_both_workers_is_one_stop(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Stopped early: nothing was checked yet.")
    _, status = await cluster.mention(a, "check the time")  # a owns the run
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream")
    click = slack_requests.click_button(cluster.current(status), ACTION_STOP)

    assert await b.click_payload(click) == 200  # b commits the Stop...
    await a.wait_log("stop.delivered", run_id=run_id, kind="stop")  # ...a, the owner, has it
    # The same click again, to the owner (a new press there would now escalate) and to
    # the worker that took it first.
    assert await a.click_payload(click) == 200
    assert await b.click_payload(click) == 200

    await a.wait_log("click.handled", run_id=run_id)
    await b.wait_log("click.handled", run_id=run_id, count=2)
    final = await cluster.final(status)
    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "Stopped early: nothing was checked yet." in text
    requests = await store.stop_requests_for(run_id)
    assert [(r.kind, r.requested_by) for r in requests] == [(StopReason.STOP, DEFAULT_USER)]
    streamed, _ = journal.records()
    assert streamed.completed  # the step in flight was let finish: never aborted
    assert cluster.slack.ephemerals(DEFAULT_CHANNEL) == []  # a repeat answers nothing
