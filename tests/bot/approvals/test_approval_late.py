"""What a person is told of their Approve or Deny is what the store holds (docs/tools.md,
Approvals), when the database answers only after the click's budget.

Before: the click was answered "not recorded", yet the row was approved and the call ran,
with no audit event and the buttons still showing. Now the decision is followed up after
the ack: once it commits, the message and the trail say so, and the person is told it
was recorded late.

The slow database: on SQLite, another process holding the file's write lock (as in
``tests/bot/handlers/test_click_faults.py``); on PostgreSQL, another connection holding the
approval's row lock. The click's compare-and-set waits on it, and goes through as soon as
it is let go.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest
from llmock.scenarios import Reply, ToolCall

from bot import messages
from bot.handlers.actions import ACK_BUDGET_S
from bot.views.approval import ACTION_APPROVE
from tests.bot.approvals.test_approvals import approval_id_of, approval_message, tool_messages
from tests.bot.handlers.test_click_faults import ACK_WELL_WITHIN_S, write_lock_held
from tests.bot.harness import SECRET, block_text, buttons, run_id_of
from tests.fakes import slack_requests
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    """Settings for the app's database: the harness's SQLite file, or a PostgreSQL
    database of the test's own."""
    if request.param == "sqlite":
        yield {}
        return
    async with fresh_postgres() as url:
        yield {"DATABASE_URL": url}


@pytest.fixture
async def bot(
    make_bot: BotFactory, fake: FakeMcpServer, tmp_path: Path, database: dict[str, str]
) -> AsyncIterator[Bot]:
    """The app, with the notes server (``write_note`` waits for approval)."""
    async with serve_http(fake) as url:
        path = tmp_path / "mcp.json"
        entry = {"url": url, "approval": "unless_read_only"}
        path.write_text(json.dumps({"mcpServers": {"notes": entry}}))
        yield await make_bot(MCP_CONFIG=str(path), **database)


@contextlib.asynccontextmanager
async def slow(database: dict[str, str], tmp_path: Path, approval_id: str) -> AsyncIterator[None]:
    """Writes to the approval wait until the block ends."""
    if "DATABASE_URL" not in database:
        async with write_lock_held(tmp_path / "threadpilot.db"):
            yield
        return
    conn = await asyncpg.connect(database["DATABASE_URL"])
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM approvals WHERE id = $1 FOR UPDATE", approval_id)
            yield
    finally:
        await conn.close()


async def test_a_decision_the_database_takes_late_is_followed_up_and_shown(
    bot: Bot, llm: LLMock, fake: FakeMcpServer, tmp_path: Path, database: dict[str, str]
) -> None:
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": "hello"}),)))
    llm.reply("Wrote it.")
    _, status = await bot.mention("update the note")
    approval = await approval_message(bot, status)

    async with slow(database, tmp_path, approval_id_of(approval)):
        payload = slack_requests.click_button(
            bot.slack.message(approval.channel, approval.ts), ACTION_APPROVE
        )
        started = time.monotonic()
        response = await bot.post(slack_requests.interaction_request(payload, SECRET))
        took = time.monotonic() - started
        assert response.status == 200
        assert ACK_BUDGET_S <= took < ACK_WELL_WITHIN_S  # answered in time, undecided
    # The lock is let go: the decision commits in the background.

    decided = await bot.until(approval, lambda m: not buttons(m))
    [told] = await bot.ephemerals(DEFAULT_USER)
    final = await bot.final(status)

    assert f"Approved by <@{DEFAULT_USER}>" in block_text(decided)
    assert told == messages.approval_recorded_late("approved", DEFAULT_USER)
    assert fake.notes == [("write_note", "hello")]
    assert tool_messages(llm.requests[1]) == ["wrote 'hello'"]
    assert "Wrote it." in block_text(final)
    assert bot.app.ctx is not None
    events = await bot.app.ctx.store.events_for(run_id_of(status))
    trail = [(e.kind, e.actor) for e in events if e.kind.startswith("approval.")]
    assert trail == [("approval.requested", DEFAULT_USER), ("approval.approved", DEFAULT_USER)]
