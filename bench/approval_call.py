"""Approval click -> the approved call reaches the MCP server (bench/README.md).

Targets: p99 < 50 ms when the click lands on the worker that owns the run (same worker),
< 150 ms when it lands on another worker (PostgreSQL: the decision's commit wakes the
owner through LISTEN/NOTIFY).

Two real ``python -m bot`` workers (``tests/system/workers.py``) share a fresh PostgreSQL
database, the fake Slack and llmock of this process, and our own MCP server
(:mod:`tests.fakes.mcp_server`, streamable HTTP, in this process) whose ``write_note`` needs
approval (``"approval": "always"``). Each trial mentions worker A in a channel of its own
(without waiting for the previous run's last Slack writes, which queue for chat.update);
the model calls ``notes__write_note``; once the approval message is posted, Approve is
clicked (signed, over HTTP) on A (same worker) or on B (other worker); in a third row the
call is a sub-agent's (the run delegates first: the approval is stored under the
sub-agent's run id; a quarter as many trials) and the click goes to B. Latency = the
moment the MCP server receives the call - the moment the click was sent, both on this
process's monotonic clock. Trials run one after another.

Usage: ``.venv/bin/python -m bench.approval_call [--trials 100]``
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import asyncpg  # type: ignore[import-untyped]
from llmock.scenarios import Reply, ToolCall

from agent_core.stores.factory import open_store
from bench._llmock import llmock_server
from bench._setup import NOT_RUN, bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line
from bench._workers import APP_BUSY_LOOP_LAG_MS
from bot.views.approval import ACTION_APPROVE
from tests.bot.harness import buttons
from tests.fakes import slack_requests
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_api import FakeSlack
from tests.system.workers import Cluster, kill_leftovers, until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.testing import LLMockServer

    from tests.fakes.slack_messages import Message
    from tests.system.workers import WorkerProcess

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGETS_MS = {"same": 50.0, "other": 150.0}
WAIT_S = 20.0


@contextlib.asynccontextmanager
async def postgres_database() -> AsyncIterator[str | None]:
    name = f"tp_bench_{uuid.uuid4().hex[:8]}"
    try:
        admin = await asyncpg.connect(ADMIN_DSN)
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"approval_call: PostgreSQL not reachable ({exc}): not run")
        yield None
        return
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    try:
        store = await open_store(url)  # migrated once, before the workers start
        await store.close()
        yield url
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def one_trial(
    cluster: Cluster,
    llm: LLMockServer,
    fake: FakeMcpServer,
    owner: WorkerProcess,
    clicker: WorkerProcess,
    label: str,
    *,
    sub_agent: bool = False,
) -> float:
    """Milliseconds from the Approve click sent to ``clicker`` to the call's arrival
    (``sub_agent``: the call is a sub-agent's)."""
    text = f"note {label}"
    write = Reply(tool_calls=(ToolCall("notes__write_note", {"text": text}),), times=1)
    if sub_agent:
        task = {"task": f"Write {label}", "tools": ["notes__write_note"]}
        delegate = Reply(tool_calls=(ToolCall("delegate", task),), times=1)
        llm.state.scenarios.add(
            delegate, write, Reply(text="Wrote it.", times=1), Reply(text="Done.", times=1)
        )
    else:
        llm.state.scenarios.add(write, Reply(text=f"Wrote {label}.", times=1))
    slack = cluster.slack
    channel = f"CA{label}"
    envelope = slack_requests.app_mention(
        f"<@{slack.workspace.bot_user_id}> write {label}", channel=channel
    )
    event = envelope["event"]
    slack.seed_message(channel, event["text"], user=event["user"], ts=event["ts"])
    if await owner.event(envelope) != 200:
        raise RuntimeError(f"mention refused by {owner.name}")
    thread_ts = str(event["ts"])

    def approval() -> Message | None:
        for message in slack.thread(channel, thread_ts):
            if ACTION_APPROVE in buttons(message):
                return message
        return None

    message = await until(approval, what=f"the approval message of {label}", timeout=WAIT_S)
    sent = time.monotonic()
    if await clicker.click(message, ACTION_APPROVE) != 200:
        raise RuntimeError(f"click refused by {clicker.name}")
    arrived = await until(
        lambda: fake.written_at.get(text), what=f"the call of {label}", timeout=WAIT_S
    )
    # The run ends on its own; its Slack writes wait for chat.update's budget (Tier 3),
    # which none of the next trial's measured path uses.
    return (arrived - sent) * 1000


async def measure(trials: int) -> bool:
    async with postgres_database() as url:
        if url is None:
            sys.exit(NOT_RUN)
        with (
            tempfile.TemporaryDirectory(prefix="threadpilot-bench-") as tmp,
            llmock_server() as llm,
        ):
            fake = FakeMcpServer()
            async with (
                serve_http(fake) as mcp_url,
                FakeSlack() as slack,
                aiohttp.ClientSession() as http,
            ):
                # As in bench/_slack_app.py: agent sessions are Tier 3 (about 40 calls a
                # minute), and each trial would make four; they are not what is measured.
                slack.make_unknown("agents.sessions.setStatus")
                config = Path(tmp) / "mcp.json"
                entry = {"url": mcp_url, "approval": "always"}
                config.write_text(json.dumps({"mcpServers": {"notes": entry}}))
                cluster = Cluster(
                    slack,
                    llm.base_url(),
                    url,
                    Path(tmp),
                    http,
                    busy_loop_lag_ms=APP_BUSY_LOOP_LAG_MS,
                )
                try:
                    a, b = await cluster.start("a", "b", MCP_CONFIG=str(config))
                    for i in range(3):  # warm-up: connections, first imports
                        await one_trial(cluster, llm, fake, a, a, f"W{i}")
                    same = [
                        await one_trial(cluster, llm, fake, a, a, f"S{i}") for i in range(trials)
                    ]
                    other = [
                        await one_trial(cluster, llm, fake, a, b, f"O{i}") for i in range(trials)
                    ]
                    # Fewer: a sub-agent's run makes more Slack writes (its section in the
                    # status), which pile up behind chat.update's budget until runs queue.
                    sub_agents = [
                        await one_trial(cluster, llm, fake, a, b, f"D{i}", sub_agent=True)
                        for i in range(max(1, trials // 4))
                    ]
                finally:
                    await cluster.close()
                    kill_leftovers()
    rows = [
        Row(
            "Approve -> call at the MCP server, same worker",
            same,
            "ms",
            TARGETS_MS["same"],
            target_id="approval_call_same",
        ),
        Row(
            "Approve -> call at the MCP server, other worker (PostgreSQL)",
            other,
            "ms",
            TARGETS_MS["other"],
            target_id="approval_call_other",
        ),
        Row(
            "Approve -> a sub-agent's call at the MCP server, other worker (PostgreSQL)",
            sub_agents,
            "ms",
            TARGETS_MS["other"],
            target_id="approval_call_other",
        ),
    ]
    print_table(
        "approval_call: an Approve click -> the approved call reaches the MCP server",
        rows,
        [
            f"{trials} trials each ({max(1, trials // 4)} for the sub-agent), one at a time; "
            "worker A owns every run; the click goes to A (same worker) or B (other worker); "
            "sub-agent: the run delegates the call",
            "workers: real python -m bot (HTTP, PostgreSQL, LEASE_TTL 3 s); fake Slack, "
            "llmock and the MCP server (streamable HTTP) in this process",
            machine_line(),
            revision_line(),
        ],
    )
    return all(r.verdict == "PASS" for r in rows)


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "approval_call")
    p.add_argument("--trials", type=int, default=100)
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials))


if __name__ == "__main__":
    main()
