"""HTTP mode that never hears from Slack says so once (bot/process/slack_silence.py).

The shipped manifest turns Socket Mode on; an app run in HTTP mode against it is ready
and receives nothing. No API tells it so: the silence does. The real app, on the fake
Slack and llmock, with a short wait instead of minutes.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from bot.process.app import ThreadpilotApp
from tests.bot.conftest import bot_settings
from tests.bot.harness import SECRET, WAIT_S
from tests.bot.process.test_app_transports import SOCKET_MODE
from tests.fakes import slack_requests

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.fakes.slack_api import FakeSlack

QUIET_S = 0.2


@pytest.fixture
async def start_app(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    started: list[ThreadpilotApp] = []

    async def start(**overrides: Any) -> ThreadpilotApp:
        settings = bot_settings(slack, llm, tmp_path, **overrides)
        app = ThreadpilotApp(
            settings, listen_port=0, listen_host="127.0.0.1", silence_after_s=QUIET_S
        )
        started.append(app)
        await app.start()
        return app

    yield start
    for app in started:
        await app.shutdown()


async def wait_settled(app: ThreadpilotApp) -> None:
    async with asyncio.timeout(WAIT_S):
        await app.silence.settled.wait()


async def post(app: ThreadpilotApp, **options: Any) -> int:
    """Slack's handshake when a Request URL is saved, signed (or ``forged=True``)."""
    request = slack_requests.event_request(
        slack_requests.url_verification("challenge"), SECRET, **options
    )
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{app.port}/slack/events", data=request.body, headers=request.headers
        ) as response,
    ):
        return response.status


async def test_http_mode_that_hears_nothing_warns_once_naming_the_app_token(
    start_app: Callable[..., Any],
) -> None:
    with capture_logs() as logs:
        app = await start_app()
        await wait_settled(app)

    (warning,) = [entry for entry in logs if entry["event"] == "http.no_requests_from_slack"]
    assert warning["log_level"] == "warning"
    assert "Socket Mode is on" in warning["hint"]
    assert "SLACK_APP_TOKEN" in warning["hint"]


async def test_a_request_signed_by_slack_cancels_the_warning(
    start_app: Callable[..., Any],
) -> None:
    with capture_logs() as logs:
        app = await start_app()
        assert await post(app) == 200
        await wait_settled(app)

    assert not app.silence.warned
    assert not [entry for entry in logs if entry["event"] == "http.no_requests_from_slack"]


async def test_a_forged_request_is_not_slack(start_app: Callable[..., Any]) -> None:
    app = await start_app()
    assert await post(app, forged=True) == 401

    await wait_settled(app)
    assert app.silence.warned


async def test_socket_mode_has_nothing_to_warn_about(start_app: Callable[..., Any]) -> None:
    app = await start_app(**SOCKET_MODE)

    assert not app.silence.waiting
    assert not app.silence.settled.is_set()
