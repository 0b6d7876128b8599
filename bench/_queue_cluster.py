"""What ``bench/queue_share.py`` drives: worker processes on a fresh PostgreSQL database,
mentions spread over workspaces and channels, Stop clicks on the status messages, and
the database and log checks that say every run ended once.

Two Slack details shape the mentions, both imposed by the app's own Slack budget
(``bot/slack_api/rate_budget.py``), not by the queue:

- **One channel per mention.** ``chat.postMessage`` is budgeted at about one a second per
  channel, and a queued run's status message is posted before its row is written. With
  every mention in one channel, the 200-mention trial wrote only 168 rows in 90 s (one
  post a second per worker): the other mentions were waiting their turn to post, not
  lost (all 200 rows were there after 116 s).
- **Several workspaces** (``teams``). The budget is per workspace, and every run writes
  its final message with ``chat.update`` (Tier 3: 40.5 a minute per worker after
  a burst of 7), so one workspace drains at most about 0.7 runs/s per worker whatever the
  queue does. Spreading the mentions over workspaces (as an org-wide install sees them)
  takes Slack's limit out of the measurement; ``teams=1`` shows the Slack-bound rate.

The fake answers ``agents.sessions.setStatus`` with ``unknown_method``, and each
(workspace, worker) pair gets one run alone first (:meth:`QueueBench.warm_up`), so that
the refusal switches the feature off before the others wait for its Tier 3 budget.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import asyncpg  # type: ignore[import-untyped]

from agent_core import RunState
from agent_core.stores.factory import open_store
from bot.views.status import ACTION_ABORT, ACTION_STOP
from tests.bot.harness import SECRET, buttons, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER, DEFAULT_WORKSPACE, Workspace

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from bench._clicker import Clicker
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.system.workers import Cluster, WorkerProcess

__all__ = ["Mention", "QueueBench", "RunCheck", "fresh_database"]

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SEND_CONCURRENCY = 20
ENDINGS = ("run.finished", "run.ended_in_queue")
"""The log lines a run's ending writes: the loop's, or the queue's for a run never started."""


@asynccontextmanager
async def fresh_database() -> AsyncIterator[str]:
    """A database of its own, migrated once before the workers race to; dropped after."""
    name = f"tp_bench_queue_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    try:
        store = await open_store(url)
        await store.close()
        yield url
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@dataclass(frozen=True)
class Mention:
    index: int
    workspace: Workspace
    channel: str
    ts: str

    @property
    def text(self) -> str:
        return f"bench queue task {self.index}"


@dataclass
class RunCheck:
    """What the database and the workers' logs say about the benchmark's threads."""

    rows: int = 0
    ended: int = 0
    live: int = 0
    threads_without_run: int = 0
    threads_with_two: int = 0
    taken_twice: int = 0
    ended_twice: int = 0
    ended_never_logged: int = 0

    @property
    def wrong(self) -> int:
        return (
            self.live
            + self.threads_without_run
            + self.threads_with_two
            + self.taken_twice
            + self.ended_twice
            + self.ended_never_logged
        )

    def line(self) -> str:
        return (
            f"{self.ended} of {self.rows} runs ended, {self.live} still live, "
            f"{self.threads_without_run} mentions without a run, {self.threads_with_two} "
            f"threads with two, {self.taken_twice} taken twice, {self.ended_twice} ended "
            f"twice, {self.ended_never_logged} ended without its log line"
        )


