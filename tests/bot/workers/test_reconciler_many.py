"""Several orphans at once (a worker with many runs was killed): each is ended in the
database without waiting for the others' Slack messages, which Slack's rate limits pace.

A real SQLite store, the fake Slack and the real reconciler.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from agent_core import RunRecord, RunState, ThreadKey
from agent_core.values.clock import utcnow
from bot.workers.reconciler import Reconciler
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    from agent_core import Checkpoint
    from agent_core.ports import Store
    from bot.slack_api.surface import Workspaces
    from tests.fakes.slack_api import FakeSlack

ORPHANS = 5
RETRY_AFTER_S = 30
"""How long Slack keeps ``chat.update`` refused: longer than the test may wait."""


async def no_resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
    raise AssertionError("nothing here may resume")


async def orphans(store: Store, slack: FakeSlack) -> list[str]:
    """``ORPHANS`` runs of a worker that is gone, each in a channel of its own, with a
    status message showing Stop and Abort."""
    past = utcnow() - timedelta(seconds=10)
    ids = []
    for i in range(ORPHANS):
        channel = f"CORPHAN{i}"
        thread_ts = slack.seed_message(channel, f"task {i}")
        status_ts = slack.seed_message(
            channel, "Working: turn 1", user=slack.workspace.bot_user_id, thread_ts=thread_ts
        )
        record = RunRecord(
            id=f"orphan-{i}",
            thread=ThreadKey(slack.workspace.team_id, channel, thread_ts),
            requester=DEFAULT_USER,
            task=f"task {i}",
            state=RunState.RUNNING,
            owner="worker-a",
            lease_expires_at=past,
            status_ts=status_ts,
        )
        await store.create_run(record)
        ids.append(record.id)
    return ids


async def test_every_orphan_is_ended_before_any_of_their_messages_gets_through(
    store: Store, slack: FakeSlack, workspaces: Workspaces
) -> None:
    ids = await orphans(store, slack)
    # Slack refuses message updates for a while: the messages must wait, the endings not.
    slack.fail_next("chat.update", status=429, retry_after=RETRY_AFTER_S)
    reconciler = Reconciler(
        store,
        workspaces,
        worker_id="worker-b",
        lease_ttl_s=3.0,
        resume=no_resume,
        is_local=lambda _: False,
    )
    passing = asyncio.create_task(reconciler.run_once())
    try:
        # The first message Slack sees (and refuses): by then every orphan has ended.
        await slack.wait_for_call("chat.update")
        runs = [await store.get_run(run_id) for run_id in ids]
        assert [r.state.is_terminal for r in runs if r is not None] == [True] * ORPHANS
        assert not passing.done(), "its messages are still waiting for Slack"
    finally:
        passing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await passing
