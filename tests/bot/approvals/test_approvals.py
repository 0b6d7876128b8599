"""Approvals in the Slack app (docs/tools.md, Approvals): a held call posts one approval
message in the thread; Approve runs it, Deny gives the model an error naming who; people
not allowed, second clicks and clicks after the run ended change nothing; Stop and Abort
while waiting cancel it; a timeout denies it as expired. The status says the run waits
and the agent session is ``suspended`` meanwhile.

The app runs for real (tests/bot harness) with ``MCP_CONFIG`` naming our own MCP server
over streamable HTTP (:mod:`tests.fakes.mcp_server`), which records every call: it must
never see one that was not approved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import TYPE_CHECKING, Any, cast

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core import (
    ApprovalRecord,
    ApprovalStatus,
    EndedBecause,
    RunRecord,
    RunState,
    ThreadKey,
)
from agent_core.stores.memory import MemoryStore
from agent_core.values.records import ResumeState
from bot import messages
from bot.approvals.desk import ApprovalDesk, still_counts
from bot.views.approval import ACTION_APPROVE, ACTION_DENY
from bot.workers.reconciler import Reconciler
from tests.bot.dashboard.test_home import home, open_home, press, says, view_text
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, WAIT_S, block_text, buttons, run_id_of
from tests.fakes import slack_requests
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.system.workers import until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core import Checkpoint
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import ApprovalDeskStore
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message

OTHER_USER = "U0TPOTHER02"
HOSTILE = "<!channel> ``` see <https://evil.example|here>"


@pytest.fixture
async def notes_config(fake: FakeMcpServer, tmp_path: Path) -> AsyncIterator[str]:
    async with serve_http(fake) as url:
        path = tmp_path / "mcp.json"
        entry = {"url": url, "approval": "unless_read_only"}
        path.write_text(json.dumps({"mcpServers": {"notes": entry}}))
        yield str(path)


@pytest.fixture
async def bot(make_bot: BotFactory, notes_config: str) -> Bot:
    return await make_bot(MCP_CONFIG=notes_config)


def read_and_write(llm: LLMock, text: str = HOSTILE) -> None:
    llm.add(
        Reply(
            tool_calls=(
                ToolCall("notes__read_note", {}),
                ToolCall("notes__write_note", {"text": text}),
            )
        )
    )
    llm.reply("Done with the notes.")


def tool_messages(record: RequestRecord) -> list[str]:
    body: dict[str, Any] = record.body or {}
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def approval_message(bot: Bot, status: Message) -> Message:
    """The approval message in the run's thread, once posted."""
    assert status.thread_ts is not None
    thread_ts = status.thread_ts

    def find(slack: FakeSlack) -> Message | None:
        for message in slack.thread(DEFAULT_CHANNEL, thread_ts):
            if ACTION_APPROVE in buttons(message):
                return message
        return None

    found = await bot.slack.wait_until(find, timeout=WAIT_S)
    assert found is not None
    return found


def approval_id_of(message: Message) -> str:
    """The approval a message's Approve button decides."""
    for block in message.blocks or []:
        for element in block.get("elements", []):
            if isinstance(element, dict) and element.get("action_id") == ACTION_APPROVE:
                return str(element["value"])
    raise AssertionError("no Approve button")


async def waiting(bot: Bot, llm: LLMock, fake: FakeMcpServer) -> tuple[Message, Message]:
    """A run whose write_note call waits for approval: (status, approval message)."""
    read_and_write(llm)
    _, status = await bot.mention("update the note")
    approval = await approval_message(bot, status)
    await fake.until(lambda: fake.notes, "the read-only call")
    return status, approval


