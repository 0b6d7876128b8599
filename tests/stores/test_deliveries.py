"""DeliveryLog contract: a delivery key is taken once, by one worker, and purged when old."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from agent_core.values.clock import utcnow

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend


async def test_the_first_call_with_a_key_is_the_only_first(backend: Backend) -> None:
    receiver = await backend.open()
    other_worker = await backend.open()

    assert await receiver.first_delivery("event:Ev1")
    assert not await receiver.first_delivery("event:Ev1")
    assert not await other_worker.first_delivery("event:Ev1")
    assert await other_worker.first_delivery("click:1700000000.000100:U1")
    assert not await receiver.first_delivery("click:1700000000.000100:U1")


async def test_workers_racing_on_one_key_get_exactly_one_first(backend: Backend) -> None:
    workers = [await backend.open() for _ in range(4)]

    for i in range(10):
        key = f"event:Ev{i}"
        answers = await asyncio.gather(*(w.first_delivery(key) for w in workers))
        assert answers.count(True) == 1, (key, answers)


async def test_purge_forgets_old_keys_and_keeps_recent_ones(backend: Backend) -> None:
    store = await backend.open()
    now = utcnow()
    assert await store.first_delivery("event:old", now=now - timedelta(days=40))
    assert await store.first_delivery("event:recent", now=now - timedelta(minutes=1))

    assert await store.purge(older_than=now - timedelta(days=30)) == 1

    other = await backend.open()
    assert not await other.first_delivery("event:recent")
    # Forgotten: long past any re-delivery Slack would make.
    assert await other.first_delivery("event:old")


async def test_a_naive_time_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="naive"):
        await store.first_delivery("event:Ev1", now=utcnow().replace(tzinfo=None))
    assert await store.first_delivery("event:Ev1")


async def test_a_forgotten_key_is_taken_again_by_any_worker_once(backend: Backend) -> None:
    """A delivery whose handling failed before Slack was answered is forgotten: Slack's
    re-delivery, to this worker or another, is a first delivery again, and only once."""
    receiver = await backend.open()
    workers = [await backend.open() for _ in range(3)]
    assert await receiver.first_delivery("event:Ev1")

    await receiver.forget_delivery("event:Ev1")

    answers = await asyncio.gather(*(w.first_delivery("event:Ev1") for w in workers))
    assert answers.count(True) == 1, answers
    assert not await receiver.first_delivery("event:Ev1")
    await receiver.forget_delivery("event:never-seen")  # nothing to forget: no error
