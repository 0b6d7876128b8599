"""OAuth mode's test harness: the app installed by OAuth (``make_oauth_bot``) on a
database of each kind (``oauth_database``), and a person installing it through the real
install link with a browser-like HTTP client (:func:`install`).

The fixtures are registered for every test under ``tests/bot`` by its conftest.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import pytest

from bot.installs.oauth import INSTALL_PATH, REDIRECT_PATH
from bot.installs.rotation import ROTATION, RotationTiming
from bot.process.app import ThreadpilotApp
from tests.bot.harness import Bot
from tests.fakes import slack_requests
from tests.fakes.slack_oauth import CLIENT_ID, CLIENT_SECRET, Target
from tests.fakes.slack_workspace import Workspace
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

__all__ = [
    "TOKEN_KEY",
    "OAuthBot",
    "install",
    "make_oauth_bot",
    "mention_in",
    "oauth_database",
    "run_to_the_end",
    "tokens_used_in",
    "workspace",
]

TOKEN_KEY = "3q2-7vJ1cOv3Gq6l0zv0Zk0w7m4ZlJt3o6o2mJ0p1kA="
"""A Fernet key (32 url-safe base64 bytes), for these tests only."""


class OAuthBot(Protocol):
    async def __call__(self, rotation: RotationTiming = ..., **overrides: Any) -> Bot: ...


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def oauth_database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/threadpilot.db"
        return
    async with fresh_postgres() as url:
        yield url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def make_oauth_bot(
    slack: FakeSlack, llm: LLMock, tmp_path: Path, oauth_database: str
) -> AsyncIterator[OAuthBot]:
    """The app in OAuth mode on a port of its own, its redirect URI registered with the
    fake Slack."""
    started: list[ThreadpilotApp] = []
    async with aiohttp.ClientSession() as http:

        async def factory(rotation: RotationTiming = ROTATION, **overrides: Any) -> Bot:
            port = free_port()
            redirect = f"http://127.0.0.1:{port}{REDIRECT_PATH}"
            values: dict[str, Any] = {
                "SLACK_BOT_TOKEN": None,
                "SLACK_CLIENT_ID": CLIENT_ID,
                "SLACK_CLIENT_SECRET": CLIENT_SECRET,
                "SLACK_REDIRECT_URI": redirect,
                "SLACK_TOKEN_KEY": TOKEN_KEY,
                "ALLOW_EXTERNAL_USERS": True,
                "ALLOW_GUESTS": True,
                "DATABASE_URL": oauth_database,
                **overrides,
            }
            # Imported here: the conftest that registers these fixtures defines it.
            from tests.bot.conftest import bot_settings

            settings = bot_settings(slack, llm, tmp_path, **values)
            app = ThreadpilotApp(
                settings, listen_port=port, listen_host="127.0.0.1", rotation=rotation
            )
            started.append(app)
            await app.start()
            slack.oauth.redirect_uris.append(redirect)
            return Bot(app, slack, http)

        yield factory
        for app in started:
            await app.shutdown()


@pytest.fixture
async def oauth_bot(make_oauth_bot: OAuthBot) -> Bot:
    return await make_oauth_bot()


async def install(bot: Bot, target: Target) -> tuple[int, str]:
    """A person opens the install link in a browser and allows the app for ``target``:
    the page they end on."""
    bot.slack.oauth.approve_next(target)
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser,
        browser.get(f"{bot.url}{INSTALL_PATH}") as page,
    ):
        return page.status, await page.text()


def workspace(team_id: str) -> Workspace:
    return Workspace(team_id=team_id, team_domain=team_id.lower())


def mention_in(
    target: Target, channel: str, *, team_id: str | None = None, text: str = "what time is it?"
) -> Json:
    """A mention of the app as installed at ``target``, from ``team_id`` (an org-wide
    install's workspace; else the target's own): ``authorizations[0]`` names the
    installation, the enterprise for an org-wide one."""
    team = team_id or target.team_id
    assert team is not None
    installed = replace(workspace(team), bot_user_id=target.bot_user_id, bot_id=target.bot_id)
    envelope = slack_requests.app_mention(text, channel=channel, workspace=installed)
    if target.org_wide:
        envelope["enterprise_id"] = envelope["context_enterprise_id"] = target.enterprise_id
        envelope["authorizations"][0].update(
            enterprise_id=target.enterprise_id, team_id=None, is_enterprise_install=True
        )
    return envelope


async def run_to_the_end(bot: Bot, envelope: Json) -> Message:
    assert await bot.event(envelope) == 200
    event = envelope["event"]
    status = await bot.status_message(event["channel"], event["ts"])
    return await bot.final(status)


def tokens_used_in(slack: FakeSlack, channel: str) -> set[str | None]:
    return {c.token for c in slack.calls() if c.args.get("channel") == channel}