async def test_approve_runs_the_call_and_the_message_says_who(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)

    text = block_text(approval)
    assert "`notes__write_note`" in text
    assert f"<@{DEFAULT_USER}>" in text
    # The arguments are hostile data: escaped, and their backticks cannot end the block.
    assert "&lt;!channel&gt;" in text and "<!channel>" not in text
    assert "&lt;https://evil.example|here&gt;" in text
    assert text.count("```") == 2
    assert buttons(approval) == [ACTION_APPROVE, ACTION_DENY]
    waiting_status = await bot.until(
        status, lambda m: "Waiting for approval to run `notes__write_note`" in block_text(m)
    )
    assert ACTION_STOP in buttons(waiting_status)
    thread_ts = status.thread_ts
    assert thread_ts is not None
    await bot.slack.wait_until(
        lambda s: s.state.session_status(DEFAULT_CHANNEL, thread_ts) == "suspended",
        timeout=WAIT_S,
    )
    assert fake.notes == [("read_note", "")]

    assert await bot.click(approval, ACTION_APPROVE) == 200
    decided = await bot.until(approval, lambda m: not buttons(m))
    final = await bot.final(status)

    assert f"Approved by <@{DEFAULT_USER}>" in block_text(decided)
    assert fake.notes == [("read_note", ""), ("write_note", HOSTILE)]
    assert tool_messages(llm.requests[1]) == ["the note says hello", f"wrote {HOSTILE!r}"]
    assert "Done with the notes." in block_text(final)
    sessions = [
        c.args["status"]
        for c in bot.slack.calls("agents.sessions.setStatus")
        if c.args.get("thread_ts") == thread_ts
    ]
    assert sessions[:3] == ["processing", "suspended", "processing"]
    assert bot.app.ctx is not None
    events = await bot.app.ctx.store.events_for(run_id_of(status))
    trail = [(e.kind, e.actor) for e in events if e.kind.startswith("approval.")]
    assert trail == [("approval.requested", DEFAULT_USER), ("approval.approved", DEFAULT_USER)]
    async with bot.http.get(f"{bot.url}/metrics") as response:
        metrics = await response.text()
    assert 'threadpilot_approvals_total{result="approved"} 1.0' in metrics


async def test_deny_gives_the_model_an_error_naming_who_and_the_server_never_sees_it(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)

    assert await bot.click(approval, ACTION_DENY) == 200
    decided = await bot.until(approval, lambda m: not buttons(m))
    await bot.final(status)

    assert f"Denied by <@{DEFAULT_USER}>" in block_text(decided)
    assert fake.notes == [("read_note", "")]
    assert tool_messages(llm.requests[1])[1] == (
        f"error: notes__write_note: denied by <@{DEFAULT_USER}>"
    )


async def test_someone_not_allowed_and_a_second_click_change_nothing(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)

    assert await bot.click(approval, ACTION_APPROVE, user=OTHER_USER) == 200
    [refused] = await bot.ephemerals(OTHER_USER)
    assert refused == f"Only <@{DEFAULT_USER}> or an admin can decide this call."
    assert buttons(bot.slack.message(approval.channel, approval.ts)) == [
        ACTION_APPROVE,
        ACTION_DENY,
    ]
    assert fake.notes == [("read_note", "")]

    assert await bot.click(approval, ACTION_DENY) == 200
    await bot.until(approval, lambda m: not buttons(m))
    # The same button again, from a client still showing it: nothing changes.
    assert await bot.click_version(approval, ACTION_APPROVE) == 200
    [again] = await bot.ephemerals(DEFAULT_USER)
    assert again.startswith(f":no_entry: Denied by <@{DEFAULT_USER}>")
    assert again.endswith("Nothing changed.")
    await bot.final(status)
    assert fake.notes == [("read_note", "")]


async def test_stop_while_waiting_cancels_the_call_then_takes_the_final_turn(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)

    assert await bot.click(status, ACTION_STOP) == 200
    cancelled = await bot.until(approval, lambda m: not buttons(m))
    final = await bot.final(status)

    assert "Not run: the run was stopped before anyone decided." in block_text(cancelled)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert tool_messages(llm.requests[-1])[1] == (
        "error: notes__write_note: not run: the run was stopped before anyone approved it"
    )
    # A click on the old buttons afterwards changes nothing.
    assert await bot.click_version(approval, ACTION_APPROVE) == 200
    [answer] = await bot.ephemerals(DEFAULT_USER)
    assert answer.endswith("Nothing changed.")
    assert fake.notes == [("read_note", "")]


async def test_a_stop_before_an_approval_from_elsewhere_reaches_the_call_runs_nothing(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)
    ctx = bot.app.ctx
    assert ctx is not None
    # Another worker commits the approval; its wake-up has not reached this worker (its
    # stop watcher is held still) when the person presses Stop here.
    await ctx.worker.watcher.close()
    approval_id = approval_id_of(approval)
    assert await ctx.store.decide_approval(
        approval_id, ApprovalStatus.APPROVED, decided_by=OTHER_USER
    )

    assert await bot.click(status, ACTION_STOP) == 200
    shown = await bot.until(approval, lambda m: not buttons(m))
    final = await bot.final(status)

    assert block_text(shown).endswith(messages.approval_stopped_first(OTHER_USER))
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert tool_messages(llm.requests[-1])[1] == (
        "error: notes__write_note: not run: the run was stopped before it could run "
        f"(approved by <@{OTHER_USER}>, too late)"
    )
    assert fake.notes == [("read_note", "")]


