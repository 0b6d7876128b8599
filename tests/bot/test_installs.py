"""OAuth mode end to end: a person installs the app in two workspaces and an Enterprise
Grid organisation through the real install link (a real HTTP client following the
redirects to the fake Slack's authorize page and back), and each workspace's mention runs
with its own installation's token, as the fake Slack records.

The trust gate's rules for several workspaces are not this file's: these tests let
people of any team act (``ALLOW_EXTERNAL_USERS``, ``ALLOW_GUESTS``).
"""

from __future__ import annotations

import socket
import sqlite3
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, urlsplit

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.installs.oauth import INSTALL_PATH, REDIRECT_PATH, STATE_COOKIE
from bot.process.app import ThreadpilotApp
from tests.bot.conftest import bot_settings
from tests.bot.harness import Bot
from tests.fakes import slack_requests
from tests.fakes.slack_oauth import (
    CLIENT_ID,
    CLIENT_SECRET,
    ORG,
    ORG_WORKSPACES,
    TEAM_A,
    TEAM_B,
    Target,
)
from tests.fakes.slack_workspace import DEFAULT_WORKSPACE, Workspace
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

TOKEN_KEY = "3q2-7vJ1cOv3Gq6l0zv0Zk0w7m4ZlJt3o6o2mJ0p1kA="
"""A Fernet key (32 url-safe base64 bytes), for these tests only."""


class OAuthBot(Protocol):
    async def __call__(self, **overrides: Any) -> Bot: ...


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
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
    slack: FakeSlack, llm: LLMock, tmp_path: Path, database: str
) -> AsyncIterator[OAuthBot]:
    """The app in OAuth mode on a port of its own, its redirect URI registered with the
    fake Slack."""
    started: list[ThreadpilotApp] = []
    async with aiohttp.ClientSession() as http:

        async def factory(**overrides: Any) -> Bot:
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
                "DATABASE_URL": database,
                **overrides,
            }
            settings = bot_settings(slack, llm, tmp_path, **values)
            app = ThreadpilotApp(settings, listen_port=port, listen_host="127.0.0.1")
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


def mention_in(team_id: str, channel: str, *, enterprise_id: str | None = None) -> Json:
    """A mention from ``team_id``; with ``enterprise_id``, delivered for an org-wide
    install (``authorizations[0]`` names the enterprise, not the workspace)."""
    envelope = slack_requests.app_mention(
        f"<@{DEFAULT_WORKSPACE.bot_user_id}> what time is it?",
        channel=channel,
        workspace=workspace(team_id),
    )
    if enterprise_id is not None:
        envelope["enterprise_id"] = envelope["context_enterprise_id"] = enterprise_id
        envelope["authorizations"][0].update(
            enterprise_id=enterprise_id, team_id=None, is_enterprise_install=True
        )
    return envelope


async def run_to_the_end(bot: Bot, envelope: Json) -> Message:
    assert await bot.event(envelope) == 200
    event = envelope["event"]
    status = await bot.status_message(event["channel"], event["ts"])
    return await bot.final(status)


def tokens_used_in(slack: FakeSlack, channel: str) -> set[str | None]:
    return {c.token for c in slack.calls() if c.args.get("channel") == channel}


async def test_each_workspace_and_the_org_run_with_their_own_installation(
    oauth_bot: Bot, llm: LLMock
) -> None:
    slack = oauth_bot.slack
    for target in (TEAM_A, TEAM_B, ORG):
        status, page = await install(oauth_bot, target)
        assert status == 200, page
        assert "is now installed" in page
    llm.reply("It is noon.")
    llm.reply("It is noon in B.")
    llm.reply("It is noon in the org.")
    llm.reply("It is noon in the org's other workspace.")

    assert TEAM_A.team_id is not None and TEAM_B.team_id is not None
    await run_to_the_end(oauth_bot, mention_in(TEAM_A.team_id, "C0TEAMA0001"))
    await run_to_the_end(oauth_bot, mention_in(TEAM_B.team_id, "C0TEAMB0001"))
    for i, team in enumerate(ORG_WORKSPACES):
        channel = f"C0ORGW{i}0001"
        await run_to_the_end(oauth_bot, mention_in(team, channel, enterprise_id=ORG.enterprise_id))
        assert tokens_used_in(slack, channel) == {slack.oauth.current_token(ORG)}

    assert tokens_used_in(slack, "C0TEAMA0001") == {slack.oauth.current_token(TEAM_A)}
    assert tokens_used_in(slack, "C0TEAMB0001") == {slack.oauth.current_token(TEAM_B)}
    # Found from the installations, never asked per request.
    assert [c.token for c in slack.calls("auth.test")] == [
        slack.oauth.current_token(t) for t in (TEAM_A, TEAM_B, ORG)
    ]


async def test_the_authorize_link_carries_the_client_scopes_and_redirect(oauth_bot: Bot) -> None:
    await install(oauth_bot, TEAM_A)

    (asked,) = oauth_bot.slack.oauth.authorize_requests
    assert asked["client_id"] == CLIENT_ID
    assert asked["scope"].split(",")[:2] == ["app_mentions:read", "chat:write"]
    assert asked["redirect_uri"] == f"{oauth_bot.url}{REDIRECT_PATH}"
    (exchange,) = oauth_bot.slack.calls("oauth.v2.access")
    assert exchange.args["redirect_uri"] == asked["redirect_uri"]


