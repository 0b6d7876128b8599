"""A run's lifecycle when the database fails at the wrong moment (issue 7, classes 2, 3, 9).

The app runs for real (tests/bot harness); its store is the real SQLite store behind a
thin wrapper that makes chosen writes fail the way a database blip does (a
:class:`StorageError`, as every adapter raises for a driver error), so each fault hits
exactly the write it is about:

- ghost runs: the terminal write fails once; the run must still end recorded, stop
  being leased, leave its thread free, and stay ended across a restart;
- a live row nobody runs (its lease ran out) must not block its thread;
- a mention whose run cannot be registered gets an honest reply and no half-run;
- a mention from another bot starts nothing;
- stop requests never stay ``requested`` on a run that has ended.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import pytest
from structlog.testing import capture_logs

from agent_core import (
    LIVE_STATES,
    Admission,
    Checkpoint,
    RunRecord,
    RunState,
    StopReason,
    StorageError,
    ThreadKey,
)
from agent_core.run import recording as recording_module
from agent_core.stores.factory import open_store
from agent_core.values.clock import utcnow
from bot import messages
from bot.handlers import late_admissions
from bot.process import app as app_module
from tests.bot.harness import WAIT_S, block_text, buttons, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.fakes.waiting import Changes
from tests.system.conftest import fresh_postgres
from tests.system.workers import until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Collection
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from bot.runs.supervisor import Supervisor
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message

OTHER_BOT_ID = "B0OTHERAPP1"
OTHER_BOT_USER = "U0OTHERBOT1"


# -- the faulty store ------------------------------------------------------------------


@dataclasses.dataclass
class Faults:
    """What the stores the app opens should fail; shared across restarts."""

    terminal_failures_left: int = 0
    """How many more writes of a terminal state fail before reaching the database."""
    terminal_failures: int = 0
    fail_create_run: bool = False
    """The insert that records a new run fails (``create_run``, or ``admit_run``, which a
    mention goes through)."""
    create_run_lands: bool = False
    """With ``fail_create_run``: the insert is done, only its answer is lost."""
    before_terminal_write: Callable[[Store, str], Awaitable[None]] | None = None
    """Runs just before a terminal write reaches the database (a racing click, say)."""
    heartbeats: int = 0
    beats: Changes = dataclasses.field(default_factory=Changes)


class FaultyStore:
    """The app's real store; the writes :class:`Faults` names fail as in a blip."""

    def __init__(self, inner: Store, faults: Faults) -> None:
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def set_state(
        self, run_id: str, new: RunState, *, expected: Collection[RunState], **changes: Any
    ) -> bool:
        faults = self._faults
        if new.is_terminal and faults.before_terminal_write is not None:
            await faults.before_terminal_write(self._inner, run_id)
        if new.is_terminal and faults.terminal_failures_left > 0:
            faults.terminal_failures_left -= 1
            faults.terminal_failures += 1
            raise StorageError("PostgreSQL could not change a run's state: connection lost")
        return await self._inner.set_state(run_id, new, expected=expected, **changes)

    async def create_run(self, run: RunRecord) -> None:
        if self._faults.fail_create_run:
            if self._faults.create_run_lands:
                await self._inner.create_run(run)
            raise StorageError("PostgreSQL could not create a run: connection lost")
        await self._inner.create_run(run)

    async def admit_run(self, run: RunRecord, *, limit: int | None) -> Admission:
        if self._faults.fail_create_run:
            if self._faults.create_run_lands:
                await self._inner.admit_run(run, limit=limit)
            raise StorageError("PostgreSQL could not create a run: connection lost")
        return await self._inner.admit_run(run, limit=limit)

    async def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._inner.heartbeat(*args, **kwargs)
        finally:
            self._faults.heartbeats += 1
            self._faults.beats.notify()


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Faults:
    """Every store the app opens in this test is a :class:`FaultyStore`."""
    shared = Faults()
    real_open = app_module._open_store

    async def open_faulty(database_url: str, *options: Any) -> Store:
        return cast("Store", FaultyStore(await real_open(database_url, *options), shared))

    monkeypatch.setattr(app_module, "_open_store", open_faulty)
    return shared


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    """Settings for the app's database: the harness's SQLite file, or a PostgreSQL
    database of the test's own."""
    if request.param == "sqlite":
        yield {}
        return
    async with fresh_postgres() as url:
        yield {"DATABASE_URL": url}


