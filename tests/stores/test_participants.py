"""ParticipantStore contract: who wrote in a thread, the same for every worker.

Under ``STOP_POLICY=participants`` a click is decided by whichever worker receives it,
usually not the one that saw the thread's messages; both read this.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from agent_core.values.clock import utcnow
from agent_core.values.records import ThreadKey
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from agent_core.ports import Store
    from tests.stores.conftest import Backend

THREAD = ThreadKey("T1", "C1", "1700000000.000100")
NEIGHBOURS = [
    ThreadKey("T1", "C1", "1700000000.000200"),  # another thread of the channel
    ThreadKey("T1", "C2", "1700000000.000100"),  # the same ts in another channel
    ThreadKey("T2", "C1", "1700000000.000100"),  # ... in another team
]


async def test_a_participant_seen_by_one_worker_is_known_to_another(backend: Backend) -> None:
    saw_the_message = await backend.open()
    got_the_click = await backend.open()
    assert await got_the_click.participants(THREAD) == set()

    await saw_the_message.add_participant(THREAD, "U1")
    await saw_the_message.add_participant(THREAD, "U2")
    await saw_the_message.add_participant(THREAD, "U1")  # wrote again

    assert await got_the_click.participants(THREAD) == {"U1", "U2"}


async def test_participants_belong_to_their_own_thread(store: Store) -> None:
    await store.add_participant(THREAD, "U1")
    for i, other in enumerate(NEIGHBOURS):
        await store.add_participant(other, f"U-elsewhere-{i}")

    assert await store.participants(THREAD) == {"U1"}
    for i, other in enumerate(NEIGHBOURS):
        assert await store.participants(other) == {f"U-elsewhere-{i}"}


async def test_purge_forgets_people_quiet_since_the_cutoff(backend: Backend) -> None:
    store = await backend.open()
    now = utcnow()
    await store.add_participant(THREAD, "U-quiet", now=now - timedelta(days=40))
    await store.add_participant(THREAD, "U-back", now=now - timedelta(days=40))
    await store.add_participant(THREAD, "U-back", now=now - timedelta(minutes=1))  # again
    await store.add_participant(THREAD, "U-recent", now=now - timedelta(minutes=1))

    assert await store.purge(older_than=now - timedelta(days=30)) == 1

    assert await (await backend.open()).participants(THREAD) == {"U-back", "U-recent"}


async def test_a_naive_time_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="naive"):
        await store.add_participant(THREAD, "U1", now=utcnow().replace(tzinfo=None))
    assert await store.participants(THREAD) == set()


async def test_a_stop_request_can_carry_the_id_its_caller_chose(backend: Backend) -> None:
    # The worker applying its own request tells its stop watcher the id before the
    # commit, so the watcher never applies it a second time.
    clicker = await backend.open()
    owner = await backend.open()

    added = await clicker.add_stop_request(
        "run-1", THREAD, StopReason.STOP, "U1", request_id="chosen-id-1"
    )

    assert added.id == "chosen-id-1"
    assert [r.id for r in await owner.pending_stop_requests(["run-1"])] == ["chosen-id-1"]
