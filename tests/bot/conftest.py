"""Fixtures for the Slack app: the fake Slack, the real app wired to it and to llmock, and
for tests of one part on its own, a SQLite store and the workspaces' Slack surfaces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.stores.factory import open_store
from bot.config.settings import Settings
from bot.process.app import ThreadpilotApp
from bot.slack_api.identity import AppIdentity
from bot.slack_api.surface import Workspaces
from tests.bot.harness import SECRET, Bot
from tests.bot.oauth_harness import make_oauth_bot, oauth_bot, oauth_database  # noqa: F401
from tests.fakes.slack_api import FakeSlack

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store


class BotFactory(Protocol):
    async def __call__(self, **settings: Any) -> Bot: ...


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A real SQLite store of the test's own (no app around it)."""
    opened = await open_store(f"sqlite:///{tmp_path}/threadpilot.db")
    yield opened
    await opened.close()


@pytest.fixture
async def workspaces(slack: FakeSlack) -> AsyncIterator[Workspaces]:
    """The workspaces' Slack surfaces, talking to the fake Slack (no app around them)."""
    async with aiohttp.ClientSession() as http:
        client = AsyncWebClient(token="xoxb-test-token", base_url=slack.api_url, session=http)
        me = AppIdentity(
            user_id=slack.workspace.bot_user_id,
            bot_id=slack.workspace.bot_id,
            team_id=slack.workspace.team_id,
        )
        opened = Workspaces(client, me)
        yield opened
        await opened.close()


def bot_settings(slack: FakeSlack, llm: LLMock, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.api_url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": llm.base_url(),
        "OPENAI_MODEL": "test-model",
        "DATABASE_URL": f"sqlite:///{tmp_path}/threadpilot.db",
        "LOG_LEVEL": "DEBUG",
        # Off: this loop also serves the fake Slack and llmock, on a CI machine shared
        # with other jobs; a worker declining new runs for that would hold up tests about
        # other things. tests/bot/observe/test_loop_load.py turns it on.
        "BUSY_LOOP_LAG_MS": 0,
        # Off: most tests are one person asking for many runs at once.
        # tests/bot/runs/test_runs_per_user.py turns it on.
        "MAX_RUNS_PER_USER": 0,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
async def make_bot(slack: FakeSlack, llm: LLMock, tmp_path: Path) -> AsyncIterator[BotFactory]:
    started: list[ThreadpilotApp] = []
    async with aiohttp.ClientSession() as http:

        async def factory(**overrides: Any) -> Bot:
            settings = bot_settings(slack, llm, tmp_path, **overrides)
            app = ThreadpilotApp(settings, listen_port=0, listen_host="127.0.0.1")
            started.append(app)
            await app.start()
            return Bot(app, slack, http)

        yield factory
        for app in started:
            await app.shutdown()


@pytest.fixture
async def bot(make_bot: BotFactory) -> Bot:
    return await make_bot()