# -- helpers ---------------------------------------------------------------------------


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


def supervisor_of(bot: Bot) -> Supervisor:
    assert bot.app.ctx is not None
    return bot.app.ctx.supervisor


def thread_key(slack: FakeSlack, thread_ts: str) -> ThreadKey:
    return ThreadKey(slack.workspace.team_id, DEFAULT_CHANNEL, thread_ts)


async def only_run(bot: Bot, thread_ts: str) -> RunRecord:
    runs = await store_of(bot).find_runs(thread=thread_key(bot.slack, thread_ts))
    assert len(runs) == 1, runs
    return runs[0]


async def settled_record(bot: Bot, run_id: str) -> RunRecord:
    """The run's row once its owner is done with it: out of memory, final recorded."""

    async def done() -> RunRecord | None:
        if supervisor_of(bot).get(run_id) is not None:
            return None
        record = await store_of(bot).get_run(run_id)
        return record if record is not None and record.final_posted_at is not None else None

    return await until_async(done, what=f"run {run_id} settled", timeout=WAIT_S)


async def mention_in_thread(bot: Bot, thread_ts: str, text: str, *, known: str) -> Message:
    """@mention the app inside ``thread_ts``; the new status message it posts there.

    ``known`` is the ts of the thread's earlier status message. Fails at once, naming the
    reply, if the app refuses instead (an ephemeral "already working").
    """
    bot_user = bot.slack.workspace.bot_user_id
    envelope = slack_requests.app_mention(f"<@{bot_user}> {text}", thread_ts=thread_ts)
    assert await bot.event(envelope) == 200

    def started_or_refused(slack: FakeSlack) -> Message | list[str] | None:
        refused = bot.ephemerals_for(DEFAULT_USER, DEFAULT_CHANNEL)
        if refused:
            return refused
        for message in slack.thread(DEFAULT_CHANNEL, thread_ts):
            if message.is_bot and message.ts != known and (buttons(message) or is_final(message)):
                return message
        return None

    found = await bot.slack.wait_until(started_or_refused, timeout=WAIT_S)
    assert not isinstance(found, list), f"the mention was refused: {found}"
    assert found is not None
    return found


def writes_to(slack: FakeSlack, message: Message) -> list[str]:
    return [c.method for c in slack.calls() if c.args.get("ts") == message.ts]


# -- class 2: ghost runs ---------------------------------------------------------------


async def test_a_terminal_write_lost_in_a_blip_still_lands_and_frees_the_thread(
    database: dict[str, str], make_bot: BotFactory, llm: LLMock, faults: Faults
) -> None:
    faults.terminal_failures_left = 1  # the run's compare-and-set meets the blip
    bot = await make_bot(LEASE_TTL=3, WORKER_ID="worker-1", **database)
    llm.reply("The answer is 42.")
    thread_ts, status = await bot.mention("what is the answer?")

    final = await bot.final(status)
    assert "The answer is 42" in block_text(final)
    record = await settled_record(bot, (await only_run(bot, thread_ts)).id)
    assert faults.terminal_failures == 1
    assert record.state is RunState.FINISHED  # not a ghost still "running"

    # Two more heartbeats: nothing renews the lease of a run nobody holds.
    beats = faults.heartbeats
    await faults.beats.until(
        lambda: faults.heartbeats >= beats + 2,
        timeout=WAIT_S,
        describe=lambda: f"{faults.heartbeats - beats} heartbeats",
    )
    again = await store_of(bot).get_run(record.id)
    assert again is not None and again.lease_expires_at == record.lease_expires_at

    # The thread is free: a new mention there starts a run, which answers.
    llm.reply("Still 42.")
    second = await mention_in_thread(bot, thread_ts, "and now?", known=status.ts)
    assert "Still 42" in block_text(await bot.final(second))
    runs = await store_of(bot).find_runs(thread=thread_key(bot.slack, thread_ts))
    assert len(runs) == 2
    await settled_record(bot, runs[1].id)

    # A restart (same worker id, so its reconciler looks at this worker's rows at once)
    # neither resumes nor rewrites either run.
    await bot.app.shutdown()
    model_calls = len(llm.requests)
    writes = writes_to(bot.slack, status)
    restarted = await make_bot(LEASE_TTL=3, WORKER_ID="worker-1", **database)

    assert supervisor_of(restarted).live_runs == []
    assert len(llm.requests) == model_calls
    assert writes_to(bot.slack, status) == writes
    assert "The answer is 42" in block_text(bot.slack.message(status.channel, status.ts))
    store = store_of(restarted)
    for run in runs:
        stored = await store.get_run(run.id)
        assert stored is not None and stored.state is RunState.FINISHED
        kinds = [e.kind for e in await store.events_for(run.id)]
        assert "run.resumed" not in kinds and "run.takeover" not in kinds


