"""An orphan its worker had only accepted (stored before the ack, not started, nothing
shown) goes back in the queue; every other orphan is ended as before.

A real SQLite store, the fake Slack and the real reconciler.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_core import RunRecord, RunState, ThreadKey
from agent_core.values.clock import utcnow
from bot.workers.reconciler import Reconciler
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agent_core import Checkpoint
    from agent_core.ports import Store
    from bot.slack_api.surface import Workspaces
    from tests.fakes.slack_api import FakeSlack


async def no_resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
    raise AssertionError("nothing here may resume")


def reconciler(
    store: Store,
    workspaces: Workspaces,
    resume: Callable[[RunRecord, Checkpoint | None], Awaitable[None]] = no_resume,
    on_requeued: Callable[[], None] | None = None,
) -> Reconciler:
    return Reconciler(
        store,
        workspaces,
        worker_id="worker-b",
        lease_ttl_s=3.0,
        resume=resume,
        is_local=lambda _: False,
        on_requeued=on_requeued,
    )


async def orphan(store: Store, slack: FakeSlack, name: str, **fields: Any) -> RunRecord:
    """A queued run leased to ``worker-a``, which is gone."""
    thread_ts = slack.seed_message("C1", f"<@{slack.workspace.bot_user_id}> {name}")
    record = RunRecord(
        id=name,
        thread=ThreadKey(slack.workspace.team_id, "C1", thread_ts),
        requester=DEFAULT_USER,
        task=name,
        owner="worker-a",
        lease_expires_at=utcnow() - timedelta(seconds=1),
        **fields,
    )
    await store.create_run(record)
    return record


async def test_a_run_accepted_by_a_worker_that_went_away_waits_in_the_queue(
    store: Store, slack: FakeSlack, workspaces: Workspaces
) -> None:
    await orphan(store, slack, "accepted")

    report = await reconciler(store, workspaces).run_once()

    assert (report.requeued, report.orphans_ended) == (1, 0)
    (waiting,) = await store.queued_runs()
    assert (waiting.id, waiting.state, waiting.owner) == ("accepted", RunState.QUEUED, None)
    assert await store.latest_checkpoint("accepted") is None
    assert slack.calls("chat.update") == [] and slack.calls("chat.postMessage") == []
    claimed = await store.claim_queued("worker-b", 30)
    assert claimed is not None and claimed.id == "accepted"


async def test_a_resume_in_place_whose_worker_went_away_is_ended_and_resumed_not_queued(
    store: Store, slack: FakeSlack, workspaces: Workspaces
) -> None:
    status_ts = slack.seed_message("C1", "Resuming", user=slack.workspace.bot_user_id)
    await orphan(store, slack, "resuming", status_ts=status_ts, auto_resumes=1)
    resumed: list[str] = []

    async def resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
        resumed.append(record.id)

    report = await reconciler(store, workspaces, resume).run_once()

    assert (report.requeued, report.orphans_ended, report.resumed) == (0, 1, 1)
    assert await store.queued_runs() == []
    assert resumed == ["resuming"]  # from its checkpoint, in its own status message
    events = [e.kind for e in await store.events_for("resuming")]
    assert events[0] == "run.takeover" and "run.resumed" in events


async def test_the_queue_is_told_at_once_not_after_the_orphans_slack_messages(
    store: Store, slack: FakeSlack, workspaces: Workspaces
) -> None:
    """The requeued run is for any worker with room now: its taker must not wait while
    this pass tells another orphan's thread, which waits on Slack's rate limit."""
    status_ts = slack.seed_message("C1", "Working", user=slack.workspace.bot_user_id)
    await orphan(store, slack, "running", state=RunState.RUNNING, status_ts=status_ts)
    await orphan(store, slack, "accepted")
    slack.fail_next("chat.update", status=429, retry_after=3)
    told = asyncio.Event()
    resumed: list[str] = []

    async def resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
        resumed.append(record.id)

    passing = reconciler(store, workspaces, resume, on_requeued=told.set)

    reconciling = asyncio.create_task(passing.run_once())
    await asyncio.wait_for(told.wait(), 5)
    assert not reconciling.done()  # the running orphan's message still waits for Slack
    (waiting,) = await store.queued_runs()
    assert waiting.id == "accepted"

    report = await reconciling
    assert (report.requeued, report.orphans_ended) == (1, 1)
    assert resumed == ["running"]  # the lost worker's run resumes, as policy says
    assert [c for c in slack.calls("chat.update") if c.ok]
