"""Approvals across workers, on SQLite and PostgreSQL (docs/tools.md, Approvals).

Slack hands an Approve click to any of the app's connections: the worker that takes it
commits the decision, and the run's owner (another process) must run the call. And when
the owner is killed while a call waits, the approval stays pending: the resumed run waits
on the same approval message, and a click on it, taken by whichever worker, still counts.

Our own MCP server (over streamable HTTP in the test's loop) records every call: it must
never see one that was not approved.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]
import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core import ApprovalStatus
from bot import messages
from bot.views.approval import ACTION_APPROVE
from tests.bot.harness import ACTION_STOP, block_text, buttons, run_id_of
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.system.workers import LEASE_TTL_S, WAIT_S, until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

NOTE = "ship it"


@pytest.fixture
async def notes_config(fake: FakeMcpServer, tmp_path: Path) -> AsyncIterator[str]:
    async with serve_http(fake) as url:
        path = tmp_path / "mcp.json"
        entry = {"url": url, "approval": "always"}
        path.write_text(json.dumps({"mcpServers": {"notes": entry}}))
        yield str(path)


def button_values(message: Message, action_id: str) -> list[str]:
    return [
        str(element.get("value"))
        for block in message.blocks or []
        for element in block.get("elements", [])
        if isinstance(element, dict) and element.get("action_id") == action_id
    ]


def approval_messages(slack: FakeSlack, status: Message) -> list[Message]:
    assert status.thread_ts is not None
    return [
        m
        for m in slack.thread(DEFAULT_CHANNEL, status.thread_ts)
        if "notes__write_note" in block_text(m) and m.ts != status.ts
    ]


async def approval_message(cluster: Cluster, status: Message) -> Message:
    def find(slack: FakeSlack) -> Message | None:
        found = [m for m in approval_messages(slack, status) if ACTION_APPROVE in buttons(m)]
        return found[0] if found else None

    message = await cluster.slack.wait_until(find, timeout=WAIT_S)
    assert message is not None
    return message


async def test_approve_clicked_on_another_worker_runs_the_call_in_the_owner(
    cluster: Cluster, llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config)
    llm.call_tool("notes__write_note", {"text": NOTE})
    llm.reply("The note is written.")
    _, status = await cluster.mention(a, "write the note")
    approval = await approval_message(cluster, status)
    assert fake.notes == []

    assert await b.click(approval, ACTION_APPROVE) == 200
    final = await cluster.final(status)

    assert "The note is written." in block_text(final)
    assert fake.notes == [("write_note", NOTE)]
    decided = await cluster.until_message(approval, lambda m: not buttons(m))
    assert f"Approved by <@{DEFAULT_USER}>" in block_text(decided)
    assert buttons(decided) == []
    run_id = run_id_of(status)
    assert b.logged("approval.decided", run_id=run_id, local=False)
    assert a.logged("approval.decided", tool="notes__write_note", status="approved")


def sub_agent_writes(llm: LLMock) -> None:
    llm.call_tool("delegate", {"task": "Write the note", "tools": ["notes__write_note"]})
    llm.call_tool("notes__write_note", {"text": NOTE})  # the sub-agent's turn 1
    llm.reply("Wrote it.")  # its turn 2
    llm.reply("The sub-agent wrote the note.")  # the parent's turn 2


async def test_a_sub_agents_approval_clicked_on_another_worker_reaches_its_call(
    cluster: Cluster, llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    # The approval is stored under the sub-agent's run id, which the owner does not hold
    # at top level: the decision must still reach the call (not wait for the timeout).
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config)
    sub_agent_writes(llm)
    _, status = await cluster.mention(a, "have a sub-agent write the note")
    approval = await approval_message(cluster, status)
    assert fake.notes == []

    assert await b.click(approval, ACTION_APPROVE) == 200
    final = await cluster.final(status)

    assert "The sub-agent wrote the note." in block_text(final)
    assert fake.notes == [("write_note", NOTE)]
    assert b.logged("approval.decided", local=False)
    assert a.logged("approval.decided", tool="notes__write_note", status="approved")


async def test_a_stop_on_another_worker_while_a_sub_agents_call_waits_never_runs_it(
    cluster: Cluster, llm: LLMock, fake: FakeMcpServer, notes_config: str
) -> None:
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config)
    sub_agent_writes(llm)
    _, status = await cluster.mention(a, "have a sub-agent write the note")
    approval = await approval_message(cluster, status)

    assert await b.click(status, ACTION_STOP) == 200
    closed = await cluster.until_message(approval, lambda m: not buttons(m))
    final = await cluster.final(status)
    assert "Not run" in block_text(closed)
    assert f"stopped by <@{DEFAULT_USER}>" in block_text(final)

    # A client still showing the buttons: the click changes nothing, on either worker.
    assert await b.click(approval, ACTION_APPROVE) == 200
    assert await a.click(approval, ACTION_APPROVE) == 200

    def answered(slack: FakeSlack) -> list[str] | None:
        found = [e.text for e in slack.ephemerals(DEFAULT_CHANNEL) if e.user == DEFAULT_USER]
        return found if len(found) == 2 else None

    for answer in await cluster.slack.wait_until(answered, timeout=WAIT_S) or []:
        assert answer.endswith("Nothing changed.")
    assert fake.notes == []


async def test_a_sub_agents_approval_after_its_worker_was_lost_is_closed_and_takes_no_click(
    cluster: Cluster, llm: LLMock, fake: FakeMcpServer, notes_config: str, store: Store
) -> None:
    # A sub-agent is never resumed on its own: its lost worker's run is resumed, and it
    # delegates anew. The old sub-agent's approval must not take a click any more.
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config)
    for _ in range(2):  # the first life, then the resumed one: delegate, the held call
        llm.call_tool("delegate", {"task": "Write the note", "tools": ["notes__write_note"]})
        llm.call_tool("notes__write_note", {"text": NOTE})
    llm.reply("Wrote it.")
    llm.reply("The sub-agent wrote the note.")
    _, status = await cluster.mention(a, "have a sub-agent write the note")
    old = await approval_message(cluster, status)
    [old_id] = button_values(old, ACTION_APPROVE)

    async def ts_stored() -> bool:
        record = await store.get_approval(old_id)
        return record is not None and record.message_ts is not None

    await until_async(ts_stored, what="the approval message's ts stored")
    assert await a.kill() == -9

    # b ends the lost run and its sub-agent, and resumes the run, which delegates again
    # (the rest of the script). Once the sub-agent has ended, nothing will take a click
    # on its approval: it is answered so, and the approval closes (the same pass).
    await b.wait_log("run.sub_agent_ended", timeout=LEASE_TTL_S + 20)
    assert await b.click(old, ACTION_APPROVE) == 200

    def answered(slack: FakeSlack) -> list[str] | None:
        found = [e.text for e in slack.ephemerals(DEFAULT_CHANNEL) if e.user == DEFAULT_USER]
        return found or None

    assert await cluster.slack.wait_until(answered, timeout=WAIT_S) == [messages.APPROVAL_RUN_ENDED]
    closed = await cluster.until_message(old, lambda m: not buttons(m))
    assert messages.APPROVAL_CLOSED_RUN_ENDED in block_text(closed)
    stored = await store.get_approval(old_id)
    assert stored is not None and stored.status is ApprovalStatus.CANCELLED
    assert b.logged("approval.closed", approval_id=old_id)
    new = await approval_message(cluster, status)  # the only one with buttons
    assert new.ts != old.ts
    assert await b.click(new, ACTION_APPROVE) == 200
    final = await cluster.final(status, timeout=WAIT_S)
    assert "The sub-agent wrote the note." in block_text(final)
    assert fake.notes == [("write_note", NOTE)]  # once
    decided = await cluster.until_message(new, lambda m: not buttons(m))
    assert f"Approved by <@{DEFAULT_USER}>" in block_text(decided)
    assert len(approval_messages(cluster.slack, status)) == 2  # the old one, closed; the new


async def forget_message_ts(database_url: str) -> None:
    """As if the owner had died between posting the approval message and storing its ts."""
    sql = "UPDATE approvals SET message_ts = NULL"
    if database_url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as db:
            db.execute(sql)
            db.commit()
        return
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.mark.parametrize("ts_lost", [False, True], ids=["ts_stored", "ts_lost"])
async def test_owner_killed_while_waiting_the_resumed_run_waits_on_the_same_message(
    cluster: Cluster,
    llm: LLMock,
    fake: FakeMcpServer,
    notes_config: str,
    database_url: str,
    store: Store,
    ts_lost: bool,
) -> None:
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config)
    # The resumed run finishes the checkpointed turn: the same call, not asked for again.
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": NOTE}),)))
    llm.reply("The note is written, after a restart.")
    _, status = await cluster.mention(a, "write the note")
    approval = await approval_message(cluster, status)
    run_id = run_id_of(status)
    [approval_id] = button_values(approval, ACTION_APPROVE)

    async def ts_stored() -> bool:
        record = await store.get_approval(approval_id)
        return record is not None and record.message_ts is not None

    await until_async(ts_stored, what="the approval message's ts stored")
    assert await a.kill() == -9
    if ts_lost:
        await forget_message_ts(database_url)
    # b reconciles the lost run and resumes it: it waits on the approval it had asked for.
    await b.wait_log("approval.reused", timeout=LEASE_TTL_S + 20, run_id=run_id)
    assert fake.notes == []
    await a.restart(MCP_CONFIG=notes_config)
    assert await a.click(cluster.current(approval), ACTION_APPROVE) == 200  # not the owner
    final = await cluster.final(status, timeout=WAIT_S)

    assert "The note is written, after a restart." in block_text(final)
    assert fake.notes == [("write_note", NOTE)]
    assert len(approval_messages(cluster.slack, status)) == 1  # no second approval message
    decided = await cluster.until_message(approval, lambda m: not buttons(m))
    assert f"Approved by <@{DEFAULT_USER}>" in block_text(decided)
    assert bool(b.logged("approval.message_found", run_id=run_id)) is ts_lost


async def test_owner_killed_and_its_resume_declined_the_approval_closes_and_takes_no_click(
    cluster: Cluster, llm: LLMock, fake: FakeMcpServer, notes_config: str, store: Store
) -> None:
    # MAX_AUTO_RESUMES=0: the lost run will not be resumed, so nothing will ever run the call.
    a, b = await cluster.start("a", "b", MCP_CONFIG=notes_config, MAX_AUTO_RESUMES="0")
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": NOTE}),)))
    _, status = await cluster.mention(a, "write the note")
    approval = await approval_message(cluster, status)
    run_id = run_id_of(status)
    [approval_id] = button_values(approval, ACTION_APPROVE)

    async def ts_stored() -> bool:
        record = await store.get_approval(approval_id)
        return record is not None and record.message_ts is not None

    await until_async(ts_stored, what="the approval message's ts stored")
    assert await a.kill() == -9

    # b ends the lost run, declines its resume, and closes its approval: no buttons, and
    # the message says why the call was not run.
    closed = await cluster.until_message(
        approval, lambda m: not buttons(m), timeout=LEASE_TTL_S + 20
    )
    assert messages.APPROVAL_CLOSED_RUN_ENDED in block_text(closed)
    final = await cluster.final(status)
    assert "MAX_AUTO_RESUMES 0" in block_text(final)
    stored = await store.get_approval(approval_id)
    assert stored is not None and stored.status is ApprovalStatus.CANCELLED

    async def audited() -> list[tuple[str, str]] | None:
        events = await store.events_for(run_id)
        trail = [(e.kind, e.actor) for e in events if e.kind.startswith("approval.")]
        return trail if len(trail) > 1 else None

    assert await until_async(audited, what="the cancellation audited") == [
        ("approval.requested", DEFAULT_USER),
        ("approval.cancelled", "threadpilot"),
    ]

    # A client still showing the buttons: the click changes nothing, and says so.
    assert await b.click(approval, ACTION_APPROVE) == 200

    def answered(slack: FakeSlack) -> list[str] | None:
        found = [e.text for e in slack.ephemerals(DEFAULT_CHANNEL) if e.user == DEFAULT_USER]
        return found or None

    assert await cluster.slack.wait_until(answered, timeout=WAIT_S) == [messages.APPROVAL_RUN_ENDED]
    stored = await store.get_approval(approval_id)
    assert stored is not None and stored.status is ApprovalStatus.CANCELLED
    assert fake.notes == []
