"""RetentionStore contract: ended runs, and what hangs off them, go after RETENTION_DAYS,
in bounded batches; what a live run or a scheduled resume still needs stays; one
person's runs can be forgotten on request (docs/operations.md, Retention and backups).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_core.stores._codec import sqlite_time
from agent_core.stores.sqlite import SqliteStore
from agent_core.values.clock import utcnow
from agent_core.values.records import (
    AuditEvent,
    Checkpoint,
    GuidanceRecord,
    GuidanceStatus,
    ResumeState,
    RunRecord,
    ThreadKey,
)
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from pathlib import Path

    from agent_core.ports import Store
    from tests.stores.conftest import Backend

NOW = utcnow()
OLD = NOW - timedelta(days=40)
CUTOFF = NOW - timedelta(days=30)


def thread_of(run_id: str) -> ThreadKey:
    return ThreadKey("T1", "C1", f"1700000000.{abs(hash(run_id)) % 1_000_000:06d}")


def a_run(run_id: str, state: RunState, **fields: Any) -> RunRecord:
    run = RunRecord(
        id=run_id,
        thread=thread_of(run_id),
        requester=fields.pop("requester", "U1"),
        task=f"the task of {run_id}",
        state=state,
        created_at=OLD,
        updated_at=OLD,
    )
    return dataclasses.replace(run, **fields)


async def with_everything(store: Store, run: RunRecord) -> None:
    """The run, and a row in every table that hangs off it."""
    await store.create_run(run)
    await store.save_checkpoint(Checkpoint(run.id, 3, ({"role": "user", "content": "x"},)))
    request = await store.add_stop_request(run.id, run.thread, StopReason.STOP, "U2")
    await store.mark_stop_handled(request.id)
    await store.record_event(AuditEvent(run.id, "stop.requested", "U2"))
    guidance = GuidanceRecord(f"g-{run.id}", run.id, run.thread, "U3", "please also do y")
    await store.add_guidance(guidance)
    await store.mark_guidance([guidance.id], GuidanceStatus.DELIVERED)


async def traces(store: Store, run_id: str) -> dict[str, bool]:
    """Which of the run's rows are still there."""
    return {
        "run": await store.get_run(run_id) is not None,
        "checkpoint": await store.latest_checkpoint(run_id) is not None,
        "stop requests": bool(await store.stop_requests_for(run_id)),
        "events": bool(await store.events_for(run_id)),
        "guidance": bool(await store.guidance_for(run_id)),
    }


GONE = dict.fromkeys(["run", "checkpoint", "stop requests", "events", "guidance"], False)
KEPT = dict.fromkeys(GONE, True)


async def test_ended_runs_go_with_what_hangs_off_them_and_needed_ones_stay(
    backend: Backend,
) -> None:
    store = await backend.open()
    declined = {"resume": ResumeState.DECLINED}
    runs = [
        # Old and done: these go.
        a_run("finished", RunState.FINISHED, **declined),
        a_run("failed", RunState.FAILED, **declined),
        a_run("blocked-declined", RunState.BLOCKED, **declined),
        a_run("old-child", RunState.FINISHED, parent_id="finished", **declined),
        # Still needed: these stay.
        a_run("recent", RunState.FINISHED, updated_at=NOW, **declined),
        a_run("live", RunState.RUNNING),
        a_run("queued", RunState.QUEUED),
        a_run("scheduled", RunState.BLOCKED, resume=ResumeState.SCHEDULED, resume_at=NOW),
        a_run("claimed", RunState.BLOCKED, resume=ResumeState.CLAIMED),
        a_run("blocked-undecided", RunState.BLOCKED),
        a_run("child-of-live", RunState.FINISHED, parent_id="live", **declined),
        a_run("parent-of-live", RunState.FINISHED, **declined),
        a_run("live-child", RunState.RUNNING, parent_id="parent-of-live"),
        a_run("continued", RunState.BLOCKED, resume=ResumeState.STARTED),
        a_run("continuation", RunState.RUNNING, continued_from="continued"),
    ]
    for run in runs:
        await with_everything(store, run)

    deleted = await store.purge(older_than=CUTOFF)

    other = await backend.open()
    for run_id in ("finished", "failed", "blocked-declined", "old-child"):
        assert await traces(other, run_id) == GONE, run_id
    for run in runs[4:]:
        assert (await traces(other, run.id))["run"], run.id
        assert await other.latest_checkpoint(run.id) is not None, run.id
    assert deleted >= 4 * len(GONE)  # each gone run's five rows, at least
    assert await other.purge(older_than=CUTOFF) == 0


async def test_purge_goes_in_bounded_batches(backend: Backend) -> None:
    store = await backend.open()
    for i in range(23):
        await with_everything(store, a_run(f"r{i:02d}", RunState.FINISHED))
    await store.create_run(a_run("live", RunState.RUNNING))

    assert await store.purge(older_than=CUTOFF, batch_size=5) == 23 * len(GONE)
    assert [r.id for r in await store.find_runs()] == ["live"]


