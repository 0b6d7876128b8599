"""A mention whose handling fails before Slack is answered is handled when Slack
delivers it again (issue 28, item 1).

The event's key is recorded in the delivery log as the event is taken, before the
handling that can fail. A failure before the ack is answered with an error, so Slack
delivers the event again; that delivery must start the run, exactly once, not be
dropped as a repeat of one that was handled. The store here is the app's real one,
behind a wrapper that makes one database step fail once with an error the handling
does not expect (as asyncpg's use of a released connection did).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import asyncpg  # type: ignore[import-untyped]
import pytest

from agent_core import ThreadKey
from bot.process import app as app_module
from tests.bot.harness import is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_WORKSPACE
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.bot.conftest import BotFactory

STEPS = ["first_delivery", "find_runs", "admit_run"]
"""The database steps of a mention before its ack: the delivery log, the thread's live
runs, the run's admission."""


class FailOnce:
    """The app's real store; ``step`` fails the first time the mention calls it, once
    :attr:`armed` (a thread's runs: read for a thread, not by the reconciler)."""

    def __init__(self, inner: Store, step: str) -> None:
        self._inner = inner
        self._step = step
        self.armed = False
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._inner, name)
        if name != self._step:
            return real

        async def fail_once(*args: Any, **kwargs: Any) -> Any:
            if self.armed and self.failed == 0 and (name != "find_runs" or "thread" in kwargs):
                self.failed += 1
                raise asyncpg.InterfaceError(
                    f"cannot call Connection.{name}(): "
                    "connection has been released back to the pool"
                )
            return await real(*args, **kwargs)

        return fail_once


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    async with fresh_postgres() as url:
        yield {"DATABASE_URL": url}


@pytest.mark.parametrize("step", STEPS)
async def test_a_mention_failed_once_before_the_ack_is_handled_when_delivered_again(
    make_bot: BotFactory,
    llm: LLMock,
    monkeypatch: pytest.MonkeyPatch,
    database: dict[str, str],
    step: str,
) -> None:
    stores: list[FailOnce] = []
    real_open = app_module._open_store

    async def open_failing(database_url: str, *options: Any) -> Store:
        stores.append(FailOnce(await real_open(database_url, *options), step))
        return cast("Store", stores[-1])

    monkeypatch.setattr(app_module, "_open_store", open_failing)
    bot = await make_bot(**database)
    llm.reply("Here is the answer.")
    envelope = slack_requests.app_mention(f"<@{DEFAULT_WORKSPACE.bot_user_id}> what is up?")

    [store] = stores
    store.armed = True
    assert await bot.event(envelope) != 200  # not handled: Slack delivers it again
    assert store.failed == 1
    assert await bot.event(envelope, retry_num=1) == 200

    thread_ts = str(envelope["event"]["ts"])
    status = await bot.status_message(DEFAULT_CHANNEL, thread_ts)
    await bot.until(status, is_final)
    assert [r.completed for r in llm.requests] == [True]  # one run: one model stream
    assert bot.app.ctx is not None
    thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
    assert len(await bot.app.ctx.store.find_runs(thread=thread)) == 1
