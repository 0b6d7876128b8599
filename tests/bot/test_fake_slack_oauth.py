"""The fake Slack's OAuth side behaves as Slack does where the app depends on it: a code
works once, a refresh token works once (the old access token lives until it expires),
revoked and expired tokens are refused, and each call's token is recorded."""

from __future__ import annotations

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.installs.oauth import oauth_v2_access
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_oauth import CLIENT_ID, CLIENT_SECRET, ORG, TEAM_A, FakeOAuth, Target


async def code_for(slack: FakeSlack, http: aiohttp.ClientSession, target: Target) -> str:
    slack.oauth.approve_next(target)
    authorize = f"{slack.url}oauth/v2/authorize"
    query = {"client_id": CLIENT_ID, "state": "s1", "redirect_uri": "http://app/cb"}
    async with http.get(authorize, params=query, allow_redirects=False) as answer:
        assert answer.status == 302
        location = answer.headers["Location"]
    assert location.startswith("http://app/cb?")
    assert "state=s1" in location
    return location.split("code=")[1].split("&")[0]


async def test_codes_and_refresh_tokens_work_once() -> None:
    async with (
        FakeSlack(oauth=FakeOAuth(rotation=True, expires_in=3600)) as slack,
        aiohttp.ClientSession() as http,
    ):
        client = AsyncWebClient(base_url=slack.api_url, session=http)
        code = await code_for(slack, http, ORG)
        answer = await oauth_v2_access(client, CLIENT_ID, CLIENT_SECRET, {"code": code})
        assert answer["is_enterprise_install"] is True
        assert answer["team"] is None
        assert answer["enterprise"]["id"] == ORG.enterprise_id
        with pytest.raises(SlackApiError, match="invalid_code"):
            await oauth_v2_access(client, CLIENT_ID, CLIENT_SECRET, {"code": code})

        refresh = {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"]}
        renewed = await oauth_v2_access(client, CLIENT_ID, CLIENT_SECRET, refresh)
        assert renewed["access_token"] != answer["access_token"]
        with pytest.raises(SlackApiError, match="invalid_refresh_token"):
            await oauth_v2_access(client, CLIENT_ID, CLIENT_SECRET, refresh)

        # Both access tokens work until they expire; the calls record which was used.
        for token in (answer["access_token"], renewed["access_token"]):
            await client.auth_test(token=token)
        assert [c.token for c in slack.calls("auth.test")] == [
            answer["access_token"],
            renewed["access_token"],
        ]


async def test_revoked_tokens_are_refused() -> None:
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        client = AsyncWebClient(base_url=slack.api_url, session=http)
        code = await code_for(slack, http, TEAM_A)
        answer = await oauth_v2_access(client, CLIENT_ID, CLIENT_SECRET, {"code": code})
        token = answer["access_token"]
        assert "refresh_token" not in answer  # rotation off

        slack.oauth.revoke(TEAM_A)

        with pytest.raises(SlackApiError, match="token_revoked"):
            await client.chat_postMessage(token=token, channel="C1", text="hi")


async def test_a_wrong_client_secret_is_refused() -> None:
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        client = AsyncWebClient(base_url=slack.api_url, session=http)
        code = await code_for(slack, http, TEAM_A)
        with pytest.raises(SlackApiError, match="invalid_client_id"):
            await oauth_v2_access(client, CLIENT_ID, "wrong", {"code": code})