async def test_a_live_row_whose_lease_ran_out_does_not_block_its_thread(
    bot: Bot, llm: LLMock
) -> None:
    # A run of a worker that is gone (its row still says running; its lease has expired,
    # and no reconciler pass has come round yet).
    store = store_of(bot)
    thread_ts = bot.slack.seed_message(DEFAULT_CHANNEL, "an earlier request")
    ghost = RunRecord(
        id="ghost-run",
        thread=thread_key(bot.slack, thread_ts),
        requester=DEFAULT_USER,
        task="an earlier request",
        state=RunState.RUNNING,
        owner="worker-gone",
        lease_expires_at=utcnow() - timedelta(seconds=5),
        created_at=utcnow() - timedelta(minutes=2),
    )
    await store.create_run(ghost)
    await store.save_checkpoint(
        Checkpoint(ghost.id, 1, ({"role": "user", "content": "an earlier request"},))
    )

    llm.reply("A fresh answer.")
    status = await mention_in_thread(bot, thread_ts, "try again", known="")
    assert "A fresh answer" in block_text(await bot.final(status))

    ended = await store.get_run(ghost.id)
    assert ended is not None and ended.state.is_terminal  # reconciled, not ignored forever
    # The thread has moved on: a later reconciler pass does not resume the old run in it.
    runs = await store.find_runs(thread=thread_key(bot.slack, thread_ts))
    (fresh,) = [r for r in runs if r.id != ghost.id]
    await settled_record(bot, fresh.id)
    assert bot.app.ctx is not None
    await bot.app.ctx.worker.reconciler.run_once()
    assert supervisor_of(bot).live_runs == []
    assert len(llm.requests) == 1
    still = await store.get_run(ghost.id)
    assert still is not None and still.state.is_terminal


async def test_a_run_whose_answer_reached_slack_is_neither_rewritten_nor_resumed(
    make_bot: BotFactory, llm: LLMock, slack: FakeSlack, tmp_path: Path
) -> None:
    # What a lost terminal write used to leave behind: the row says running, but the
    # final message was posted (and recorded as posted). Its worker has since gone.
    thread_ts = slack.seed_message(DEFAULT_CHANNEL, "what is the answer?")
    final_ts = slack.seed_message(
        DEFAULT_CHANNEL,
        "Finished: the answer is 42.",
        user=slack.workspace.bot_user_id,
        thread_ts=thread_ts,
    )
    store = await open_store(f"sqlite:///{tmp_path}/threadpilot.db")
    try:
        await store.create_run(
            RunRecord(
                id="answered-run",
                thread=thread_key(slack, thread_ts),
                requester=DEFAULT_USER,
                task="what is the answer?",
                state=RunState.RUNNING,
                owner="worker-old",
                lease_expires_at=utcnow() - timedelta(seconds=30),
                status_ts=final_ts,
                final_posted_at=utcnow() - timedelta(seconds=40),
            )
        )
        await store.save_checkpoint(
            Checkpoint("answered-run", 1, ({"role": "user", "content": "what is the answer?"},))
        )
    finally:
        await store.close()

    bot = await make_bot()  # its start-up reconciler finds the expired lease

    stored = await store_of(bot).get_run("answered-run")
    assert stored is not None and stored.state.is_terminal
    assert stored.state is not RunState.BLOCKED  # nothing to resume: it had finished
    assert supervisor_of(bot).live_runs == []
    assert llm.requests == []
    assert writes_to(slack, slack.message(DEFAULT_CHANNEL, final_ts)) == []
    assert slack.message(DEFAULT_CHANNEL, final_ts).text == "Finished: the answer is 42."


