"""OAuth mode end to end: a person installs the app in two workspaces and an Enterprise
Grid organisation through the real install link (a real HTTP client following the
redirects to the fake Slack's authorize page and back), and each workspace's mention runs
with its own installation's token, as the fake Slack records.

Most tests here let people of any team act (``ALLOW_EXTERNAL_USERS``, ``ALLOW_GUESTS``);
the last keeps the trust rules on, as an admin would, across the installed workspaces.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import asyncpg  # type: ignore[import-untyped]

from bot import messages
from bot.installs.oauth import INSTALL_PATH, REDIRECT_PATH, STATE_COOKIE
from tests.bot.harness import ACTION_STOP, SECRET, WAIT_S, block_text, stalled_answer
from tests.bot.oauth_harness import (
    install,
    mention_in,
    run_to_the_end,
    tokens_used_in,
    workspace,
)
from tests.fakes import slack_requests
from tests.fakes.slack_oauth import CLIENT_ID, ORG, ORG_WORKSPACES, TEAM_A, TEAM_B, Target

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.harness import Bot
    from tests.bot.oauth_harness import OAuthBot


STALL_S = 3.0
"""The first step's stall in a click test: long enough for the clicks to land in it."""


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
    await run_to_the_end(oauth_bot, mention_in(TEAM_A, "C0TEAMA0001"))
    await run_to_the_end(oauth_bot, mention_in(TEAM_B, "C0TEAMB0001"))
    for i, team in enumerate(ORG_WORKSPACES):
        channel = f"C0ORGW{i}0001"
        await run_to_the_end(oauth_bot, mention_in(ORG, channel, team_id=team))
        assert tokens_used_in(slack, channel) == {slack.oauth.current_token(ORG)}

    assert tokens_used_in(slack, "C0TEAMA0001") == {slack.oauth.current_token(TEAM_A)}
    assert tokens_used_in(slack, "C0TEAMB0001") == {slack.oauth.current_token(TEAM_B)}
    # Each workspace's own bot user was recognised in its mention: the model got the task.
    asked = [_last_user_text(r.body or {}) for r in llm.requests]
    assert asked == ["what time is it?"] * 4
    # Found from the installations, never asked per request.
    assert [c.token for c in slack.calls("auth.test")] == [
        slack.oauth.current_token(t) for t in (TEAM_A, TEAM_B, ORG)
    ]


def _last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1]["content"]
    return content if isinstance(content, str) else " ".join(p["text"] for p in content)


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
    await run_to_the_end(oauth_bot, mention_in(TEAM_A, "C0TEAMA0001"))

    assert tokens_used_in(slack, "C0TEAMA0001") == {second}


async def test_a_team_without_an_installation_gets_nothing_done(oauth_bot: Bot) -> None:
    slack = oauth_bot.slack
    await install(oauth_bot, TEAM_A)
    before = len(slack.calls())

    assert await oauth_bot.event(mention_in(Target("T0TPNOBODY1", "Nobody"), "C0NOBODY001")) == 200

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
    assert await oauth_bot.event(mention_in(TEAM_A, "C0TEAMA0001")) == 200

    assert slack.calls()[before:] == []


async def test_tokens_are_encrypted_at_rest(oauth_bot: Bot, oauth_database: str) -> None:
    await install(oauth_bot, TEAM_A)
    token = oauth_bot.slack.oauth.current_token(TEAM_A)

    read = "SELECT secret FROM installations"
    if oauth_database.startswith("sqlite"):
        with sqlite3.connect(oauth_database.removeprefix("sqlite:///")) as db:
            (secret,) = db.execute(read).fetchone()
    else:
        conn = await asyncpg.connect(oauth_database)
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
    envelope = mention_in(TEAM_B, "C0TEAMB0001")
    await bot.socket_event(envelope)
    message = await bot.status_message("C0TEAMB0001", envelope["event"]["ts"])
    await bot.final(message)
    assert tokens_used_in(bot.slack, "C0TEAMB0001") == {bot.slack.oauth.current_token(TEAM_B)}


async def test_a_click_is_authorised_from_its_workspaces_installation(
    oauth_bot: Bot, llm: LLMock
) -> None:
    slack = oauth_bot.slack
    await install(oauth_bot, TEAM_B)
    # The clicks land while the first step streams (its stall); the Stop's final turn
    # answers after it.
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Stopped: it was noon.")
    envelope = mention_in(TEAM_B, "C0TEAMB0001")
    assert await oauth_bot.event(envelope) == 200
    status = await oauth_bot.status_message("C0TEAMB0001", envelope["event"]["ts"])
    await slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    assert TEAM_B.team_id is not None
    from_b = replace(
        workspace(TEAM_B.team_id), bot_user_id=TEAM_B.bot_user_id, bot_id=TEAM_B.bot_id
    )

    # A click from a workspace the app is not installed in changes nothing.
    stranger = slack_requests.click_button(
        slack.message(status.channel, status.ts),
        ACTION_STOP,
        response_url=slack.new_response_url(status.channel, status.ts),
        workspace=workspace("T0TPNOBODY1"),
    )
    assert (
        await oauth_bot.post(slack_requests.interaction_request(stranger, SECRET))
    ).status == 200
    assert oauth_bot.live_run(status) is not None

    click = slack_requests.click_button(
        slack.message(status.channel, status.ts),
        ACTION_STOP,
        response_url=slack.new_response_url(status.channel, status.ts),
        workspace=from_b,
    )
    assert (await oauth_bot.post(slack_requests.interaction_request(click, SECRET))).status == 200
    final = await oauth_bot.final(status)

    assert "stopped" in block_text(final).lower()
    assert tokens_used_in(slack, "C0TEAMB0001") == {slack.oauth.current_token(TEAM_B)}


async def test_oauth_mode_keeps_the_trust_rules_per_workspace(
    make_oauth_bot: OAuthBot, llm: LLMock
) -> None:
    """With the trust rules on (the defaults), each installed workspace's own people, and
    the people of every workspace of an org-wide install, may start runs; someone of
    another installed workspace writing in from Slack Connect is another organisation."""
    bot = await make_oauth_bot(ALLOW_EXTERNAL_USERS=False, ALLOW_GUESTS=False)
    for target in (TEAM_A, TEAM_B, ORG):
        status, page = await install(bot, target)
        assert status == 200, page
    assert TEAM_A.team_id is not None and TEAM_B.team_id is not None
    llm.reply("A's answer.")
    llm.reply("B's answer.")
    llm.reply("The org's answer.")

    for target, channel, team in (
        (TEAM_A, "C0TRUSTA001", TEAM_A.team_id),
        (TEAM_B, "C0TRUSTB001", TEAM_B.team_id),
        (ORG, "C0TRUSTO001", ORG_WORKSPACES[1]),
    ):
        final = await run_to_the_end(bot, mention_in(target, channel, team_id=team))
        assert "answer" in block_text(final)

    stranger = mention_in(TEAM_A, "C0TRUSTA002")
    stranger["event"] |= {"user": "U0FROMB0001", "user_team": TEAM_B.team_id}
    stranger["event"]["source_team"] = TEAM_B.team_id
    assert await bot.event(stranger) == 200
    refused = await bot.ephemerals("U0FROMB0001", channel="C0TRUSTA002")
    assert refused == [messages.EXTERNAL_NOT_ALLOWED]
    assert len(llm.requests) == 3