@dataclass
class QueueBench:
    """Mentions, clicks and checks against one :class:`Cluster`."""

    slack: FakeSlack
    cluster: Cluster
    database_url: str
    teams: int
    prefix: str
    clicker: Clicker
    """Sends and times the clicks, away from this process's loop (which serves Slack)."""
    mentions: list[Mention] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    """Mention ts -> its status message ts, once found."""
    clicks_ms: list[float] = field(default_factory=list)
    unanswered: int = 0
    clicked: set[str] = field(default_factory=set)
    """Status message ts of every clicked run."""

    def __post_init__(self) -> None:
        self.workspaces = [
            replace(DEFAULT_WORKSPACE, team_id=f"TQB{t:05d}") for t in range(self.teams)
        ]
        self.slack.make_unknown("agents.sessions.setStatus")

    @property
    def workers(self) -> list[WorkerProcess]:
        return list(self.cluster.workers.values())

    # -- mentions ----------------------------------------------------------------------

    async def mention(self, index: int, worker: WorkerProcess, workspace: Workspace) -> Mention:
        # Warm-up runs (negative index) get channels the checks do not count.
        channel = f"C{self.prefix}{index:05d}" if index >= 0 else f"CW{self.prefix}{-index:05d}"
        text = f"<@{workspace.bot_user_id}> bench queue task {index}"
        envelope = slack_requests.app_mention(text, channel=channel, workspace=workspace)
        ts = str(envelope["event"]["ts"])
        self.slack.seed_message(channel, text, user=DEFAULT_USER, ts=ts)
        mention = Mention(index, workspace, channel, ts)
        self.mentions.append(mention)
        status = await worker.event(envelope)
        if status != 200:
            raise RuntimeError(f"mention refused: HTTP {status}")
        return mention

    async def warm_up(self, *, stalled: bool = False) -> None:
        """One run per (workspace, worker), alone (see the module doc), waited for to its
        end. With ``stalled`` answers, each is aborted once every pair has had its
        ``agents.sessions.setStatus`` refused (it would hold its place otherwise)."""
        pairs = [(w, s) for w in self.workers for s in self.workspaces]
        firsts = await asyncio.gather(
            *(self.mention(-1 - k, worker, space) for k, (worker, space) in enumerate(pairs))
        )
        if stalled:
            await self.slack.wait_until(
                lambda s: len(s.calls("agents.sessions.setStatus")) >= len(pairs) or None,
                timeout=60,
            )
            for mention, (worker, _space) in zip(firsts, pairs, strict=True):
                message = await self.wait_status(mention)
                payload = slack_requests.click_button(
                    message, ACTION_ABORT, user=DEFAULT_USER, workspace=mention.workspace
                )
                await worker.post(slack_requests.interaction_request(payload, SECRET))
        await self.slack.wait_until(
            lambda _s: all(self.final(m) for m in firsts) or None, timeout=90
        )
        self.mentions.clear()
        self.status.clear()

    async def mention_all(self, count: int) -> None:
        """``count`` mentions, round-robin over workers and workspaces, each in a channel
        of its own, ``SEND_CONCURRENCY`` at a time."""
        gate = asyncio.Semaphore(SEND_CONCURRENCY)
        workers = self.workers

        async def one(i: int) -> None:
            async with gate:
                await self.mention(i, workers[i % len(workers)], self.workspaces[i % self.teams])

        await asyncio.gather(*(one(i) for i in range(count)))

    # -- the status messages -----------------------------------------------------------

    def status_message(self, mention: Mention) -> Message | None:
        ts = self.status.get(mention.ts)
        if ts is not None:
            return self.slack.message(mention.channel, ts)
        for message in self.slack.thread(mention.channel, mention.ts):
            if message.is_bot and message.stream is None and message.ts != mention.ts:
                self.status[mention.ts] = message.ts
                return message
        return None

    async def wait_status(self, mention: Mention) -> Message:
        def found(_slack: FakeSlack) -> Message | None:
            return self.status_message(mention)

        message = await self.slack.wait_until(found, timeout=30)
        assert message is not None
        return message

    def final(self, mention: Mention) -> bool:
        message = self.status_message(mention)
        return message is not None and is_final(message)

    def some_clickable(self, *, tries: int = 30) -> tuple[Mention, Message] | None:
        """A run showing Stop now, found among ``tries`` runs picked at random; None if
        none of them does. (:meth:`clickable` reads every run's message, a copy each:
        done every click during the drain, that scan took most of this process's time.)"""
        for mention in random.sample(self.mentions, min(tries, len(self.mentions))):
            message = self._showing_stop(mention)
            if message is not None:
                return mention, message
        return None

    def clickable(self, *, queued: bool | None = None) -> list[tuple[Mention, Message]]:
        """Runs whose status message shows Stop now (only queued ones, or only live)."""
        found = []
        for mention in self.mentions:
            message = self._showing_stop(mention)
            if message is None:
                continue
            if queued is None or queued == ("Queued" in (message.text or "")):
                found.append((mention, message))
        return found

    def _showing_stop(self, mention: Mention) -> Message | None:
        """The run's status message if it shows Stop and has not been clicked."""
        message = self.status_message(mention)
        if message is None or message.ts in self.clicked or ACTION_STOP not in buttons(message):
            return None
        return message

    # -- clicks ------------------------------------------------------------------------

    async def click(self, mention: Mention, message: Message, worker: WorkerProcess) -> float:
        """Stop, as the requester, through ``worker``; ms to the ack (NaN if unanswered)."""
        self.clicked.add(message.ts)
        payload = slack_requests.click_button(
            message, ACTION_STOP, user=DEFAULT_USER, workspace=mention.workspace
        )
        request = slack_requests.interaction_request(payload, SECRET)
        took, status = await self.clicker.post(f"{worker.url}/slack/events", request)
        if status != 200:
            self.unanswered += 1
            return float("nan")
        self.clicks_ms.append(took)
        return took

    # -- checks ------------------------------------------------------------------------

    async def states(self) -> Counter[str]:
        """Run rows by state, for the benchmark's channels only."""
        db = await asyncpg.connect(self.database_url)
        try:
            rows = await db.fetch(
                "SELECT state, count(*) FROM runs WHERE channel LIKE $1 GROUP BY state",
                f"C{self.prefix}%",
            )
        finally:
            await db.close()
        return Counter({str(r[0]): int(r[1]) for r in rows})

    async def check(self) -> RunCheck:
        db = await asyncpg.connect(self.database_url)
        try:
            rows = await db.fetch(
                "SELECT id, channel, thread_ts, state FROM runs WHERE channel LIKE $1",
                f"C{self.prefix}%",
            )
        finally:
            await db.close()
        check = RunCheck(rows=len(rows))
        per_thread: Counter[tuple[str, str]] = Counter()
        for row in rows:
            per_thread[(row["channel"], row["thread_ts"])] += 1
            if RunState(row["state"]).is_terminal:
                check.ended += 1
            else:
                check.live += 1
        wanted = {(m.channel, m.ts) for m in self.mentions}
        check.threads_without_run = sum(1 for t in wanted if per_thread[t] == 0)
        check.threads_with_two = sum(1 for n in per_thread.values() if n > 1)
        ids = {str(r["id"]) for r in rows}
        taken: Counter[str] = Counter()
        ended: Counter[str] = Counter()
        for worker in self.workers:
            for record in worker.logs():
                run_id = record.get("run_id")
                if run_id not in ids:
                    continue
                if record.get("event") == "run.dequeued":
                    taken[run_id] += 1
                elif record.get("event") in ENDINGS:
                    ended[run_id] += 1
        check.taken_twice = sum(1 for n in taken.values() if n > 1)
        check.ended_twice = sum(1 for n in ended.values() if n > 1)
        check.ended_never_logged = check.ended - sum(1 for n in ended.values() if n >= 1)
        return check
