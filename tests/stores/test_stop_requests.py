"""StopRequestStore contract: committed, visible to other workers, ordered, handled once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agent_core.ports import ThreadKey
from agent_core.stop import StopReason

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")


async def test_a_request_is_visible_to_another_instance_once_added(backend: Backend) -> None:
    clicker = await backend.open()  # the worker that got the click
    owner = await backend.open()  # the worker that runs the run

    added = await clicker.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")

    pending = await owner.pending_stop_requests(["run-1"])
    assert pending == [added]
    assert (added.status, added.handled_at, added.kind) == ("requested", None, StopReason.ABORT)
    assert added.requested_at.tzinfo is not None


async def test_pending_requests_come_oldest_first_and_filter_by_run(store: Store) -> None:
    first = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    second = await store.add_stop_request("run-2", THREAD, StopReason.STOP, "U2")
    third = await store.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")
    fourth = await store.add_stop_request("run-3", THREAD, StopReason.SHUTDOWN, "worker-a")

    assert await store.pending_stop_requests() == [first, second, third, fourth]
    assert await store.pending_stop_requests(["run-1"]) == [first, third]
    assert await store.pending_stop_requests({"run-3", "run-2"}) == [second, fourth]
    assert await store.pending_stop_requests([]) == []
    assert await store.pending_stop_requests(["run-9"]) == []


async def test_a_request_is_marked_handled_exactly_once(backend: Backend) -> None:
    store = await backend.open()
    request = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    others = [await backend.open() for _ in range(5)]

    results = await asyncio.gather(*(o.mark_stop_handled(request.id) for o in others))

    assert results.count(True) == 1
    assert await store.pending_stop_requests() == []
    assert not await store.mark_stop_handled(request.id)
    assert not await store.mark_stop_handled("no-such-request")


async def test_handling_one_request_leaves_the_others_pending(store: Store) -> None:
    stop = await store.add_stop_request("run-1", THREAD, StopReason.STOP, "U1")
    abort = await store.add_stop_request("run-1", THREAD, StopReason.ABORT, "U1")

    assert await store.mark_stop_handled(stop.id)

    assert await store.pending_stop_requests(["run-1"]) == [abort]