async def test_forgetting_a_person_deletes_their_ended_runs_and_keeps_live_ones(
    backend: Backend,
) -> None:
    store = await backend.open()
    theirs = [
        a_run("theirs-old", RunState.FINISHED, requester="U9"),
        a_run("theirs-recent", RunState.FAILED, requester="U9", updated_at=NOW),
        a_run("theirs-child", RunState.FINISHED, requester="U9", parent_id="theirs-old"),
    ]
    for run in [*theirs, a_run("someone-elses", RunState.FINISHED, requester="U1")]:
        await with_everything(store, run)
    await store.create_run(a_run("theirs-live", RunState.RUNNING, requester="U9"))
    await store.add_participant(thread_of("someone-elses"), "U9")
    await store.add_participant(thread_of("someone-elses"), "U1")
    their_reply = GuidanceRecord(
        "g-their-reply", "someone-elses", thread_of("someone-elses"), "U9", "my secret plan"
    )
    await store.add_guidance(their_reply)
    await store.mark_guidance([their_reply.id], GuidanceStatus.DELIVERED)

    forgotten = await store.forget_requester("U9", batch_size=2)

    assert (forgotten.runs, forgotten.kept) == (3, 1)
    other = await backend.open()
    for run in theirs:
        assert await traces(other, run.id) == GONE, run.id
    assert await other.get_run("theirs-live") is not None  # stop it first, then forget
    assert await traces(other, "someone-elses") == KEPT
    assert await other.participants(thread_of("someone-elses")) == {"U1"}
    assert [g.id for g in await other.guidance_for("someone-elses")] == ["g-someone-elses"]
    again = await other.forget_requester("U9")
    assert (again.runs, again.kept) == (0, 1)


async def test_forgetting_a_person_in_one_workspace_keeps_what_they_did_in_another(
    backend: Backend,
) -> None:
    store = await backend.open()

    def in_team(run: RunRecord, team: str) -> RunRecord:
        return dataclasses.replace(run, thread=dataclasses.replace(run.thread, team=team))

    here = in_team(a_run("here", RunState.FINISHED, requester="U9"), "TA")
    there = in_team(a_run("there", RunState.FINISHED, requester="U9"), "TB")
    for run in (here, there):
        await with_everything(store, run)
        await store.add_participant(run.thread, "U9")

    forgotten = await store.forget_requester("U9", team="TA", batch_size=1)

    assert (forgotten.runs, forgotten.kept) == (1, 0)
    other = await backend.open()
    assert await traces(other, "here") == GONE
    assert await traces(other, "there") == KEPT
    assert await other.participants(here.thread) == set()
    assert await other.participants(there.thread) == {"U9"}
    everywhere = await other.forget_requester("U9")
    assert (everywhere.runs, everywhere.kept) == (1, 0)


async def test_forgetting_a_workspace_deletes_its_rows_and_no_other_workspaces(
    backend: Backend,
) -> None:
    store = await backend.open()

    def in_team(run: RunRecord, team: str) -> RunRecord:
        thread = dataclasses.replace(run.thread, team=team)
        return dataclasses.replace(run, thread=thread)

    gone = [
        in_team(a_run("a-old", RunState.FINISHED), "TA"),
        in_team(a_run("a-recent", RunState.FAILED, updated_at=NOW), "TA"),
    ]
    for run in [*gone, a_run("b-run", RunState.FINISHED)]:
        await with_everything(store, run)
    live = in_team(a_run("a-live", RunState.RUNNING), "TA")
    await store.create_run(live)
    pending = await store.add_stop_request(live.id, live.thread, StopReason.ABORT, "slack")
    await store.add_participant(live.thread, "U5")
    await store.add_participant(thread_of("b-run"), "U5")

    forgotten = await store.forget_team("TA", batch_size=1)

    assert (forgotten.runs, forgotten.kept) == (2, 1)
    assert forgotten.rows == 2 * 5 + 1  # each run and its 4 rows, and a participant
    other = await backend.open()
    for run in gone:
        assert await traces(other, run.id) == GONE, run.id
    assert await traces(other, "b-run") == KEPT  # another workspace's
    assert await other.participants(thread_of("b-run")) == {"U5"}
    assert await other.participants(live.thread) == set()
    # What its live run still needs stays: it is ending (its Abort pending).
    assert [r.id for r in await other.pending_stop_requests([live.id])] == [pending.id]
    again = await other.forget_team("TA")
    assert (again.runs, again.kept) == (0, 1)


async def test_a_click_is_answered_while_sqlite_purges_a_long_history(tmp_path: Path) -> None:
    """The purge never holds SQLite's one writer for long: a stop request made while it
    works commits between its batches, long before the purge is done."""
    path = str(tmp_path / "threadpilot.db")
    store = await SqliteStore.open(path)
    try:
        await asyncio.to_thread(_old_history, path, 20_000)
        await store.create_run(a_run("live", RunState.RUNNING, updated_at=NOW))
        purge = asyncio.create_task(store.purge(older_than=CUTOFF, batch_size=200))
        try:
            # The purge is under way: its first batch (oldest first) is committed ...
            while await store.get_run("old-000001") is not None:
                assert not purge.done(), "the purge is done and left the oldest run"
            # ... and a click's commit gets in before it is done.
            request = await store.add_stop_request("live", thread_of("live"), StopReason.STOP, "U1")
            assert not purge.done()
        finally:
            deleted = await purge
        assert deleted == 20_000
        assert await store.pending_stop_requests(["live"]) == [request]
    finally:
        await store.close()


def _old_history(path: str, count: int) -> None:
    """``count`` ended runs from long ago, written in one statement (test set-up)."""
    old = sqlite_time(OLD)
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                "INSERT INTO runs (id, team, channel, thread_ts, requester, task, state, "
                "resume, created_at, updated_at) "
                "SELECT printf('old-%06d', i), 'T1', 'C1', printf('1600000000.%06d', i), 'U1', "
                "'an old task', 'finished', 'declined', ?, ? FROM n",
                (count, old, old),
            )
    finally:
        conn.close()
