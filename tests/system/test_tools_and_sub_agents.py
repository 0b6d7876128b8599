"""MCP servers and sub-agents in real worker processes (docs/stopping.md).

- No stdio MCP server outlives its worker: after SIGTERM the worker ends them before it
  exits; after ``kill -9`` they see their stdin close and exit on their own, within
  seconds. Real servers: ``mcp-server-time`` and our own fake, with a call in flight.
- A Stop clicked on another worker reaches a delegating run's sub-agents through the
  run's owner: each sub-agent finishes its step and takes its own final turn, then the
  parent takes its final turn with their reports, and the final message shows it all.
"""

from __future__ import annotations

import json
import signal
import time
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core import RunState, StopReason
from tests.agent_core.helpers import offered_tools
from tests.agent_core.mcp_helpers import PY, ROOT, children_of, running, until_gone
from tests.bot.harness import ACTION_STOP, block_text, run_id_of, stalled_answer
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.conftest import running_cluster
from tests.system.workers import STOP_S, until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.journal import Journal, RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

SERVERS_EXIT_S = 5.0
"""After ``kill -9``, a stdio server sees its stdin close and exits: "within seconds"."""
STALL_S = 3.0
"""The sub-agents' first step stalls this long: the Stop lands in it, and it then ends."""


@pytest.fixture
async def sqlite_cluster(slack: FakeSlack, llm: LLMock, tmp_path: Path) -> AsyncIterator[Cluster]:
    """For the process tests, whose database does not matter."""
    async with running_cluster(slack, llm, f"sqlite:///{tmp_path}/tp.db", tmp_path) as cluster:
        yield cluster


def mcp_config(tmp_path: Path) -> str:
    path = tmp_path / "mcp.json"
    servers = {
        "time": {"command": PY, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "fake": {
            "command": PY,
            "args": ["-m", "tests.fakes.mcp_server"],
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
        },
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_no_stdio_mcp_server_outlives_its_worker(
    sqlite_cluster: Cluster, llm: LLMock, tmp_path: Path, sig: signal.Signals
) -> None:
    (worker,) = await sqlite_cluster.start("a", MCP_CONFIG=mcp_config(tmp_path))
    assert worker.process is not None
    servers = children_of(worker.process.pid)
    assert len(servers) == 2, worker.log_tail()
    llm.call_tool("fake__slow", {"steps": 1})  # never let finish: a call in flight
    _, status = await sqlite_cluster.mention(worker, "run the slow job")
    await sqlite_cluster.until_message(
        status, lambda m: "waiting for the go-ahead" in block_text(m)
    )

    assert all(running(pid) for pid in servers)
    signalled_at = time.monotonic()
    status_code = await worker.kill(sig)
    exited_at = time.monotonic()
    await until_gone(servers, timeout_s=SERVERS_EXIT_S)

    if sig == signal.SIGTERM:
        assert status_code == 0
        assert exited_at - signalled_at < STOP_S
        assert worker.logged("mcp.server_started", server="fake")
    else:
        assert status_code == -signal.SIGKILL


async def test_stop_on_another_worker_reaches_the_sub_agents_through_the_owner(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    delegate = [
        ToolCall("delegate", {"task": task, "tools": ["current_time"]})
        for task in ("Count the open issues", "Read the release notes")
    ]
    # One fault a request, taken in order: none for the parent's turn, a stall for each
    # sub-agent's first step (which also calls a tool: a Stop leaves it unrun).
    llm.add(
        Reply(tool_calls=tuple(delegate)), StreamFault("stall", after_chunks=0, stall_seconds=0)
    )
    llm.add(*stalled_answer(STALL_S))
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Sub-agent summary: stopped after its first step.", times=2)
    llm.reply("Parent summary: both sub-agents stopped after one step.")
    _, status = await cluster.mention(a, "audit the project")
    run_id = run_id_of(status)
    await until(
        lambda: len(journal.records()) == 1 and journal.in_flight == 2,
        what="the parent's turn done and both sub-agents streaming",
    )

    assert await b.click(cluster.current(status), ACTION_STOP) == 200
    committed_at = time.monotonic()
    final = await cluster.final(status)

    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "Parent summary: both sub-agents stopped after one step." in text
    for task in ("Count the open issues", "Read the release notes"):
        assert f":black_square_for_stop: {task} · User interlude: stopped by" in text
    records: list[RequestRecord] = await until(
        lambda: found if len(found := journal.records()) == 6 else None,
        what="six finished model requests",
    )
    _, *first_steps = records[:3]
    child_finals, parent_final = records[3:5], records[5]
    for step in first_steps:
        assert committed_at < step.ended_at and step.completed  # let finish
    for turn in [*child_finals, parent_final]:
        assert offered_tools(turn) == ["final_report"]
    assert max(t.ended_at for t in child_finals) <= parent_final.started_at
    reports = [m["content"] for m in parent_final.body["messages"] if m["role"] == "tool"]
    assert len(reports) == 2
    for report in reports:
        assert "Outcome: User interlude: stopped by" in report
        assert "Sub-agent summary: stopped after its first step." in report
    assert journal.in_flight == 0
    assert b.logged("click.handled", run_id=run_id, local=False, verdict="stop")
    assert a.logged("stop.delivered", run_id=run_id, kind="stop")
    record = await store.get_run(run_id)
    assert record is not None
    children = await store.find_runs(thread=record.thread, top_level=False)
    assert [(c.parent_id, c.state, c.stop_reason) for c in children] == [
        (run_id, RunState.USERINTERLUDE, StopReason.STOP)
    ] * 2
