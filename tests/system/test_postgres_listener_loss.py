"""PostgreSQL: the owner's LISTEN connection is terminated. A Stop clicked meanwhile on
another worker still arrives (the poll backstop reads the table, the truth), and once
the listener is back, NOTIFY wakes the owner again (docs/operations.md).

To keep the listener down long enough to tell the backstop from the reconnect's
re-scan, worker ``a`` reaches PostgreSQL through a loopback proxy that stops accepting
connections: its pooled connections keep working, its listener cannot come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.postgres_listener import LISTENER_APPLICATION_NAME
from bot.workers.stop_watch import POLL_BACKSTOP_S
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, block_text, run_id_of, stalled_answer
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.tcp_proxy import TcpProxy
from tests.system.workers import WAIT_S, log_time, until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from datetime import datetime

    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

STALL_S = 30.0
"""Both runs are aborted long before their model streams would go on."""
RECONNECT_S = 10.0
"""The listener's reconnect backoff is capped at 5 s."""


def through(proxy: TcpProxy, url: str) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    user, _, _ = parts.netloc.rpartition("@")
    netloc = f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc))


async def terminate_listeners(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        killed: int = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1 AND datname = current_database()",
            LISTENER_APPLICATION_NAME,
        )
    finally:
        await conn.close()
    return killed


@dataclass(frozen=True)
class Delivery:
    """A stop request committed by one worker and delivered in another (wall clocks of
    two processes on one machine)."""

    committed_at: datetime
    delivered_at: datetime

    @property
    def latency_s(self) -> float:
        return (self.delivered_at - self.committed_at).total_seconds()


async def click_and_wait_delivery(
    cluster: Cluster,
    store: Store,
    clicker: WorkerProcess,
    owner: WorkerProcess,
    status: Message,
    action_id: str,
    timeout: float = WAIT_S,  # noqa: ASYNC109
) -> Delivery:
    """Click on ``clicker``, then wait until ``owner`` has logged delivering it."""
    run_id = run_id_of(status)
    before = {r.id for r in await store.stop_requests_for(run_id)}
    assert await clicker.click(cluster.current(status), action_id) == 200
    (request,) = [r for r in await store.stop_requests_for(run_id) if r.id not in before]
    delivered = await owner.wait_log("stop.delivered", request_id=request.id, timeout=timeout)
    return Delivery(request.requested_at, log_time(delivered))


@pytest.fixture
async def proxy(pg_database_url: str) -> AsyncIterator[TcpProxy]:
    """Asked for before the workers, so it closes after they are gone."""
    target = urlsplit(pg_database_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as started:
        yield started


async def test_stops_arrive_while_listen_is_down_and_notify_wakes_after_reconnect(
    proxy: TcpProxy,
    pg_cluster: Cluster,
    pg_database_url: str,
    pg_store: Store,
    journal: Journal,
    llm: LLMock,
) -> None:
    cluster, store = pg_cluster, pg_store
    (a,) = await cluster.start("a", DATABASE_URL=through(proxy, pg_database_url))
    (b,) = await cluster.start("b")
    llm.add(*stalled_answer(STALL_S), *stalled_answer(STALL_S))
    _, first = await cluster.mention(a, "first task")
    await until(lambda: journal.in_flight == 1, what="the first run's model stream")

    # The owner's LISTEN connection is cut and cannot come back for now.
    proxy.refuse()
    assert await terminate_listeners(pg_database_url) == 2  # a's and b's
    await a.wait_log("stop_listener.reconnect_failed")
    backstop = await click_and_wait_delivery(
        cluster, store, b, a, first, ACTION_STOP, timeout=2 * POLL_BACKSTOP_S + 5
    )
    assert not a.logged("stop_listener.reconnected")  # the poll backstop delivered it
    await cluster.until_message(first, lambda m: "Stopping" in block_text(m))

    # LISTEN comes back; the owner re-scans, and NOTIFY wakes it again.
    await proxy.accept()
    await a.wait_log("stop_listener.reconnected", timeout=RECONNECT_S)
    await a.wait_log("stop_watch.rescan_after_reconnect")
    _, second = await cluster.mention(a, "second task")
    await until(lambda: journal.in_flight == 2, what="the second run's model stream")
    woken = [
        await click_and_wait_delivery(cluster, store, b, a, first, ACTION_ABORT),
        await click_and_wait_delivery(cluster, store, b, a, second, ACTION_STOP),
        await click_and_wait_delivery(cluster, store, b, a, second, ACTION_ABORT),
    ]

    # Each click was made after the previous delivery. With the poll alone, deliveries
    # happen on its ticks, POLL_BACKSTOP_S apart: three would take twice that.
    span = (woken[-1].delivered_at - woken[0].committed_at).total_seconds()
    print(
        f"poll backstop delivered in {backstop.latency_s:.3f}s; after reconnect, "
        f"{', '.join(f'{d.latency_s:.3f}s' for d in woken)} (all 3 in {span:.3f}s)"
    )
    assert span < POLL_BACKSTOP_S
    for status in (first, second):
        final = await cluster.final(status)
        assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