async def test_a_reinstall_replaces_the_installation_and_its_token(
    oauth_bot: Bot, llm: LLMock
) -> None:
    slack = oauth_bot.slack
    await install(oauth_bot, TEAM_A)
    first = slack.oauth.current_token(TEAM_A)
    slack.oauth.revoke(TEAM_A)
    await install(oauth_bot, TEAM_A)
    second = slack.oauth.current_token(TEAM_A)
    assert second != first
    llm.reply("Fine.")

    assert TEAM_A.team_id is not None
    # Within the cache's time: this worker forgot the old installation when it saved the new.
    await run_to_the_end(oauth_bot, mention_in(TEAM_A.team_id, "C0TEAMA0001"))

    assert tokens_used_in(slack, "C0TEAMA0001") == {second}


async def test_a_team_without_an_installation_gets_nothing_done(oauth_bot: Bot) -> None:
    slack = oauth_bot.slack
    await install(oauth_bot, TEAM_A)
    before = len(slack.calls())

    assert await oauth_bot.event(mention_in("T0TPNOBODY1", "C0NOBODY001")) == 200

    assert slack.calls()[before:] == []


async def test_an_uninstalled_team_is_forgotten_at_once(oauth_bot: Bot) -> None:
    slack = oauth_bot.slack
    await install(oauth_bot, TEAM_A)
    assert oauth_bot.app._installs is not None
    store = oauth_bot.app._installs.store
    assert TEAM_A.team_id is not None
    assert await store.async_find_installation(enterprise_id=None, team_id=TEAM_A.team_id)

    await store.async_delete_installation(enterprise_id=None, team_id=TEAM_A.team_id)
    before = len(slack.calls())
    assert await oauth_bot.event(mention_in(TEAM_A.team_id, "C0TEAMA0001")) == 200

    assert slack.calls()[before:] == []


async def test_tokens_are_encrypted_at_rest(oauth_bot: Bot, database: str) -> None:
    await install(oauth_bot, TEAM_A)
    token = oauth_bot.slack.oauth.current_token(TEAM_A)

    read = "SELECT secret FROM installations"
    if database.startswith("sqlite"):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as db:
            (secret,) = db.execute(read).fetchone()
    else:
        conn = await asyncpg.connect(database)
        try:
            secret = await conn.fetchval(read)
        finally:
            await conn.close()
    assert secret.startswith("fernet:")
    assert token not in secret


# -- the redirect's refusals --------------------------------------------------------------


async def started_install(bot: Bot, browser: aiohttp.ClientSession) -> str:
    """Open the install link without following it: the state Slack would be sent with."""
    async with browser.get(f"{bot.url}{INSTALL_PATH}", allow_redirects=False) as response:
        assert response.status == 302
        location = response.headers["Location"]
    (state,) = parse_qs(urlsplit(location).query)["state"]
    return state


async def redirect(bot: Bot, browser: aiohttp.ClientSession, **query: str) -> tuple[int, str]:
    async with browser.get(f"{bot.url}{REDIRECT_PATH}", params=query) as response:
        return response.status, await response.text()


async def test_a_redirect_from_another_browser_is_refused_before_any_exchange(
    oauth_bot: Bot,
) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as mine, aiohttp.ClientSession() as other:
        state = await started_install(oauth_bot, mine)
        status, page = await redirect(oauth_bot, other, code="code-x", state=state)

    assert status == 400
    assert "not opened from this browser" in page
    assert oauth_bot.slack.calls("oauth.v2.access") == []


async def test_an_altered_state_is_refused(oauth_bot: Bot) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        await started_install(oauth_bot, browser)
        forged = "abc.1700000000.forged"
        jar.update_cookies({STATE_COOKIE: forged})
        status, page = await redirect(oauth_bot, browser, code="code-x", state=forged)

    assert status == 400
    assert "not opened from this browser" in page
    assert oauth_bot.slack.calls("oauth.v2.access") == []


async def test_a_reused_state_is_refused_and_installs_nothing_more(oauth_bot: Bot) -> None:
    oauth_bot.slack.oauth.approve_next(TEAM_A)
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        async with browser.get(f"{oauth_bot.url}{INSTALL_PATH}") as page:
            assert page.status == 200
            landed = page.url
        cookie = parse_qs(landed.query_string)["state"][0]
        jar.update_cookies({STATE_COOKIE: cookie})  # the browser goes back and reloads
        async with browser.get(landed) as again:
            status, text = again.status, await again.text()

    assert status == 400
    assert "already used" in text
    assert len(oauth_bot.slack.calls("oauth.v2.access")) == 1


async def test_a_refused_code_says_so(oauth_bot: Bot) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        state = await started_install(oauth_bot, browser)
        status, page = await redirect(oauth_bot, browser, code="code-never-issued", state=state)

    assert status == 400
    assert "Slack refused to complete the installation (invalid_code)" in page


async def test_a_person_who_does_not_allow_the_app_is_told_nothing_was_installed(
    oauth_bot: Bot,
) -> None:
    oauth_bot.slack.oauth.deny_next()
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser,
        browser.get(f"{oauth_bot.url}{INSTALL_PATH}") as page,
    ):
        status, text = page.status, await page.text()

    assert status == 400
    assert "access_denied" in text
    assert oauth_bot.slack.calls("oauth.v2.access") == []


async def test_socket_mode_serves_the_install_routes_on_port(
    make_oauth_bot: OAuthBot, llm: LLMock
) -> None:
    bot = await make_oauth_bot(SLACK_APP_TOKEN="xapp-test-token", SLACK_SIGNING_SECRET=None)

    status, page = await install(bot, TEAM_B)

    assert status == 200, page
    assert TEAM_B.team_id is not None
    llm.reply("Over the socket.")
    envelope = mention_in(TEAM_B.team_id, "C0TEAMB0001")
    await bot.socket_event(envelope)
    message = await bot.status_message("C0TEAMB0001", envelope["event"]["ts"])
    await bot.final(message)
    assert tokens_used_in(bot.slack, "C0TEAMB0001") == {bot.slack.oauth.current_token(TEAM_B)}
