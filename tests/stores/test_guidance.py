"""GuidanceStore contract: a reply is committed once, seen by other workers in the order it
was queued, settled exactly once, woken about on PostgreSQL, and purged once settled."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from agent_core.stores.postgres import PostgresStore
from agent_core.values.clock import utcnow
from agent_core.values.records import GuidanceRecord, GuidanceStatus, ThreadKey, Wakeup

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")


def reply(gid: str, run_id: str = "run-1", **changes: Any) -> GuidanceRecord:
    record = GuidanceRecord(
        id=gid,
        run_id=run_id,
        thread=THREAD,
        author="U2",
        text=f"text of {gid}",
        message_ts=f"1700000001.{len(gid):06d}",
    )
    return dataclasses.replace(record, **changes)


async def test_guidance_is_visible_to_another_worker_once_added(backend: Backend) -> None:
    receiver = await backend.open()  # the worker that got the reply
    owner = await backend.open()  # the worker that runs the run
    added = reply("g1")

    assert await receiver.add_guidance(added)

    [pending] = await owner.pending_guidance(["run-1"])
    assert pending == added
    assert (pending.status, pending.settled_at) == (GuidanceStatus.QUEUED, None)
    assert pending.queued_at.tzinfo is not None
    assert await owner.guidance_for("run-1") == [added]


async def test_the_same_reply_added_twice_is_one_guidance(backend: Backend) -> None:
    receiver = await backend.open()
    other = await backend.open()

    assert await receiver.add_guidance(reply("g1"))
    # Slack re-delivered the event, to this worker or another one.
    assert not await receiver.add_guidance(reply("g1"))
    assert not await other.add_guidance(reply("g1", text="changed"))

    assert [g.text for g in await other.pending_guidance()] == ["text of g1"]


async def test_workers_racing_to_add_one_reply_get_exactly_one_true(backend: Backend) -> None:
    workers = [await backend.open() for _ in range(4)]

    for i in range(5):
        answers = await asyncio.gather(*(w.add_guidance(reply(f"g{i}")) for w in workers))
        assert answers.count(True) == 1, answers


async def test_pending_guidance_comes_oldest_first_and_filters_by_run(store: Store) -> None:
    now = utcnow()
    second = reply("g2", "run-1", queued_at=now)
    first = reply("g1", "run-1", queued_at=now - timedelta(seconds=1))
    other_run = reply("g3", "run-2", queued_at=now + timedelta(seconds=1))
    same_instant = reply("g4", "run-1", queued_at=now)  # ties keep commit order
    for record in (second, first, other_run, same_instant):
        assert await store.add_guidance(record)

    assert [g.id for g in await store.pending_guidance()] == ["g1", "g2", "g4", "g3"]
    assert [g.id for g in await store.pending_guidance(["run-1"])] == ["g1", "g2", "g4"]
    assert [g.id for g in await store.pending_guidance({"run-2", "run-9"})] == ["g3"]
    assert await store.pending_guidance([]) == []


async def test_guidance_is_settled_exactly_once(backend: Backend) -> None:
    store = await backend.open()
    for gid in ("g1", "g2", "g3"):
        assert await store.add_guidance(reply(gid))
    others = [await backend.open() for _ in range(4)]

    # Four workers race to mark the same two; each id goes to exactly one of them.
    results = await asyncio.gather(
        *(o.mark_guidance(["g1", "g2"], GuidanceStatus.DELIVERED) for o in others)
    )
    assert sorted(i for moved in results for i in moved) == ["g1", "g2"]

    # Settled guidance stays as it is: a late "undelivered" does not move it.
    assert await store.mark_guidance(["g1", "g3", "no-such"], GuidanceStatus.UNDELIVERED) == {"g3"}
    assert await store.pending_guidance() == []
    history = await store.guidance_for("run-1")
    assert [(g.id, g.status) for g in history] == [
        ("g1", GuidanceStatus.DELIVERED),
        ("g2", GuidanceStatus.DELIVERED),
        ("g3", GuidanceStatus.UNDELIVERED),
    ]
    assert all(g.settled_at is not None and g.settled_at >= g.queued_at for g in history)
    assert await store.mark_guidance([], GuidanceStatus.DELIVERED) == set()


async def test_a_settled_time_is_kept_as_given(store: Store) -> None:
    at = utcnow().replace(microsecond=123456)
    assert await store.add_guidance(reply("g1", queued_at=at - timedelta(seconds=2)))

    assert await store.mark_guidance(["g1"], GuidanceStatus.DELIVERED, at=at) == {"g1"}

    [record] = await store.guidance_for("run-1")
    assert record.settled_at == at


async def test_guidance_is_added_queued_and_marked_settled(store: Store) -> None:
    with pytest.raises(ValueError, match="queued"):
        await store.add_guidance(reply("g1", status=GuidanceStatus.DELIVERED))
    with pytest.raises(ValueError, match="queued"):
        await store.add_guidance(reply("g1", settled_at=utcnow()))
    with pytest.raises(ValueError, match="naive"):
        await store.add_guidance(reply("g1", queued_at=utcnow().replace(tzinfo=None)))
    assert await store.add_guidance(reply("g1"))
    with pytest.raises(ValueError, match="never queued again"):
        await store.mark_guidance(["g1"], GuidanceStatus.QUEUED)
    with pytest.raises(ValueError, match="naive"):
        await store.mark_guidance(
            ["g1"], GuidanceStatus.DELIVERED, at=utcnow().replace(tzinfo=None)
        )
    [record] = await store.pending_guidance()
    assert record.id == "g1"


async def test_text_is_kept_exactly(store: Store) -> None:
    text = "Use <@U9> & 'quotes' \"too\"; émoji 🙂\nsecond line\ttab"
    assert await store.add_guidance(reply("g1", text=text, message_ts=None))

    [record] = await store.pending_guidance()
    assert (record.text, record.message_ts) == (text, None)


async def test_purge_drops_settled_guidance_and_keeps_queued(backend: Backend) -> None:
    store = await backend.open()
    now = utcnow()
    old = now - timedelta(days=40)
    for gid in ("old-delivered", "old-undelivered", "old-queued", "recent-delivered"):
        assert await store.add_guidance(reply(gid, queued_at=old))
    await store.mark_guidance(["old-delivered"], GuidanceStatus.DELIVERED, at=old)
    await store.mark_guidance(["old-undelivered"], GuidanceStatus.UNDELIVERED, at=old)
    await store.mark_guidance(["recent-delivered"], GuidanceStatus.DELIVERED, at=now)

    assert await store.purge(now - timedelta(days=30)) == 2

    other = await backend.open()
    assert [g.id for g in await other.guidance_for("run-1")] == [
        "old-queued",
        "recent-delivered",
    ]


@pytest.mark.postgres
async def test_committed_guidance_wakes_the_owner_on_postgres(pg_url: str) -> None:
    owner = await PostgresStore.open(pg_url, migrate=False)
    receiver = await PostgresStore.open(pg_url, migrate=False)
    woken: asyncio.Queue[Wakeup] = asyncio.Queue()
    try:
        async with owner.listen_stops(woken.put):
            assert await receiver.add_guidance(reply("g1", "run-7"))
            async with asyncio.timeout(10):
                assert await woken.get() == Wakeup("run-7")
    finally:
        await receiver.close()
        await owner.close()