async def test_a_terminal_write_that_never_lands_is_logged_loudly_and_let_go(
    make_bot: BotFactory, llm: LLMock, faults: Faults, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording_module, "TERMINAL_WRITE_DEADLINE_S", 0.5)
    faults.terminal_failures_left = 1_000_000  # the database never takes it
    bot = await make_bot()
    llm.reply("The answer is 42.")

    with capture_logs() as logs:
        thread_ts, status = await bot.mention("what is the answer?")
        final = await bot.final(status)  # the person still gets the answer
        run_id = (await only_run(bot, thread_ts)).id

        async def let_go() -> bool:
            return supervisor_of(bot).get(run_id) is None

        await until_async(let_go, what="the run leaves memory", timeout=WAIT_S)

    assert "The answer is 42" in block_text(final)
    unrecorded = [e for e in logs if e["event"] == "run.terminal_unrecorded"]
    assert unrecorded and all(e["log_level"] == "critical" for e in unrecorded)
    assert faults.terminal_failures > 2  # retried, not tried once


# -- class 3: a mention that cannot be recorded ----------------------------------------


async def test_a_mention_whose_run_cannot_be_recorded_gets_an_honest_reply(
    make_bot: BotFactory, llm: LLMock, faults: Faults, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tried again after the ack (bot.handlers.late_admissions): the honest reply comes
    # once that time is spent, shortened here.
    monkeypatch.setattr(late_admissions, "RECORD_RETRY_S", 1.0)
    faults.fail_create_run = True
    bot = await make_bot()
    envelope = slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> hello")
    thread_ts = envelope["event"]["ts"]
    assert await bot.event(envelope) == 200

    def bot_posts(slack: FakeSlack) -> list[Message]:
        return [m for m in slack.thread(DEFAULT_CHANNEL, thread_ts) if m.is_bot]

    (reply,) = await bot.slack.wait_until(bot_posts, timeout=WAIT_S)
    assert reply.text == messages.RUN_NOT_RECORDED
    assert not buttons(reply)

    async def gone() -> bool:
        return supervisor_of(bot).live_runs == []

    await until_async(gone, what="no run left in memory", timeout=WAIT_S)
    assert llm.requests == []  # no model call for a run nobody could stop
    assert await store_of(bot).find_runs(thread=thread_key(bot.slack, thread_ts)) == []
    assert len(bot_posts(bot.slack)) == 1

    # Once the database answers again, the same thread works.
    faults.fail_create_run = False
    llm.reply("Hello!")
    status = await mention_in_thread(bot, thread_ts, "hello again", known=reply.ts)
    assert "Hello!" in block_text(await bot.final(status))


async def test_a_mention_whose_row_landed_unseen_is_told_and_never_runs_later(
    make_bot: BotFactory, llm: LLMock, faults: Faults, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tried again after the ack (bot.handlers.late_admissions): the honest reply comes
    # once that time is spent, shortened here.
    monkeypatch.setattr(late_admissions, "RECORD_RETRY_S", 1.0)
    faults.fail_create_run = faults.create_run_lands = True
    bot = await make_bot()
    envelope = slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> hello")
    thread_ts = envelope["event"]["ts"]
    assert await bot.event(envelope) == 200

    def bot_posts(slack: FakeSlack) -> list[Message]:
        return [m for m in slack.thread(DEFAULT_CHANNEL, thread_ts) if m.is_bot]

    (reply,) = await bot.slack.wait_until(bot_posts, timeout=WAIT_S)
    assert reply.text == messages.RUN_NOT_RECORDED

    async def ended() -> bool:
        rows = await store_of(bot).find_runs(thread=thread_key(bot.slack, thread_ts))
        return bool(rows) and all(r.state is RunState.FAILED for r in rows)

    # The rows the person was told about (one per try) are ended, not left to be queued
    # and run later.
    await until_async(ended, what="the unseen row ended", timeout=WAIT_S)
    faults.fail_create_run = False
    assert bot.app.ctx is not None
    later = utcnow() + timedelta(seconds=10)  # its lease long run out
    report = await bot.app.ctx.worker.reconciler.run_once(later)
    assert (report.requeued, report.orphans_ended) == (0, 0)
    assert await store_of(bot).queued_runs() == []
    assert llm.requests == []
    assert len(bot_posts(bot.slack)) == 1


# -- class 9: other bots, stop requests on ended runs ----------------------------------


async def test_an_app_mention_from_another_bot_starts_no_run(bot: Bot, llm: LLMock) -> None:
    bot_user = bot.slack.workspace.bot_user_id
    from_bot = slack_requests.app_mention(f"<@{bot_user}> hello, fellow agent", user=OTHER_BOT_USER)
    from_bot["event"]["bot_id"] = OTHER_BOT_ID
    from_bot["event"]["bot_profile"] = {"id": OTHER_BOT_ID, "name": "another agent"}
    assert await bot.event(from_bot) == 200
    # A person's mention after it: once its run has ended, the bot's had every chance.
    llm.reply("Hi.")
    _, status = await bot.mention("hello")
    await bot.final(status)

    bot_thread = from_bot["event"]["ts"]
    assert [m for m in bot.slack.thread(DEFAULT_CHANNEL, bot_thread) if m.is_bot] == []
    assert await store_of(bot).find_runs(thread=thread_key(bot.slack, bot_thread)) == []
    assert len(llm.requests) == 1
    assert not bot.ephemerals_for(OTHER_BOT_USER, DEFAULT_CHANNEL)


async def test_a_stop_committed_just_after_its_run_ended_is_marked_handled(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply("Done already.")
    thread_ts, status = await bot.mention("quick one")
    await bot.final(status)
    run = await settled_record(bot, (await only_run(bot, thread_ts)).id)

    # A click in another worker read the run while it was live; its commit lands now.
    store = store_of(bot)
    request = await store.add_stop_request(run.id, run.thread, StopReason.STOP, DEFAULT_USER)

    async def handled() -> bool:
        return not await store.pending_stop_requests([run.id])

    # Well inside a reconciler pass (every 10 s here): the owner settles it itself.
    await until_async(handled, what="the late stop request handled", timeout=3.0)
    (stored,) = await store.stop_requests_for(run.id)
    assert stored.id == request.id and stored.handled_at is not None


async def test_a_stop_committed_while_the_reconciler_ends_a_run_is_marked_handled(
    faults: Faults, make_bot: BotFactory
) -> None:
    bot = await make_bot()
    store = store_of(bot)
    thread_ts = bot.slack.seed_message(DEFAULT_CHANNEL, "an earlier request")
    record = RunRecord(
        id="orphan-run",
        thread=thread_key(bot.slack, thread_ts),
        requester=DEFAULT_USER,
        task="an earlier request",
        state=RunState.RUNNING,
        owner="worker-gone",
        lease_expires_at=utcnow() + timedelta(minutes=5),  # no periodic pass touches it
    )
    await store.create_run(record)

    landed: list[str] = []

    async def click_lands(inner: Store, run_id: str) -> None:
        # The click read the run as live; its request commits just before the ending.
        faults.before_terminal_write = None
        request = await inner.add_stop_request(
            run_id, record.thread, StopReason.ABORT, DEFAULT_USER
        )
        landed.append(request.id)

    faults.before_terminal_write = click_lands
    assert bot.app.ctx is not None
    assert await bot.app.ctx.worker.reconciler.end_orphan(record)
    assert len(landed) == 1  # the click did land in between

    ended = await store.get_run(record.id)
    assert ended is not None and ended.state not in LIVE_STATES
    assert await store.pending_stop_requests([record.id]) == []
    assert [r.status for r in await store.stop_requests_for(record.id)] == ["handled"]
