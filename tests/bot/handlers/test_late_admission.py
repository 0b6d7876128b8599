"""A mention whose run cannot be recorded before the ack is recorded after it (issue 28,
item 2: no mention lost to a database blip).

The app runs for real (tests/bot harness) on its SQLite file; the admission of a run
fails, as in a blip (a :class:`StorageError`, what every adapter raises when the database
does not answer), until the test ends the blip. Before, the mention was acked and the
thread told "Please mention me again in a minute" at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pytest

from agent_core import RunRecord, StorageError, ThreadKey
from bot import messages
from bot.handlers import late_admissions
from bot.process import app as app_module
from tests.bot.harness import WAIT_S, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_WORKSPACE
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core import Admission
    from agent_core.ports import Store
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot


class Blip:
    """While :attr:`on`, every admission of a run fails; the tries are counted."""

    def __init__(self) -> None:
        self.on = True
        self.failed = 0
        self.changes = Changes()


class BlippingStore:
    def __init__(self, inner: Store, blip: Blip) -> None:
        self._inner = inner
        self._blip = blip

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def admit_run(self, run: RunRecord, *, limit: int | None) -> Admission:
        if self._blip.on:
            self._blip.failed += 1
            self._blip.changes.notify()
            raise StorageError("PostgreSQL could not admit a run: connection lost")
        return await self._inner.admit_run(run, limit=limit)


@pytest.fixture
def blip(monkeypatch: pytest.MonkeyPatch) -> Blip:
    shared = Blip()
    real_open = app_module._open_store

    async def open_blipping(database_url: str, *options: Any) -> Store:
        return cast("Store", BlippingStore(await real_open(database_url, *options), shared))

    monkeypatch.setattr(app_module, "_open_store", open_blipping)
    return shared


def said_not_recorded(bot: Bot, thread_ts: str) -> bool:
    return any(
        m.text == messages.RUN_NOT_RECORDED for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts)
    )


async def mention(bot: Bot) -> str:
    envelope = slack_requests.app_mention(f"<@{DEFAULT_WORKSPACE.bot_user_id}> what is up?")
    assert await bot.event(envelope) == 200  # acked within the budget, blip or not
    return str(envelope["event"]["ts"])


async def test_a_mention_met_by_a_blip_starts_its_run_once_the_database_answers(
    make_bot: BotFactory, llm: LLMock, blip: Blip
) -> None:
    bot = await make_bot()
    llm.reply("Answered after the blip.")
    thread_ts = await mention(bot)

    # The blip lasts several tries after the ack: the thread is not told to ask again.
    await blip.changes.until(
        lambda: blip.failed >= 4, timeout=WAIT_S, describe=lambda: f"{blip.failed} tries"
    )
    assert not said_not_recorded(bot, thread_ts)
    blip.on = False

    status = await bot.status_message(DEFAULT_CHANNEL, thread_ts)
    final = await bot.until(status, is_final)
    assert "Answered after the blip." in str(final.text) + str(final.blocks)
    assert not said_not_recorded(bot, thread_ts)
    assert bot.app.ctx is not None
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
    assert len(await bot.app.ctx.store.find_runs(thread=thread)) == 1


async def test_a_blip_longer_than_the_retry_time_gets_the_honest_message(
    make_bot: BotFactory, llm: LLMock, blip: Blip, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(late_admissions, "RECORD_RETRY_S", 1.0)
    bot = await make_bot()
    thread_ts = await mention(bot)

    await bot.slack.wait_until(lambda _: said_not_recorded(bot, thread_ts), timeout=WAIT_S)
    tries = blip.failed
    assert tries >= 3  # tried again after the ack before giving up
    assert bot.app.ctx is not None
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
    assert await bot.app.ctx.store.find_runs(thread=thread) == []
    blip.on = False
    assert llm.requests == []


async def test_shutting_down_during_a_blip_tells_the_thread_and_leaves_nothing_running(
    make_bot: BotFactory, llm: LLMock, blip: Blip
) -> None:
    bot = await make_bot()
    thread_ts = await mention(bot)
    await blip.changes.until(
        lambda: blip.failed >= 2, timeout=WAIT_S, describe=lambda: f"{blip.failed} tries"
    )

    await bot.app.shutdown()  # the late admission first: cancelled, drained, told

    assert said_not_recorded(bot, thread_ts)
    tries = blip.failed
    blip.on = False
    assert blip.failed == tries  # no try after the shutdown
    assert llm.requests == []
