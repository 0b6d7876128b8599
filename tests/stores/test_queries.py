"""RunQueries contract: find_runs, update_run, stop_requests_for; and set_state used as a
guarded write (to the state the run is already in), on every adapter."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.values.outcomes import ExitCode
from agent_core.values.records import RunRecord, ThreadKey
from agent_core.values.states import LIVE_STATES, TERMINAL_STATES, RunState
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from agent_core.ports import Store
    from tests.stores.conftest import Backend

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
THREAD_1 = ThreadKey("T1", "C1", "1700000000.000100")
THREAD_2 = ThreadKey("T1", "C2", "1700000000.000100")  # same ts, other channel
THREAD_3 = ThreadKey("T2", "C1", "1700000000.000100")  # same channel id, other team
PLUS_TWO = timezone(timedelta(hours=2))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def a_run(run_id: str, **fields: Any) -> RunRecord:
    run = RunRecord(id=run_id, thread=THREAD_1, requester="U1", task="t", created_at=T0)
    return dataclasses.replace(run, **fields)


async def ids(runs: Awaitable[list[RunRecord]]) -> list[str]:
    return [r.id for r in await runs]


# Oldest first: d(0) b(1) c(2) f(2, after c by id) a(3) e(4) g(5). Created out of that
# order, so insertion order cannot pass for age.
RUNS = [
    a_run(
        "a",
        created_at=at(3).astimezone(PLUS_TWO),  # another offset: order is by instant
        state=RunState.FINISHED,
        exit_code=ExitCode.FINAL_ANSWER,
        final_posted_at=at(10),
    ),
    a_run(
        "f",
        created_at=at(2),
        state=RunState.BLOCKED,
        stop_reason=StopReason.SHUTDOWN,
        exit_code=ExitCode.SHUTDOWN,
        final_posted_at=at(11),
    ),
    a_run(
        "b",
        created_at=at(1),
        state=RunState.USERINTERLUDE,
        stop_reason=StopReason.STOP,
        exit_code=ExitCode.USER_STOP,
    ),
    a_run("g", created_at=at(5), owner="worker-a", lease_expires_at=at(35)),
    a_run(
        "c",
        created_at=at(2),
        thread=THREAD_2,
        state=RunState.BLOCKED,
        stop_reason=StopReason.SHUTDOWN,
        exit_code=ExitCode.SHUTDOWN,
    ),
    a_run(
        "e",
        created_at=at(4),
        thread=THREAD_3,
        state=RunState.USERINTERLUDE,
        stop_reason=StopReason.ABORT,
        exit_code=ExitCode.USER_ABORT,
        final_posted_at=at(12),
    ),
    a_run(
        "d",
        created_at=at(0),
        thread=THREAD_2,
        state=RunState.RUNNING,
        owner="worker-a",
        lease_expires_at=at(30),
    ),
]


@pytest.fixture
async def seeded(backend: Backend) -> Store:
    """A second instance over a database the first one filled: what another worker sees."""
    writer = await backend.open()
    for run in RUNS:
        await writer.create_run(run)
    return await backend.open()


# -- find_runs ------------------------------------------------------------------------


async def test_find_runs_with_no_filter_returns_all_oldest_first(seeded: Store) -> None:
    assert await ids(seeded.find_runs()) == ["d", "b", "c", "f", "a", "e", "g"]
    assert await seeded.find_runs() == sorted(RUNS, key=lambda r: (r.created_at, r.id))


async def test_find_runs_each_filter_alone(seeded: Store) -> None:
    cases: dict[str, dict[str, Any]] = {
        "blocked": {"states": [RunState.BLOCKED]},
        "terminal": {"states": TERMINAL_STATES},
        "live": {"states": LIVE_STATES},
        "no states": {"states": []},
        "shutdown": {"stop_reason": StopReason.SHUTDOWN},
        "abort": {"stop_reason": StopReason.ABORT},
        "user stop": {"exit_code": ExitCode.USER_STOP},
        "posted": {"final_posted": True},
        "not posted": {"final_posted": False},
        "thread 1": {"thread": THREAD_1},
        "thread 3": {"thread": THREAD_3},
        "unknown thread": {"thread": ThreadKey("T1", "C1", "1.0")},
        "worker-a": {"owner": "worker-a"},
        "nobody": {"owner": "nobody"},
    }
    got = {name: await ids(seeded.find_runs(**filters)) for name, filters in cases.items()}
    assert got == {
        "blocked": ["c", "f"],
        "terminal": ["b", "c", "f", "a", "e"],
        "live": ["d", "g"],
        "no states": [],
        "shutdown": ["c", "f"],
        "abort": ["e"],
        "user stop": ["b"],
        "posted": ["f", "a", "e"],
        "not posted": ["d", "b", "c", "g"],
        "thread 1": ["b", "f", "a", "g"],
        "thread 3": ["e"],
        "unknown thread": [],
        "worker-a": ["d", "g"],
        "nobody": [],
    }


async def test_find_runs_ands_its_filters(seeded: Store) -> None:
    cases: dict[str, dict[str, Any]] = {
        # The reconciler's two scans: runs to resume, finals to post again.
        "resumable": {"states": [RunState.BLOCKED], "stop_reason": StopReason.SHUTDOWN},
        "unposted ends": {"states": TERMINAL_STATES, "final_posted": False},
        "three": {
            "states": [RunState.BLOCKED],
            "stop_reason": StopReason.SHUTDOWN,
            "final_posted": False,
        },
        "thread and posted": {"thread": THREAD_1, "final_posted": True},
        "four": {
            "states": TERMINAL_STATES,
            "exit_code": ExitCode.USER_ABORT,
            "thread": THREAD_3,
            "final_posted": True,
        },
        "owner in thread": {"thread": THREAD_2, "owner": "worker-a", "states": LIVE_STATES},
        "contradictory": {"stop_reason": StopReason.STOP, "exit_code": ExitCode.USER_ABORT},
        "live and posted": {"states": LIVE_STATES, "final_posted": True},
    }
    got = {name: await ids(seeded.find_runs(**filters)) for name, filters in cases.items()}
    assert got == {
        "resumable": ["c", "f"],
        "unposted ends": ["b", "c"],
        "three": ["c"],
        "thread and posted": ["f", "a"],
        "four": ["e"],
        "owner in thread": ["d"],
        "contradictory": [],
        "live and posted": [],
    }


async def test_find_runs_limits_after_ordering(seeded: Store) -> None:
    assert await ids(seeded.find_runs(limit=2)) == ["d", "b"]
    assert await ids(seeded.find_runs(states=[RunState.BLOCKED], limit=1)) == ["c"]
    assert await ids(seeded.find_runs(final_posted=True, limit=50)) == ["f", "a", "e"]
    assert await seeded.find_runs(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        await seeded.find_runs(limit=-1)


async def test_find_runs_defaults_to_a_hundred(store: Store) -> None:
    for i in range(101):
        await store.create_run(a_run(f"run-{i:03}", created_at=at(i)))
    found = await ids(store.find_runs())
    assert found == [f"run-{i:03}" for i in range(100)]


async def test_find_runs_tells_sub_agents_from_top_level_runs(store: Store) -> None:
    blocked = {"state": RunState.BLOCKED, "stop_reason": StopReason.SHUTDOWN}
    for run in [
        a_run("parent", created_at=at(0), **blocked),
        a_run("child-1", created_at=at(1), parent_id="parent", **blocked),
        a_run("child-2", created_at=at(2), parent_id="parent", state=RunState.RUNNING),
        a_run("grandchild", created_at=at(3), parent_id="child-2", state=RunState.RUNNING),
        a_run("other", created_at=at(4), thread=THREAD_2),
    ]:
        await store.create_run(run)

    assert await ids(store.find_runs(top_level=True)) == ["parent", "other"]
    assert await ids(store.find_runs(top_level=False)) == ["child-1", "child-2", "grandchild"]
    # The reconciler's scans: what may resume, and the sub-agents still live in a thread.
    resumable = store.find_runs(
        states=[RunState.BLOCKED], stop_reason=StopReason.SHUTDOWN, top_level=True
    )
    assert await ids(resumable) == ["parent"]
    live_children = store.find_runs(states=LIVE_STATES, thread=THREAD_1, top_level=False)
    assert await ids(live_children) == ["child-2", "grandchild"]
    assert await ids(store.find_runs(top_level=False, limit=1)) == ["child-1"]


# -- update_run -----------------------------------------------------------------------


async def test_update_run_writes_fields_and_leaves_the_state(backend: Backend) -> None:
    store, other = await backend.open(), await backend.open()
    await store.create_run(a_run("run-1", state=RunState.RUNNING, updated_at=T0))
    moved = ThreadKey("T1", "C9", "1.2")
    posted = datetime(2026, 3, 1, 9, 0, 1, 42, tzinfo=timezone(timedelta(hours=-3)))

    assert await other.update_run(
        "run-1",
        status_ts="1700000000.000200",
        final_posted_at=posted,
        owner="worker-b",
        lease_expires_at=at(30),
        thread=moved,
    )

    got = await store.get_run("run-1")
    assert got is not None
    assert (got.state, got.status_ts, got.owner, got.lease_expires_at, got.thread) == (
        RunState.RUNNING,
        "1700000000.000200",
        "worker-b",
        at(30),
        moved,
    )
    assert got.final_posted_at == posted
    assert (got.created_at, got.requester, got.task) == (T0, "U1", "t")
    assert got.updated_at > T0

    assert await other.update_run("run-1", final_posted_at=None, owner=None, lease_expires_at=None)
    cleared = await store.get_run("run-1")
    assert cleared is not None
    assert (cleared.final_posted_at, cleared.owner, cleared.lease_expires_at) == (None, None, None)
    assert cleared.status_ts == "1700000000.000200"


async def test_update_run_marks_a_terminal_run_posted(store: Store) -> None:
    await store.create_run(a_run("run-1", state=RunState.FINISHED))
    assert await ids(store.find_runs(states=TERMINAL_STATES, final_posted=False)) == ["run-1"]

    assert await store.update_run("run-1", final_posted_at=at(60))

    assert await store.find_runs(states=TERMINAL_STATES, final_posted=False) == []
    got = await store.get_run("run-1")
    assert got is not None
    assert (got.state, got.final_posted_at) == (RunState.FINISHED, at(60))


async def test_update_run_of_a_missing_run_is_false(store: Store) -> None:
    assert not await store.update_run("no-such-run", status_ts="1.0")
    assert not await store.update_run("no-such-run")
    assert await store.get_run("no-such-run") is None


async def test_update_run_with_no_changes_writes_nothing(store: Store) -> None:
    run = a_run("run-1", updated_at=T0)
    await store.create_run(run)
    assert await store.update_run("run-1")
    assert await store.get_run("run-1") == run


@pytest.mark.parametrize(
    "changes",
    [
        {"state": RunState.RUNNING},
        {"state": RunState.QUEUED},  # even the state it is in
        {"status_ts": "1.0", "state": RunState.FINISHED},
        {"id": "run-2"},
        {"updated_at": T0},
        {"colour": "red"},
    ],
    ids=["state", "same-state", "state-with-others", "id", "updated_at", "unknown"],
)
async def test_update_run_refuses_what_it_may_not_write(
    store: Store, changes: dict[str, Any]
) -> None:
    run = a_run("run-1")
    await store.create_run(run)
    with pytest.raises(TypeError, match="update_run"):
        await store.update_run("run-1", **changes)
    with pytest.raises(TypeError):  # checked before looking the run up
        await store.update_run("no-such-run", **changes)
    assert await store.get_run("run-1") == run


async def test_update_run_refuses_a_naive_datetime(store: Store) -> None:
    run = a_run("run-1")
    await store.create_run(run)
    with pytest.raises(ValueError, match="naive"):
        await store.update_run("run-1", final_posted_at=datetime(2026, 3, 1, 12))
    assert await store.get_run("run-1") == run


# -- stop_requests_for ----------------------------------------------------------------


async def test_stop_requests_for_lists_handled_and_pending_oldest_first(
    backend: Backend,
) -> None:
    clicker, owner = await backend.open(), await backend.open()
    stop = await clicker.add_stop_request("run-1", THREAD_1, StopReason.STOP, "U1")
    other_run = await clicker.add_stop_request("run-2", THREAD_2, StopReason.ABORT, "U2")
    abort = await clicker.add_stop_request("run-1", THREAD_1, StopReason.ABORT, "U3")
    shutdown = await clicker.add_stop_request("run-1", THREAD_1, StopReason.SHUTDOWN, "w-a")
    assert await owner.mark_stop_handled(stop.id)
    assert await owner.mark_stop_handled(other_run.id)

    got = await owner.stop_requests_for("run-1")

    assert [r.id for r in got] == [stop.id, abort.id, shutdown.id]
    assert [(r.kind, r.requested_by, r.status) for r in got] == [
        (StopReason.STOP, "U1", "handled"),
        (StopReason.ABORT, "U3", "requested"),
        (StopReason.SHUTDOWN, "w-a", "requested"),
    ]
    assert got[0].handled_at is not None
    assert got[1:] == [abort, shutdown]
    assert [r.id for r in await owner.stop_requests_for("run-2")] == [other_run.id]
    assert await owner.stop_requests_for("run-9") == []


# -- set_state to the same state: a write guarded by compare-and-set ------------------


async def test_set_state_to_the_same_state_writes_fields(store: Store) -> None:
    await store.create_run(a_run("run-1", state=RunState.RUNNING, updated_at=T0))

    assert await store.set_state(
        "run-1", RunState.RUNNING, expected=[RunState.RUNNING], status_ts="1.1"
    )
    got = await store.get_run("run-1")
    assert got is not None
    assert (got.state, got.status_ts) == (RunState.RUNNING, "1.1")
    assert got.updated_at > T0

    # Once the run has moved on, the guard refuses and nothing is written.
    assert await store.set_state("run-1", RunState.STOPPING, expected=[RunState.RUNNING])
    assert not await store.set_state(
        "run-1", RunState.RUNNING, expected=[RunState.RUNNING], status_ts="late"
    )
    got = await store.get_run("run-1")
    assert got is not None
    assert (got.state, got.status_ts) == (RunState.STOPPING, "1.1")


async def test_set_state_to_the_same_terminal_state_writes_fields(store: Store) -> None:
    await store.create_run(a_run("done", state=RunState.FINISHED))
    await store.create_run(a_run("paused", state=RunState.BLOCKED))

    assert await store.set_state(
        "done", RunState.FINISHED, expected=[RunState.FINISHED], final_posted_at=at(1)
    )
    # Marking a blocked run's final posted, guarded: a resume that got there first wins.
    assert await store.set_state("paused", RunState.QUEUED, expected=[RunState.BLOCKED])
    assert not await store.set_state(
        "paused", RunState.BLOCKED, expected=[RunState.BLOCKED], final_posted_at=at(2)
    )

    done, paused = await store.get_run("done"), await store.get_run("paused")
    assert done is not None
    assert paused is not None
    assert (done.state, done.final_posted_at) == (RunState.FINISHED, at(1))
    assert (paused.state, paused.final_posted_at) == (RunState.QUEUED, None)
