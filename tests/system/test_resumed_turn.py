"""A resume keeps the turn it paid for (docs/stopping.md), on SQLite and PostgreSQL.

The owner is killed with SIGKILL while its run's tool call waits for approval. The turn
that asked for the call was answered and checkpointed before the call was held, so the
worker that resumes the run does not ask the model for that turn again (llmock's journal
shows no second request for it): it goes on waiting on the same approval message, and an
Approve click on that message runs the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, ToolCall

from bot.views.approval import ACTION_APPROVE
from tests.bot.harness import block_text, buttons, run_id_of
from tests.system.test_approvals_cross_worker import (
    NOTE,
    approval_message,
    approval_messages,
    button_values,
    notes_config,
)
from tests.system.workers import LEASE_TTL_S, WAIT_S, until_async

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.mcp_server import FakeMcpServer
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

__all__ = ["notes_config"]  # the fixture, used here too

AFTER_CALL = "The note is written."
"""The model's next answer: after the call's result, or (the bug) instead of the call."""


async def test_owner_killed_while_waiting_the_resume_does_not_ask_the_model_again(
    cluster: Cluster,
    llm: LLMock,
    journal: Journal,
    fake: FakeMcpServer,
    notes_config: str,
    store: Store,
) -> None:
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config)
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": NOTE}),)))
    # Asked for turn 1 again, the model would answer this instead of the call: the call
    # would never run and the person's approval would be for nothing.
    llm.reply(AFTER_CALL)
    _, status = await cluster.mention(a, "write the note")
    approval = await approval_message(cluster, status)
    run_id = run_id_of(status)
    [approval_id] = button_values(approval, ACTION_APPROVE)

    async def ts_stored() -> bool:
        record = await store.get_approval(approval_id)
        return record is not None and record.message_ts is not None

    await until_async(ts_stored, what="the approval message's ts stored")
    assert len(journal.records()) == 1
    assert await a.kill() == -9
    await b.wait_log("run.resumed", timeout=LEASE_TTL_S + 20, run_id=run_id)
    await b.wait_log("approval.reused", timeout=WAIT_S, run_id=run_id)
    assert len(journal.records()) == 1  # the resumed run did not ask for turn 1 again
    assert fake.notes == []

    assert await b.click(cluster.current(approval), ACTION_APPROVE) == 200
    final = await cluster.final(status, timeout=WAIT_S)

    assert fake.notes == [("write_note", NOTE)]
    assert AFTER_CALL in block_text(final)
    records = journal.records()
    assert len(records) == 2
    conversation = records[1].body["messages"]
    results = [m for m in conversation if m["role"] == "tool"]
    assert len(results) == 1 and "error" not in results[0]["content"]
    assert len(approval_messages(cluster.slack, status)) == 1  # no second approval message
    decided = await cluster.until_message(approval, lambda m: not buttons(m))
    assert "Approved by" in block_text(decided)
