"""``Stop all`` over hundreds of live runs, driven as Slack drives it (docs/slack-setup.md,
Home tab and /threadpilot): every run gets exactly one stop request, committed as one
batch before the ack; the runs' owners see them (PostgreSQL: woken by NOTIFY); the ack
comes back; and another person's Stop click, pressed meanwhile, is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core import RunRecord, RunState, ThreadKey
from agent_core.ports import StopWakeups
from agent_core.stores.factory import open_store
from agent_core.values.clock import utcnow
from bot import messages
from bot.views.status import ACTION_STOP
from tests.bot.dashboard.test_home import ADMIN, command, stalled_run, store_of
from tests.bot.harness import WAIT_S, block_text
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import Wakeup
    from tests.bot.conftest import BotFactory

ELSEWHERE = "worker-elsewhere"
"""The worker that owns the stored runs: alive (its leases are current), not this one."""
RUNS = 400


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    """Settings for the app's database: the harness's SQLite file, or a PostgreSQL
    database of the test's own."""
    if request.param == "sqlite":
        yield {}
        return
    async with fresh_postgres() as url:
        yield {"DATABASE_URL": url}


async def live_elsewhere(store: Store, team: str, count: int) -> list[str]:
    """``count`` live runs another worker owns, each in its own thread."""
    expires = utcnow() + timedelta(hours=1)
    ids = [f"elsewhere-{i:04d}" for i in range(count)]
    for i, run_id in enumerate(ids):
        await store.create_run(
            RunRecord(
                id=run_id,
                thread=ThreadKey(team, DEFAULT_CHANNEL, f"1700000000.{i:06d}"),
                requester=f"U0PERSON{i % 7:02d}",
                task="a long task",
                state=RunState.RUNNING,
                owner=ELSEWHERE,
                lease_expires_at=expires,
            )
        )
    return ids


async def test_stop_all_commits_hundreds_of_stops_as_one_batch_before_the_ack(
    database: dict[str, str], make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(ADMIN_USER_IDS=ADMIN, **database)
    own_run, own_status = await stalled_run(bot, llm)  # this worker's, DEFAULT_USER's
    store = store_of(bot)
    elsewhere = await live_elsewhere(store, bot.slack.workspace.team_id, RUNS)
    owner = await open_store(bot.app.settings.DATABASE_URL)  # the other worker's view
    woken: set[str] = set()
    all_woken = asyncio.Event()

    async def wake(wakeup: Wakeup) -> None:
        if wakeup.run_id is not None:
            woken.add(wakeup.run_id)
        if woken >= set(elsewhere):
            all_woken.set()

    listens = isinstance(owner, StopWakeups)  # PostgreSQL; the others are polled
    listener = owner.listen_stops(wake) if isinstance(owner, StopWakeups) else None
    try:
        async with listener or contextlib.nullcontext():
            # Stop all, and another person's Stop on their own run pressed meanwhile.
            (answer, _), click = await asyncio.gather(
                command(bot, "stop all", user=ADMIN),
                bot.click(own_status, ACTION_STOP, user=DEFAULT_USER),
            )

            assert click == 200
            final = await bot.final(own_status)
            assert "User interlude: stopped by" in block_text(final)
            assert answer["text"] in (
                messages.stop_all_done(RUNS + 1, 0, 0),  # Stop all came first
                messages.stop_all_done(RUNS, 1, 0),  # the click came first
            )
            pending = await owner.pending_stop_requests(elsewhere)
            assert sorted(p.run_id for p in pending) == elsewhere  # exactly one each
            assert {(p.kind.value, p.requested_by) for p in pending} == {("stop", ADMIN)}
            assert len(await store.stop_requests_for(own_run)) == 1
            if listens:
                async with asyncio.timeout(WAIT_S):
                    await all_woken.wait()
    finally:
        await owner.close()

    audited = [await store.events_for(run_id) for run_id in elsewhere]
    assert all([e.kind for e in events] == ["stop.requested"] for events in audited)
    if "DATABASE_URL" in database:
        # One transaction wrote every request and its audit event (PostgreSQL's xmin is
        # the id of the transaction that wrote a row).
        writers = await _transactions(database["DATABASE_URL"], elsewhere)
        assert writers == (1, 1)


async def _transactions(url: str, run_ids: list[str]) -> tuple[int, int]:
    conn = await asyncpg.connect(url)
    try:
        requests = await conn.fetchval(
            "SELECT count(DISTINCT xmin::text) FROM stop_requests WHERE run_id = ANY($1)", run_ids
        )
        events = await conn.fetchval(
            "SELECT count(DISTINCT xmin::text) FROM events WHERE run_id = ANY($1)", run_ids
        )
    finally:
        await conn.close()
    return int(requests), int(events)