async def test_a_leftover_approval_is_not_used_by_a_later_identical_call(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("notes__write_note", {"text": "first"})
    llm.call_tool("notes__write_note", {"text": "second"})
    llm.reply("Both written.")
    _, status = await bot.mention("write two notes")
    first = await approval_message(bot, status)
    ctx = bot.app.ctx
    assert ctx is not None
    # An approval of the run's, approved and never used (asked for another call: one the
    # run made in an earlier life, say), for the very call the model makes next.
    [asked] = await ctx.store.approvals_for(run_id_of(status))
    leftover = dataclasses.replace(
        asked,
        id="leftover",
        call_id="call_of_an_earlier_life",
        arguments=json.dumps({"text": "second"}),
        message_ts=None,
    )
    assert await ctx.store.add_approval(leftover)
    assert await ctx.store.decide_approval("leftover", ApprovalStatus.APPROVED, decided_by="U1")

    assert await bot.click(first, ACTION_APPROVE) == 200
    assert status.thread_ts is not None
    thread_ts = status.thread_ts

    def second_message(slack: FakeSlack) -> Message | None:
        found = [
            m
            for m in slack.thread(DEFAULT_CHANNEL, thread_ts)
            if ACTION_APPROVE in buttons(m) and m.ts != first.ts
        ]
        return found[0] if found else None

    second = await bot.slack.wait_until(second_message, timeout=WAIT_S)
    assert second is not None  # the second call asks for itself
    assert fake.notes == [("write_note", "first")]
    assert await bot.click(second, ACTION_APPROVE) == 200
    await bot.final(status)
    assert fake.notes == [("write_note", "first"), ("write_note", "second")]


async def test_abort_while_waiting_cancels_the_call_and_ends_the_run(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)

    assert await bot.click(status, ACTION_ABORT) == 200
    final = await bot.final(status)
    cancelled = await bot.until(approval, lambda m: not buttons(m))

    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    assert "Not run" in block_text(cancelled)
    assert len(llm.requests) == 1
    assert fake.notes == [("read_note", "")]


async def test_no_decision_in_time_is_denied_as_expired(
    make_bot: BotFactory, notes_config: str, llm: LLMock, fake: FakeMcpServer
) -> None:
    bot = await make_bot(MCP_CONFIG=notes_config, APPROVAL_TIMEOUT="1s")
    status, approval = await waiting(bot, llm, fake)

    expired = await bot.until(approval, lambda m: not buttons(m))
    await bot.final(status)

    assert "Expired: nobody decided in time" in block_text(expired)
    assert tool_messages(llm.requests[1])[1] == (
        "error: notes__write_note: denied: nobody approved it in time (the request expired)"
    )
    assert fake.notes == [("read_note", "")]


async def test_under_anyone_another_person_may_approve(
    make_bot: BotFactory, notes_config: str, llm: LLMock, fake: FakeMcpServer
) -> None:
    bot = await make_bot(MCP_CONFIG=notes_config, APPROVAL_POLICY="anyone")
    status, approval = await waiting(bot, llm, fake)

    assert await bot.click(approval, ACTION_APPROVE, user=OTHER_USER) == 200
    decided = await bot.until(approval, lambda m: not buttons(m))
    await bot.final(status)

    assert f"Approved by <@{OTHER_USER}>" in block_text(decided)
    assert ("write_note", HOSTILE) in fake.notes


async def test_under_participants_whoever_wrote_in_the_thread_may_approve_whatever_stop_policy(
    make_bot: BotFactory, notes_config: str, llm: LLMock, fake: FakeMcpServer
) -> None:
    # STOP_POLICY stays ``requester``: who writes in the thread must be recorded anyway.
    bot = await make_bot(MCP_CONFIG=notes_config, APPROVAL_POLICY="participants")
    status, approval = await waiting(bot, llm, fake)
    assert status.thread_ts is not None
    reply = slack_requests.thread_reply("fine by me", thread_ts=status.thread_ts, user=OTHER_USER)
    assert await bot.event(reply) == 200

    assert await bot.click(approval, ACTION_APPROVE, user=OTHER_USER) == 200
    decided = await bot.until(approval, lambda m: not buttons(m))
    await bot.final(status)

    assert f"Approved by <@{OTHER_USER}>" in block_text(decided)
    assert ("write_note", HOSTILE) in fake.notes


async def test_app_home_lists_the_waiting_call_with_the_same_buttons(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    status, approval = await waiting(bot, llm, fake)
    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says(messages.HEADING_APPROVALS, "notes__write_note"))
    assert "&lt;!channel&gt;" in view_text(view)  # the requester sees the arguments

    payload = slack_requests.home_click(view, ACTION_APPROVE)
    assert await press(bot, payload) == 200

    await home(bot, DEFAULT_USER, says(f"Approved by <@{DEFAULT_USER}>"))
    decided = await bot.until(approval, lambda m: not buttons(m))
    await bot.final(status)
    assert f"Approved by <@{DEFAULT_USER}>" in block_text(decided)
    assert ("write_note", HOSTILE) in fake.notes
    after = await home(bot, DEFAULT_USER, lambda v: messages.HEADING_APPROVALS not in view_text(v))
    assert ACTION_APPROVE not in view_text(after)


async def test_a_sub_agents_call_waits_for_approval_the_same_way(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("delegate", {"task": "Write the note", "tools": ["notes__write_note"]})
    llm.call_tool("notes__write_note", {"text": "from the sub-agent"})  # the sub-agent's turn 1
    llm.reply("Wrote it.")  # its turn 2
    llm.reply("The sub-agent wrote the note.")  # the parent's turn 2
    _, status = await bot.mention("have a sub-agent write the note")
    approval = await approval_message(bot, status)

    waiting_status = await bot.until(
        status,
        lambda m: (
            "Write the note · turn 1: Waiting for approval to run `notes__write_note`"
            in block_text(m)
        ),
    )
    assert "*Sub-agents*" in block_text(waiting_status)
    thread_ts = status.thread_ts
    assert thread_ts is not None
    await bot.slack.wait_until(
        lambda s: s.state.session_status(DEFAULT_CHANNEL, thread_ts) == "suspended",
        timeout=WAIT_S,
    )
    assert fake.notes == []

    assert await bot.click(approval, ACTION_APPROVE) == 200
    final = await bot.final(status)

    assert "The sub-agent wrote the note." in block_text(final)
    assert fake.notes == [("write_note", "from the sub-agent")]


async def test_app_home_lists_a_sub_agents_waiting_call(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("delegate", {"task": "Write the note", "tools": ["notes__write_note"]})
    llm.call_tool("notes__write_note", {"text": "from the sub-agent"})
    llm.reply("Wrote it.")
    llm.reply("The sub-agent wrote the note.")
    _, status = await bot.mention("have a sub-agent write the note")
    await approval_message(bot, status)
    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says(messages.HEADING_APPROVALS, "notes__write_note"))

    assert await press(bot, slack_requests.home_click(view, ACTION_APPROVE)) == 200
    await bot.final(status)
    assert fake.notes == [("write_note", "from the sub-agent")]


async def _no_resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
    raise AssertionError("this run's resume is declined")


async def test_a_lost_run_that_will_not_resume_takes_no_click_and_closes_its_approval(
    make_bot: BotFactory, notes_config: str, llm: LLMock, fake: FakeMcpServer
) -> None:
    bot = await make_bot(MCP_CONFIG=notes_config, MAX_AUTO_RESUMES="0")
    status, approval = await waiting(bot, llm, fake)
    ctx = bot.app.ctx
    assert ctx is not None
    run_id = run_id_of(status)
    record = await ctx.store.get_run(run_id)
    assert record is not None
    approval_id = approval_id_of(approval)

    # Another worker finds this one gone (as after a stall longer than the lease): the
    # run ended ``worker_lost``, and its resume is declined (MAX_AUTO_RESUMES=0).
    worker_b = Reconciler(
        ctx.store,
        ctx.workspaces,
        worker_id="worker-b",
        lease_ttl_s=3,
        resume=_no_resume,
        is_local=lambda _: False,
        policy=ctx.worker.reconciler.policy,
    )
    assert await worker_b.end_orphan(record)
    ended = await ctx.store.get_run(run_id)
    assert ended is not None and ended.resume is ResumeState.DECLINED

    # No run will ever take a decision now: a click changes nothing, and says so.
    assert await bot.click(approval, ACTION_APPROVE) == 200
    [answer] = await bot.ephemerals(DEFAULT_USER)
    assert answer == messages.APPROVAL_RUN_ENDED
    stored = await ctx.store.get_approval(approval_id)
    assert stored is not None and stored.status is not ApprovalStatus.APPROVED

    # This worker's heartbeat sees the run is no longer its own and lets go of it (the
    # call it held is left to the new owner); whichever worker passes next closes the
    # approval: its message keeps no buttons.
    live = ctx.supervisor.get(run_id)
    assert live is not None and live.task is not None
    ctx.supervisor.lost_ownership({r.id for r in await ctx.store.live_runs(owner=ctx.worker.id)})
    async with asyncio.timeout(WAIT_S):
        await live.task
    assert (await ctx.store.get_approval(approval_id)) == stored  # not settled by the abort
    await ctx.worker.reconciler.run_once()
    closed = await bot.until(approval, lambda m: not buttons(m))
    assert messages.APPROVAL_CLOSED_RUN_ENDED in block_text(closed)
    stored = await ctx.store.get_approval(approval_id)
    assert stored is not None and stored.status is ApprovalStatus.CANCELLED

    async def audited() -> list[tuple[str, str]] | None:
        events = await ctx.store.events_for(run_id)
        trail = [(e.kind, e.actor) for e in events if e.kind.startswith("approval.")]
        return trail if len(trail) > 1 else None

    # (The audit event follows the message update; a periodic pass may be the closer.)
    assert await until_async(audited, what="the cancellation audited", timeout=WAIT_S) == [
        ("approval.requested", DEFAULT_USER),
        ("approval.cancelled", "threadpilot"),
    ]
    # The buttons of a client still showing them: the same answer.
    assert await bot.click_version(approval, ACTION_APPROVE) == 200
    assert await bot.ephemerals(DEFAULT_USER, 2) == [messages.APPROVAL_RUN_ENDED] * 2
    assert fake.notes == [("read_note", "")]


@pytest.mark.parametrize(
    ("state", "ended_because", "resume", "counts"),
    [
        (RunState.RUNNING, None, None, True),
        (RunState.BLOCKED, EndedBecause.WORKER_LOST, None, True),  # not decided yet
        (RunState.BLOCKED, EndedBecause.WORKER_LOST, ResumeState.SCHEDULED, True),
        (RunState.BLOCKED, EndedBecause.SHUTDOWN, ResumeState.CLAIMED, True),
        (RunState.BLOCKED, EndedBecause.WORKER_LOST, ResumeState.DECLINED, False),
        (RunState.BLOCKED, EndedBecause.SHUTDOWN, ResumeState.CANCELLED, False),  # Don't resume
        (RunState.BLOCKED, EndedBecause.SHUTDOWN, ResumeState.STARTED, False),
        (RunState.USERINTERLUDE, EndedBecause.USER_EXIT, None, False),
        (RunState.FINISHED, EndedBecause.COMPLETED, None, False),
    ],
)
def test_a_click_counts_only_while_a_run_may_still_take_it(
    state: RunState, ended_because: EndedBecause | None, resume: ResumeState | None, counts: bool
) -> None:
    thread = ThreadKey("T1", "C1", "1.0")
    run = RunRecord("r1", thread, DEFAULT_USER, "task", state=state)
    run = dataclasses.replace(run, ended_because=ended_because, resume=resume)
    assert still_counts(run) is counts
    assert still_counts(None) is False
    # A sub-agent is never resumed on its own (its resumed parent delegates anew): once
    # ended, however, no run will take its approvals.
    sub_agent = dataclasses.replace(run, id="r2", parent_id="r1")
    assert still_counts(sub_agent) is (counts and not state.is_terminal)


class _Counting:
    """A store that counts the reads it is asked for."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.store, name)


async def test_the_reconcilers_pass_finds_ended_runs_with_open_approvals_in_one_query() -> None:
    store = MemoryStore()
    thread = ThreadKey("T1", "C1", "1.0")
    for i in range(20):  # live runs with held calls: nothing to close, nothing to read again
        await store.create_run(RunRecord(f"r{i}", thread, DEFAULT_USER, "task"))
        record = ApprovalRecord(f"a{i}", f"r{i}", thread, DEFAULT_USER, "t", "{}", f"c{i}")
        assert await store.add_approval(record)
    counting = _Counting(store)
    desk = ApprovalDesk(cast("ApprovalDeskStore", counting), cast("Workspaces", None))

    assert await desk.close_all_ended() == 0
    assert counting.calls == ["ended_runs_with_open_approvals"]
