"""Races between the ways a run can end, forced many times: whatever wins, a run has
exactly one terminal state in the database and its status message gets exactly one
terminal report (docs/architecture.md: terminal state by compare-and-set, the final Slack
message rendered from it).

These run two real :class:`ThreadpilotApp` workers in the test process (each with its
own HTTP port, database connections, stop watcher and reconciler) on one database,
rather than subprocesses: starting a worker costs ~50 ms here instead of ~1.5 s, and the
abort-vs-shutdown race starts a fresh owner every iteration. Slack's rate tiers are
lifted for them (the budget is tested in ``tests/bot``); at the real Tier 2/3 pace, 20
runs per race would spend most of their time queued behind ``chat.update``.

Which side wins varies from one iteration to the next (the model's stall, the clicking
worker and the order of the racers change); each test prints the outcomes it saw. A
click committed just as its run ends can be left pending by the owner: the test also
checks that the workers' reconcilers settle such requests.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from llmock.scenarios import Reply, StreamFault

from agent_core import TERMINAL_STATES
from bot.config.settings import Settings
from bot.messages import slack_outcome_label
from bot.process.app import ThreadpilotApp
from bot.slack_api import rate_limits as slack_limits
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, SECRET, Bot, run_id_of, stalled_answer
from tests.system.blocks import final_revisions, revision_text
from tests.system.workers import LEASE_TTL_S, until, until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message

pytestmark = pytest.mark.slow

ITERATIONS = 20
UNTHROTTLED_PER_MINUTE = 60_000.0
_SLACK_METHODS = (
    "chat.postMessage",
    "chat.update",
    "chat.postEphemeral",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "agents.sessions.setStatus",
)


@dataclass(frozen=True)
class Ran:
    """A run a race was played on: its id and its status message."""

    run_id: str
    status: Message


class Workers:
    """In-process workers on one database; ``start`` the same name again after a
    shutdown to restart it (same WORKER_ID)."""

    def __init__(self, slack: FakeSlack, llm: LLMock, url: str, http: aiohttp.ClientSession):
        self._slack, self._llm, self._url, self._http = slack, llm, url, http
        self.started: list[ThreadpilotApp] = []

    async def start(self, name: str) -> Bot:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            SLACK_BOT_TOKEN="xoxb-test-token",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=self._slack.api_url,
            OPENAI_API_KEY="test-key",
            OPENAI_BASE_URL=self._llm.base_url(),
            OPENAI_MODEL="test-model",
            DATABASE_URL=self._url,
            WORKER_ID=name,
            LEASE_TTL=LEASE_TTL_S,
            STOP_POLL_INTERVAL=0.05,
            # A shutdown-blocked run would be resumed by the surviving worker: a second,
            # legitimate, ending that this test does not want to tell apart.
            AUTO_RESUME_ON_RESTART=False,
            LOG_LEVEL="WARNING",
        )
        app = ThreadpilotApp(settings, listen_port=0, listen_host="127.0.0.1")
        self.started.append(app)
        await app.start()
        return Bot(app, self._slack, self._http)

    async def shutdown(self, worker: Bot) -> None:
        self.started.remove(worker.app)
        await worker.app.shutdown()

    async def shutdown_all(self) -> None:
        started, self.started = self.started, []
        for app in started:
            await app.shutdown()


@pytest.fixture
async def workers(
    slack: FakeSlack, llm: LLMock, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Workers]:
    for method in _SLACK_METHODS:
        monkeypatch.setitem(slack_limits.LIMITS_PER_MINUTE, method, UNTHROTTLED_PER_MINUTE)
    async with aiohttp.ClientSession() as http:
        started = Workers(slack, llm, database_url, http)
        try:
            yield started
        finally:
            await started.shutdown_all()


async def check_one_ending(store: Store, slack: FakeSlack, ran: Ran) -> str:
    """One terminal state, recorded once, and one terminal report that says it; the label."""
    record = await store.get_run(ran.run_id)
    assert record is not None and record.state in TERMINAL_STATES, record
    assert record.outcome is not None
    endings = [
        e
        for e in await store.events_for(ran.run_id)
        if e.kind == "run.takeover" or (e.kind == "run.finished" and e.detail.get("recorded"))
    ]
    assert len(endings) == 1, endings
    message = slack.message(ran.status.channel, ran.status.ts)
    finals = final_revisions(message)
    assert len(finals) == 1, [revision_text(r) for r in finals]
    assert finals[0] == message.history[-1]  # nothing was written over it
    label = slack_outcome_label(
        record.outcome,
        stop_reason=record.stop_reason,
        exit_code=record.exit_code,
        stopped_by=record.stopped_by,
    )
    assert label in revision_text(finals[0])
    return label


async def check_all(
    workers: Workers, store: Store, slack: FakeSlack, runs: list[Ran], race: str
) -> None:
    # A click committed as the run ended may be left pending by the owner; a worker's
    # reconciler settles it (they are never purged otherwise). Checked while one runs.
    async def settled() -> bool:
        return not await store.pending_stop_requests([r.run_id for r in runs])

    await until_async(settled, what="no stop request left pending", timeout=3 * LEASE_TTL_S)
    await workers.shutdown_all()  # and with that, every Slack write is flushed
    outcomes = Counter([await check_one_ending(store, slack, ran) for ran in runs])
    print(f"{race}: {dict(outcomes)}")


async def start_run(owner: Bot, text: str) -> Ran:
    _, status = await owner.mention(text)
    return Ran(run_id_of(status), status)


async def race(*racers: Callable[[], Awaitable[Any]]) -> None:
    """Start the racers in this order, with no await in between, and wait for all."""
    await asyncio.gather(*(racer() for racer in racers))


async def test_stop_against_the_runs_own_completion(
    workers: Workers, store: Store, slack: FakeSlack, llm: LLMock
) -> None:
    a, b = await workers.start("a"), await workers.start("b")
    runs = []
    for i in range(ITERATIONS):
        # The answer completes 0-80 ms after it starts, about when the stop arrives
        # (clicked on the owner, or on b and delivered by its poll).
        stall = StreamFault("stall", after_chunks=1, stall_seconds=(i % 5) * 0.02)
        llm.add(Reply(text=f"Answer number {i}."), stall)
        ran = await start_run(a, f"task {i}")
        clicker = (a, b)[i % 2]
        await clicker.click_version(ran.status, ACTION_STOP)
        await a.final(ran.status)
        runs.append(ran)

    await check_all(workers, store, slack, runs, "stop vs completion")


async def test_stop_against_abort(
    workers: Workers, store: Store, slack: FakeSlack, llm: LLMock
) -> None:
    a, b = await workers.start("a"), await workers.start("b")
    runs = []
    for i in range(ITERATIONS):
        llm.add(*stalled_answer((i % 5) * 0.02, with_tool=False))
        ran = await start_run(a, f"task {i}")
        stopper, aborter = [(a, b), (b, a), (a, a), (b, b)][i % 4]
        stop = partial(stopper.click_version, ran.status, ACTION_STOP)
        abort = partial(aborter.click_version, ran.status, ACTION_ABORT)
        await (race(stop, abort) if i % 8 < 4 else race(abort, stop))
        await a.final(ran.status)
        runs.append(ran)

    await check_all(workers, store, slack, runs, "stop vs abort")


async def test_abort_against_the_owners_shutdown(
    workers: Workers, store: Store, slack: FakeSlack, llm: LLMock, journal: Journal
) -> None:
    b = await workers.start("b")
    runs = []
    for i in range(ITERATIONS):
        a = await workers.start("a")  # the same worker, restarted each time
        llm.add(*stalled_answer(10.0, with_tool=False))
        ran = await start_run(a, f"task {i}")
        await until(lambda: journal.in_flight == 1, what=f"run {i}'s model stream")
        clicker = (a, b)[i % 2]
        abort = partial(clicker.click_version, ran.status, ACTION_ABORT)
        shutdown = partial(workers.shutdown, a)
        if i % 4 < 2:
            # The click is acknowledged first: applied at once by the owner (a), or
            # committed by b and not yet seen by a, whose shutdown races its delivery.
            await abort()
            await shutdown()
        else:
            await (race(abort, shutdown) if i % 8 < 6 else race(shutdown, abort))
        runs.append(ran)

    await check_all(workers, store, slack, runs, "abort vs shutdown")
