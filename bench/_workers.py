"""Real ``python -m bot`` worker processes for the process-level benchmarks.

The system tests' harness (``tests/system/workers.py``): each worker is a process of its
own in HTTP mode, pointed at the fake Slack and llmock (both in this process) and at one
SQLite file in a temporary directory, with ``LEASE_TTL`` 3 s. :func:`workers` yields the
:class:`Cluster`, llmock and the database path; at the end every worker is stopped
(SIGTERM, then SIGKILL after 20 s).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from agent_core.stores.factory import open_store
from bench._llmock import llmock_server
from bot.observe.loop_load import BUSY_LAG_S
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.system.workers import LEASE_TTL_S, Cluster, kill_leftovers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.testing import LLMockServer

    from tests.fakes.slack_messages import Message
    from tests.system.workers import WorkerProcess

__all__ = ["LEASE_TTL_S", "Workers", "alive", "children", "mention", "run_rows", "workers"]


APP_BUSY_LOOP_LAG_MS = f"{BUSY_LAG_S * 1000:g}"
"""``BUSY_LOOP_LAG_MS`` as the app ships it: the system tests' workers turn it off, the
benchmarks measure the app as it is."""


@dataclass(frozen=True)
class Workers:
    cluster: Cluster
    llm: LLMockServer
    database: Path
    dir: Path


@contextlib.asynccontextmanager
async def workers() -> AsyncIterator[Workers]:
    with tempfile.TemporaryDirectory(prefix="threadpilot-bench-") as tmp, llmock_server() as llm:
        database = Path(tmp) / "threadpilot.db"
        store = await open_store(f"sqlite:///{database}")  # migrated once, before workers
        await store.close()
        async with FakeSlack() as slack, aiohttp.ClientSession() as http:
            cluster = Cluster(
                slack,
                llm.base_url(),
                f"sqlite:///{database}",
                Path(tmp),
                http,
                busy_loop_lag_ms=APP_BUSY_LOOP_LAG_MS,
            )
            try:
                yield Workers(cluster, llm, database, Path(tmp))
            finally:
                await cluster.close()
                kill_leftovers()


async def mention(w: Workers, worker: WorkerProcess, text: str, channel: str) -> Message:
    """@mention the app through ``worker`` in ``channel``; the run's status message (its
    ``thread_ts`` is the mention's).

    Each run in a channel of its own, as in ``bench/_slack_app.py``: ``chat.postMessage``
    is budgeted at about one a second per channel."""
    slack = w.cluster.slack
    envelope = slack_requests.app_mention(
        f"<@{slack.workspace.bot_user_id}> {text}", channel=channel
    )
    event = envelope["event"]
    slack.seed_message(channel, event["text"], user=event["user"], ts=event["ts"])
    if await worker.event(envelope) != 200:
        raise RuntimeError(f"mention refused by {worker.name}")
    return await w.cluster.status_message(channel, event["ts"])


def run_rows(database: Path) -> dict[str, tuple[str, str | None]]:
    """Every run's ``(state, owner)``, read with a connection of our own."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return {str(i): (str(s), o) for i, s, o in db.execute("SELECT id, state, owner FROM runs")}


def children(pid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: ppid follows the last ')'.
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    found: list[tuple[int, str]] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                found.append((child, commands[child]))
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (exited, waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
