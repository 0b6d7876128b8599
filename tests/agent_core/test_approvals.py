"""Approvals in real runs: an MCP call that needs a person's yes waits for it, and the
server never sees a call nobody approved.

Our own MCP server over streamable HTTP (:mod:`tests.fakes.mcp_server`: ``read_note`` is
annotated read-only, ``write_note`` is not) and the real ``mcp-server-git`` over stdio;
llmock streams the tool calls; :class:`~agent_core.testing.HandApprovals` stands in for
the people clicking.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall
from structlog.testing import capture_logs

from agent_core.run.config import AgentConfig
from agent_core.testing import HandApprovals
from agent_core.tools.mcp import HttpServer, McpManager, parse_mcp_config
from agent_core.values.approvals import ApprovalDecision, ApprovalRule, ApprovalStatus
from agent_core.values.budget import BudgetLimits
from agent_core.values.ended import EndedBecause
from agent_core.values.errors import ConfigError, StorageError
from agent_core.values.events import ApprovalDecided, ApprovalRequested
from agent_core.values.outcomes import Outcome
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import EventLog
from tests.agent_core.mcp_helpers import git_server, make_repository
from tests.fakes.mcp_server import FakeMcpServer, serve_http

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.values.approvals import ApprovalRequest
    from tests.agent_core.helpers import AgentFactory


def tool_messages(llm: LLMock, request: int) -> list[str]:
    body: dict[str, Any] = llm.requests[request].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


@contextlib.asynccontextmanager
async def notes_server(
    fake: FakeMcpServer, rule: ApprovalRule = ApprovalRule.UNLESS_READ_ONLY
) -> AsyncIterator[McpManager]:
    async with serve_http(fake) as url, McpManager([HttpServer("notes", url, approval=rule)]) as m:
        yield m


def read_and_write(llm: LLMock, text: str = "ship it") -> None:
    """The model calls both note tools in one step, then answers."""
    llm.add(
        Reply(
            tool_calls=(
                ToolCall("notes__read_note", {}),
                ToolCall("notes__write_note", {"text": text}),
            )
        )
    )
    llm.reply("Done with the notes.")


# -- the config ---------------------------------------------------------------------


def test_approval_is_set_per_server_and_per_tool() -> None:
    [git] = parse_mcp_config(
        {
            "mcpServers": {
                "git": {
                    "command": "mcp-server-git",
                    "approval": "unless_read_only",
                    "tools": {
                        "git_commit": {"approval": "always"},
                        "git_log": {"approval": "never"},
                    },
                }
            }
        },
        {},
    )
    assert git.approval_for("git_commit") is ApprovalRule.ALWAYS
    assert git.approval_for("git_log") is ApprovalRule.NEVER
    assert git.approval_for("git_add") is ApprovalRule.UNLESS_READ_ONLY
    [plain] = parse_mcp_config({"mcpServers": {"w": {"url": "https://w.example/mcp"}}}, {})
    assert plain.approval_for("anything") is ApprovalRule.NEVER


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {"approval": "sometimes"},
            "server 'git': approval must be one of never, always, unless_read_only, "
            "not 'sometimes'",
        ),
        (
            {"tools": {"git_add": {"approval": "maybe"}}},
            "server 'git': tools['git_add'].approval must be one of never, always, "
            "unless_read_only, not 'maybe'",
        ),
        (
            {"tools": {"git_add": "always"}},
            "server 'git': tools['git_add'] must be an object {\"approval\": ...}",
        ),
        ({"tools": []}, 'server \'git\': tools must be an object {"TOOL": {"approval": ...}}'),
    ],
)
def test_a_bad_approval_value_is_a_one_line_settings_error(
    entry: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp_config({"mcpServers": {"git": {"command": "g", **entry}}}, {})
    assert str(caught.value) == f"MCP_CONFIG: {problem}"
    assert "\n" not in str(caught.value)


# -- runs -----------------------------------------------------------------------------


async def test_approve_runs_the_call_and_the_read_only_one_never_waits(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    read_and_write(llm)
    async with notes_server(fake) as manager:
        run = make_agent(manager.tools, approvals=approvals).new_run("update the note")
        events = EventLog(run)
        task = asyncio.create_task(run.run())
        request = await approvals.next_request()
        # The read-only call of the same step went on; the other waits, unseen.
        await fake.until(lambda: fake.notes == [("read_note", "")], "the read-only call")
        assert request.tool == "notes__write_note"
        assert request.arguments == '{"text": "ship it"}'
        assert fake.notes == [("read_note", "")]
        approvals.decide(request.id, ApprovalStatus.APPROVED, "<@UADA>")
        result = await task

    assert fake.notes == [("read_note", ""), ("write_note", "ship it")]
    assert tool_messages(llm, 1) == ["the note says hello", "wrote 'ship it'"]
    assert result.outcome is Outcome.FINISHED
    assert len(approvals.requests) == 1
    [asked] = events.of(ApprovalRequested)
    [decided] = events.of(ApprovalDecided)
    assert asked.request is request
    assert decided.decision == ApprovalDecision(ApprovalStatus.APPROVED, "<@UADA>")


async def test_deny_gives_the_model_an_error_naming_who_and_the_server_never_sees_it(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    read_and_write(llm, "drop the tables")
    async with notes_server(fake) as manager:
        task = asyncio.create_task(
            make_agent(manager.tools, approvals=approvals).new_run("go").run()
        )
        request = await approvals.next_request()
        approvals.decide(request.id, ApprovalStatus.DENIED, "<@UBOB>")
        assert approvals.decide(request.id, ApprovalStatus.APPROVED, "<@UADA>").status is (
            ApprovalStatus.DENIED
        ), "a second decision changes nothing"
        result = await task

    assert fake.notes == [("read_note", "")]
    assert tool_messages(llm, 1)[1] == "error: notes__write_note: denied by <@UBOB>"
    assert result.outcome is Outcome.FINISHED


async def test_no_decision_in_time_is_denied_as_expired(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    llm.call_tool("notes__write_note", {"text": "late"})
    llm.reply("Nobody answered.")
    async with notes_server(fake, ApprovalRule.ALWAYS) as manager:
        agent = make_agent(
            manager.tools, config=AgentConfig(approval_timeout_s=0.2), approvals=approvals
        )
        result = await agent.new_run("go").run()

    assert fake.notes == []
    assert approvals.decisions[approvals.requests[0].id].status is ApprovalStatus.EXPIRED
    assert tool_messages(llm, 1) == [
        "error: notes__write_note: denied: nobody approved it in time (the request expired)"
    ]
    assert result.outcome is Outcome.FINISHED


async def test_stop_while_waiting_cancels_the_call_then_takes_the_final_turn(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    read_and_write(llm)
    async with notes_server(fake) as manager:
        run = make_agent(manager.tools, approvals=approvals).new_run("go")
        task = asyncio.create_task(run.run())
        request = await approvals.next_request()
        await fake.until(lambda: fake.notes, "the read-only call")
        run.request_stop(StopReason.STOP, "UADA")
        result = await task
        # A click after the stop changes nothing: the call was cancelled.
        assert approvals.decide(request.id, ApprovalStatus.APPROVED, "<@UADA>").status is (
            ApprovalStatus.CANCELLED
        )

    assert fake.notes == [("read_note", "")]
    assert tool_messages(llm, 1)[1] == (
        "error: notes__write_note: not run: the run was stopped before anyone approved it"
    )
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.stop_reason is StopReason.STOP
    assert len(llm.requests) == 2  # the final turn, and nothing after it


async def test_a_stop_while_waiting_runs_nothing_even_if_an_approval_was_stored_first(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    # Approved in another worker, its wake-up not here yet, when the Stop lands: the
    # call waited when the run was stopped, so it is not run (and the model reads why).
    approvals = HandApprovals()
    read_and_write(llm)
    async with notes_server(fake) as manager:
        run = make_agent(manager.tools, approvals=approvals).new_run("go")
        task = asyncio.create_task(run.run())
        request = await approvals.next_request()
        await fake.until(lambda: fake.notes, "the read-only call")
        approvals.decisions[request.id] = ApprovalDecision(ApprovalStatus.APPROVED, "<@UB>")
        run.request_stop(StopReason.STOP, "UADA")
        result = await task

    assert fake.notes == [("read_note", "")]
    assert tool_messages(llm, 1)[1] == (
        "error: notes__write_note: not run: the run was stopped before it could run "
        "(approved by <@UB>, too late)"
    )
    assert result.stop_reason is StopReason.STOP


async def test_the_wait_ends_when_the_time_budget_runs_out_before_the_approval_timeout(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    read_and_write(llm)
    config = AgentConfig(budget=BudgetLimits(time_s=1.0), approval_timeout_s=3600.0)
    async with notes_server(fake) as manager:
        run = make_agent(manager.tools, config=config, approvals=approvals).new_run("go")
        async with asyncio.timeout(30):  # APPROVAL_TIMEOUT is an hour
            result = await run.run()

    [request] = approvals.requests
    assert approvals.decisions[request.id].status is ApprovalStatus.EXPIRED
    assert fake.notes == [("read_note", "")]
    assert tool_messages(llm, 1)[1] == (
        "error: notes__write_note: denied: nobody approved it in time (the request expired)"
    )
    assert result.ended_because is EndedBecause.BUDGET_EXHAUSTED


async def test_abort_while_waiting_cancels_the_request_and_ends_the_run(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    read_and_write(llm)
    async with notes_server(fake) as manager:
        run = make_agent(manager.tools, approvals=approvals).new_run("go")
        task = asyncio.create_task(run.run())
        request = await approvals.next_request()
        run.request_stop(StopReason.ABORT, "UADA")
        result = await task

    assert approvals.decisions[request.id].status is ApprovalStatus.CANCELLED
    assert ("write_note", "ship it") not in fake.notes
    assert result.stop_reason is StopReason.ABORT
    assert len(llm.requests) == 1


async def test_shutdown_while_waiting_leaves_the_request_pending(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    approvals = HandApprovals()
    llm.call_tool("notes__write_note", {"text": "later"})
    async with notes_server(fake, ApprovalRule.ALWAYS) as manager:
        run = make_agent(manager.tools, approvals=approvals).new_run("go")
        task = asyncio.create_task(run.run())
        await approvals.next_request()
        run.request_stop(StopReason.SHUTDOWN, "system:shutdown")
        await task

    assert approvals.pending() == approvals.requests
    assert fake.notes == []


async def test_a_run_taken_over_elsewhere_leaves_the_request_to_its_new_owner(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    # Its lease ran out (a stall) and another worker took the run over: resumed there, the
    # run waits on the same request, so this worker's abort must not cancel it.
    approvals = HandApprovals()
    llm.call_tool("notes__write_note", {"text": "later"})
    async with notes_server(fake, ApprovalRule.ALWAYS) as manager:
        run = make_agent(manager.tools, approvals=approvals).new_run("go")
        task = asyncio.create_task(run.run())
        await approvals.next_request()
        run.request_stop(StopReason.ABORT, "system:lease-lost", source=StopSource.LEASE)
        await task

    assert approvals.pending() == approvals.requests
    assert fake.notes == []


async def test_without_anyone_to_ask_a_call_that_needs_approval_is_refused(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    llm.call_tool("notes__write_note", {"text": "x"})
    llm.reply("Could not.")
    async with notes_server(fake, ApprovalRule.ALWAYS) as manager:
        await make_agent(manager.tools).new_run("go").run()

    assert fake.notes == []
    assert tool_messages(llm, 1) == [
        "error: notes__write_note: not run: it needs a person's approval, "
        "and nobody can give it here"
    ]


async def test_mcp_server_git_over_stdio_runs_only_what_was_approved(
    llm: LLMock, make_agent: AgentFactory, tmp_path: Path
) -> None:
    repository = make_repository(tmp_path)
    approvals = HandApprovals()
    git = git_server(repository)
    server = type(git)(
        git.name, git.command, git.args, approval=ApprovalRule.ALWAYS
    )  # every git tool asks
    llm.add(
        Reply(
            tool_calls=(
                ToolCall(
                    "git__git_create_branch",
                    {"repo_path": str(repository), "branch_name": "approved"},
                ),
                ToolCall(
                    "git__git_create_branch",
                    {"repo_path": str(repository), "branch_name": "denied"},
                ),
            )
        )
    )
    llm.reply("One branch made.")
    async with McpManager([server]) as manager:
        task = asyncio.create_task(
            make_agent(manager.tools, approvals=approvals).new_run("branch").run()
        )
        first = await approvals.next_request(1)
        second = await approvals.next_request(2)
        for request in (first, second):
            approved = '"approved"' in request.arguments
            approvals.decide(
                request.id,
                ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED,
                "<@UADA>",
            )
        await task

    branches = sorted(p.name for p in (repository / ".git" / "refs" / "heads").iterdir())
    assert branches == ["approved", "main"]
    results = tool_messages(llm, 1)
    assert "error: git__git_create_branch: denied by <@UADA>" in results


DSN_ERROR = "PostgreSQL could not read approvals at db.internal:5432/threadpilot: reset"


class _Broken(HandApprovals):
    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        raise StorageError(DSN_ERROR)


async def test_an_approval_that_cannot_be_asked_for_is_a_tool_error_not_a_crash(
    llm: LLMock, make_agent: AgentFactory, fake: FakeMcpServer
) -> None:
    read_and_write(llm)
    with capture_logs() as logs:
        async with notes_server(fake) as manager:
            result = await make_agent(manager.tools, approvals=_Broken()).new_run("go").run()

    assert fake.notes == [("read_note", "")]
    # The model reads a plain sentence (it may repeat it in the thread); the detail is
    # for the operator's log.
    assert tool_messages(llm, 1)[1] == (
        "error: notes__write_note: not run: its approval could not be asked for "
        "(the app could not record the request); try again later"
    )
    assert result.outcome is Outcome.FINISHED
    [failed] = [e for e in logs if e["event"] == "approval.failed"]
    assert failed["error"] == DSN_ERROR
