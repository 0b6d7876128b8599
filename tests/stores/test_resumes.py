"""ResumeStore contract: each ended run's resume decision, the schedule any worker starts.

Auto-resume (docs/stopping.md): a decision is made once; a scheduled resume is started by
exactly one worker, on time, or cancelled by a person, never both; a claim that ran out
(its worker died) is taken by another; ``ended_because`` always agrees with the stored
result. Also the r0007 upgrade of a database an older version wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import aiosqlite
import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.migrations import upgrade_postgres, upgrade_sqlite
from agent_core.stores.postgres import PostgresStore
from agent_core.stores.sqlite import SqliteStore
from agent_core.values.clock import utcnow
from agent_core.values.ended import EndedBecause
from agent_core.values.records import ResumeState, RunRecord, ThreadKey
from agent_core.values.states import RunState
from agent_core.values.stop import StopReason
from tests.stores.conftest import admin_execute, database_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
OTHER_THREAD = ThreadKey("T1", "C1", "1700000000.000200")
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
UNDECIDED: list[ResumeState | None] = [None]
AHEAD = [ResumeState.SCHEDULED, ResumeState.CLAIMED]


def rate_limited_result(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "outcome": "blocked", "ended_because": "rate_limit", "turns": 1}


async def blocked_run(store: Store, run_id: str = "run-1", **fields: Any) -> RunRecord:
    """A run that ended blocked by a rate limit, not decided yet."""
    record = RunRecord(run_id, THREAD, "U1", "task", owner="w1", **fields)
    await store.create_run(record)
    assert await store.set_state(
        run_id,
        RunState.BLOCKED,
        expected=[RunState.QUEUED],
        result=rate_limited_result(run_id),
        owner=None,
        lease_expires_at=None,
    )
    stored = await store.get_run(run_id)
    assert stored is not None
    return stored


async def schedule(store: Store, run_id: str, at: datetime) -> bool:
    return await store.set_resume(
        run_id, ResumeState.SCHEDULED, expected=UNDECIDED, resume_at=at, resume_reason="why"
    )


async def claim_in_place(store: Store, run_id: str, worker: str, now: datetime) -> bool:
    return await store.set_resume(
        run_id,
        None,
        expected=[ResumeState.SCHEDULED],
        due_by=now,
        state=RunState.QUEUED,
        owner=worker,
        lease_expires_at=now + timedelta(seconds=30),
        resume_at=None,
        result=None,
        auto_resumes=1,
    )


async def test_ended_because_is_written_with_the_result_and_cleared_without(
    store: Store,
) -> None:
    record = await blocked_run(store)
    assert record.ended_because is EndedBecause.RATE_LIMIT
    assert record.resume is None

    assert await store.update_run("run-1", result={"ended_because": "context_exhausted"})
    assert (await _get(store, "run-1")).ended_because is EndedBecause.CONTEXT_EXHAUSTED
    assert await store.update_run("run-1", result=None)
    assert (await _get(store, "run-1")).ended_because is None


async def test_new_fields_round_trip(store: Store) -> None:
    record = RunRecord(
        "run-2",
        THREAD,
        "U1",
        "task",
        continued_from="run-1",
        auto_resumes=2,
        created_at=T0,
        updated_at=T0,
    )
    await store.create_run(record)
    assert await store.get_run("run-2") == record


async def test_a_run_is_decided_once_and_only_once_it_has_ended(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    await first.create_run(RunRecord("live", THREAD, "U1", "task"))
    assert not await schedule(first, "live", T0)  # still live: nothing to decide

    await blocked_run(first)
    won = await asyncio.gather(
        schedule(first, "run-1", T0),
        second.set_resume("run-1", ResumeState.DECLINED, expected=UNDECIDED),
    )
    assert sorted(won) == [False, True]
    stored = await _get(second, "run-1")
    if stored.resume is ResumeState.SCHEDULED:
        assert (stored.resume_at, stored.resume_reason) == (T0, "why")
    else:
        assert stored.resume is ResumeState.DECLINED and stored.resume_at is None


async def test_a_scheduled_resume_is_started_by_exactly_one_worker_once_due(
    backend: Backend,
) -> None:
    workers = [await backend.open() for _ in range(3)]
    await blocked_run(workers[0])
    due = utcnow() + timedelta(seconds=60)
    assert await schedule(workers[0], "run-1", due)

    assert not await claim_in_place(workers[1], "run-1", "w2", due - timedelta(seconds=1))
    won = await asyncio.gather(
        *(claim_in_place(w, "run-1", f"w{i}", due) for i, w in enumerate(workers))
    )
    assert won.count(True) == 1
    winner = f"w{won.index(True)}"
    stored = await _get(workers[0], "run-1")
    assert (stored.state, stored.owner, stored.resume, stored.resume_at) == (
        RunState.QUEUED,
        winner,
        None,
        None,
    )
    assert (stored.result, stored.ended_because, stored.auto_resumes) == (None, None, 1)
    # Live again: no decision can be made or changed until it ends once more.
    assert not await schedule(workers[1], "run-1", due)
    assert not await workers[1].set_resume("run-1", ResumeState.CANCELLED, expected=AHEAD)


async def test_cancel_and_start_race_and_one_wins(backend: Backend) -> None:
    for attempt in range(5):
        clicker, starter = await backend.open(), await backend.open()
        run_id = f"run-{attempt}"
        await blocked_run(clicker, run_id)
        now = utcnow()
        assert await schedule(clicker, run_id, now)
        cancelled, started = await asyncio.gather(
            clicker.set_resume(
                run_id, ResumeState.CANCELLED, expected=AHEAD, resume_by="U1", resume_at=None
            ),
            claim_in_place(starter, run_id, "w2", now),
        )
        assert cancelled != started
        stored = await _get(clicker, run_id)
        if cancelled:
            assert (stored.state, stored.resume, stored.resume_by) == (
                RunState.BLOCKED,
                ResumeState.CANCELLED,
                "U1",
            )
        else:
            assert (stored.state, stored.owner) == (RunState.QUEUED, "w2")


async def test_a_claim_that_ran_out_is_taken_by_another_worker(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    await blocked_run(first)
    now = utcnow()
    assert await schedule(first, "run-1", now)
    claim: dict[str, Any] = {"owner": "w1", "lease_expires_at": now + timedelta(seconds=30)}
    assert await first.set_resume(
        "run-1", ResumeState.CLAIMED, expected=[ResumeState.SCHEDULED], due_by=now, **claim
    )
    # Held: nobody else takes it, and only its holder finishes it.
    assert not await second.set_resume(
        "run-1", ResumeState.CLAIMED, expected=AHEAD, due_by=now, owner="w2"
    )
    assert not await second.set_resume(
        "run-1", ResumeState.STARTED, expected=[ResumeState.CLAIMED], claimed_by="w2"
    )
    # w1 died: once its claim ran out, w2 takes it over and finishes it.
    later = now + timedelta(seconds=31)
    assert await second.set_resume(
        "run-1",
        ResumeState.CLAIMED,
        expected=AHEAD,
        due_by=later,
        owner="w2",
        lease_expires_at=later + timedelta(seconds=30),
    )
    assert not await first.set_resume(
        "run-1", ResumeState.STARTED, expected=[ResumeState.CLAIMED], claimed_by="w1"
    )
    assert await second.set_resume(
        "run-1",
        ResumeState.STARTED,
        expected=[ResumeState.CLAIMED],
        claimed_by="w2",
        owner=None,
        lease_expires_at=None,
    )
    stored = await _get(first, "run-1")
    assert (stored.state, stored.resume, stored.owner) == (
        RunState.BLOCKED,
        ResumeState.STARTED,
        None,
    )


def continuation_of(run_id: str, continuation_id: str = "run-2") -> RunRecord:
    return RunRecord(
        continuation_id,
        THREAD,
        "U1",
        "task",
        continued_from=run_id,
        owner="w2",
        lease_expires_at=T0 + timedelta(hours=1),
    )


async def test_a_continuation_starts_with_its_row_in_one_transaction(backend: Backend) -> None:
    store = await backend.open()
    await blocked_run(store)
    assert await schedule(store, "run-1", T0)

    started = await store.start_continuation(
        "run-1", continuation_of("run-1"), expected=[ResumeState.SCHEDULED], due_by=T0
    )

    assert started
    other = await backend.open()
    ended = await other.get_run("run-1")
    assert ended is not None and ended.resume is ResumeState.STARTED
    continuation = await other.get_run("run-2")
    assert continuation is not None
    assert (continuation.continued_from, continuation.owner) == ("run-1", "w2")
    assert continuation.state is RunState.QUEUED
    # Exactly once: a second start (another worker, a second press) writes nothing.
    again = continuation_of("run-1", "run-3")
    assert not await store.start_continuation("run-1", again, expected=[ResumeState.SCHEDULED])
    assert await other.get_run("run-3") is None


async def test_a_continuation_whose_row_fails_leaves_its_resume_as_it_was(
    backend: Backend,
) -> None:
    store = await backend.open()
    await blocked_run(store)
    assert await schedule(store, "run-1", T0)
    await store.create_run(RunRecord("run-2", OTHER_THREAD, "U2", "someone else's"))

    # The second statement fails (the id is taken): the first is rolled back with it.
    with pytest.raises(ValueError, match="already exists"):
        await store.start_continuation(
            "run-1", continuation_of("run-1"), expected=[ResumeState.SCHEDULED], due_by=T0
        )

    other = await backend.open()
    ended = await other.get_run("run-1")
    assert ended is not None and ended.resume is ResumeState.SCHEDULED
    taken = await other.get_run("run-2")
    assert taken is not None and taken.continued_from is None
    assert [r.id for r in await other.pending_resumes()] == ["run-1"]  # still due


async def test_pending_resumes_lists_what_is_ahead_soonest_first(store: Store) -> None:
    now = utcnow()
    await blocked_run(store, "later")
    assert await schedule(store, "later", now + timedelta(minutes=5))
    await blocked_run(store, "sooner")
    assert await schedule(store, "sooner", now + timedelta(minutes=1))
    await blocked_run(store, "undecided")
    await blocked_run(store, "declined")
    assert await store.set_resume("declined", ResumeState.DECLINED, expected=UNDECIDED)
    await blocked_run(store, "cancelled")
    assert await schedule(store, "cancelled", now)
    assert await store.set_resume("cancelled", ResumeState.CANCELLED, expected=AHEAD)
    await store.create_run(RunRecord("live", THREAD, "U1", "task"))
    await store.create_run(RunRecord("finished", THREAD, "U1", "task"))
    assert await store.set_state("finished", RunState.FINISHED, expected=[RunState.QUEUED])

    pending = [r.id for r in await store.pending_resumes()]
    assert pending == ["undecided", "sooner", "later"]
    assert [r.id for r in await store.pending_resumes(limit=1)] == ["undecided"]


async def test_last_user_stop_is_a_persons_newest_in_the_thread(store: Store) -> None:
    assert await store.last_user_stop(THREAD) is None
    await store.add_stop_request("run-1", THREAD, StopReason.SHUTDOWN, "system:shutdown")
    await store.add_stop_request("run-9", OTHER_THREAD, StopReason.STOP, "U9")
    assert await store.last_user_stop(THREAD) is None

    first = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    assert await store.last_user_stop(THREAD) == first.requested_at
    await store.mark_stop_handled(first.id)  # handled still counts
    second = await store.add_stop_request("run-2", THREAD, StopReason.ABORT, "U2")
    assert await store.last_user_stop(THREAD) == second.requested_at


async def test_bad_changes_are_refused_before_the_store_is_touched(store: Store) -> None:
    await blocked_run(store)
    for bad in ({"id": "x"}, {"updated_at": T0}, {"no_such_field": 1}):
        with pytest.raises(TypeError):
            await store.set_resume("run-1", ResumeState.DECLINED, expected=UNDECIDED, **bad)
    assert not await store.set_resume("run-1", ResumeState.DECLINED, expected=[])
    assert (await _get(store, "run-1")).resume is None


async def _get(store: Store, run_id: str) -> RunRecord:
    record = await store.get_run(run_id)
    assert record is not None
    return record


# -- the r0007 upgrade ------------------------------------------------------------------

# Rows as r0006 code wrote them: a finished run, a run blocked by a shutdown (resumed on
# restart by that version), and a run blocked by a rate limit (never resumed by it).
_COLUMNS = ("id", "team", "channel", "thread_ts", "requester", "task", "state", "exit_code")
_ROWS = [
    ("done", "finished", "EXIT-FINAL-ANSWER", '{"ended_because":"completed"}'),
    ("restart", "blocked", "EXIT-SHUTDOWN", '{"ended_because":"shutdown"}'),
    ("limited", "blocked", "EXIT-MAX-RETRIES", '{"ended_because":"rate_limit"}'),
    ("old", "failed", "EXIT-ERROR", '{"turns":1}'),
    ("live", "running", None, None),
]


def _r0006_rows() -> list[tuple[Any, ...]]:
    return [
        (run_id, "T1", "C1", "1.0", "U1", "task", state, code, result, T0, T0)
        for run_id, state, code, result in _ROWS
    ]


_INSERT_COLUMNS = (*_COLUMNS, "result", "created_at", "updated_at")


async def _check_r0007(store: Store) -> None:
    expected = {
        "done": (ResumeState.DECLINED, EndedBecause.COMPLETED),
        "restart": (None, EndedBecause.SHUTDOWN),
        "limited": (ResumeState.DECLINED, EndedBecause.RATE_LIMIT),
        "old": (ResumeState.DECLINED, None),
        "live": (None, None),
    }
    for run_id, (resume, ended) in expected.items():
        record = await _get(store, run_id)
        assert (record.resume, record.ended_because, record.auto_resumes) == (resume, ended, 0)
    # Only the shutdown-blocked run is left for the policy to decide.
    assert [r.id for r in await store.pending_resumes()] == ["restart"]


async def test_sqlite_upgrade_to_r0007_decides_old_runs(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")

    async def connect() -> aiosqlite.Connection:
        return await aiosqlite.connect(path, isolation_level=None)

    await upgrade_sqlite(connect, where=path, to="r0006")
    async with aiosqlite.connect(path) as conn:
        marks = ", ".join("?" * len(_INSERT_COLUMNS))
        sql = f"INSERT INTO runs ({', '.join(_INSERT_COLUMNS)}) VALUES ({marks})"
        when = T0.isoformat(timespec="microseconds")
        for row in _r0006_rows():
            await conn.execute(sql, (*row[:-2], when, when))
        await conn.commit()
    store = await SqliteStore.open(path)
    try:
        await _check_r0007(store)
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_upgrade_to_r0007_decides_old_runs(pg_url: str) -> None:
    async with _fresh_postgres() as url:
        await upgrade_postgres(lambda: asyncpg.connect(url), where=url, to="r0006")
        conn = await asyncpg.connect(url)
        try:
            marks = ", ".join(f"${i}" for i in range(1, len(_INSERT_COLUMNS) + 1))
            sql = f"INSERT INTO runs ({', '.join(_INSERT_COLUMNS)}) VALUES ({marks})"
            await conn.executemany(sql, _r0006_rows())
        finally:
            await conn.close()
        store = await PostgresStore.open(url)
        try:
            await _check_r0007(store)
        finally:
            await store.close()


@contextlib.asynccontextmanager
async def _fresh_postgres() -> AsyncIterator[str]:
    name = f"threadpilot_test_{uuid.uuid4().hex[:12]}"
    await admin_execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        await admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_a_resume_in_place_queues_a_run_that_may_move_and_never_a_finished_one(
    store: Store,
) -> None:
    # AUTO_RESUME may list error: a failed run is resumed in place like a blocked one.
    for run_id, state in [("failed", RunState.FAILED), ("finished", RunState.FINISHED)]:
        await store.create_run(
            RunRecord(id=run_id, thread=THREAD, requester="U1", task="t", state=state)
        )
        assert await schedule(store, run_id, T0)

    assert await claim_in_place(store, "failed", "w-a", T0)
    assert not await claim_in_place(store, "finished", "w-a", T0)

    failed, finished = await store.get_run("failed"), await store.get_run("finished")
    assert failed is not None and finished is not None
    assert (failed.state, failed.owner) == (RunState.QUEUED, "w-a")
    assert (finished.state, finished.resume) == (RunState.FINISHED, ResumeState.SCHEDULED)
