"""How many PostgreSQL connections a worker opens: ``DATABASE_POOL_SIZE`` for its runs'
work, the ones kept for clicks, and one for stop notifications. docs/operations.md tells
an admin to plan the server's ``max_connections`` by that sum.

Many runs at once make the worker want more connections than the setting allows; a pool
keeps what it opened (they stay idle for minutes), so the count afterwards is the most it
had open at any time.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core.stores.postgres import ANSWERING_POOL_SIZE
from tests.bot.harness import is_final
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory

RUNS = 6
POOL = 1
LISTENER = 1
"""The connection that LISTENs for stop notifications."""


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """A database of the test's own, dropped after the app has stopped (set up first)."""
    async with fresh_postgres() as fresh:
        yield fresh


@pytest.mark.postgres
async def test_a_worker_opens_no_more_connections_than_its_settings_say(
    url: str, make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(DATABASE_URL=url, DATABASE_POOL_SIZE=str(POOL))
    for k in range(RUNS):
        llm.reply(f"Answer {k}.")
    mentions = await asyncio.gather(
        *(bot.mention(f"question {k}", channel=f"CPOOL{k}") for k in range(RUNS))
    )
    for _thread, status in mentions:
        assert is_final(await bot.final(status))

    watcher = await asyncpg.connect(url)
    try:
        opened = await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            urlsplit(url).path.lstrip("/"),
        )
    finally:
        await watcher.close()
    assert opened <= POOL + ANSWERING_POOL_SIZE + LISTENER
