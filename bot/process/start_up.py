"""What start-up asks of Slack and the network, each step bounded and failing with one
line that names the setting to look at (docs/operations.md, Start-up faults): who the
app is (``auth.test``, proving the bot token), a Socket Mode URL (proving the app-level
token), the port to listen on; and the Socket Mode handler, timing each control's ack."""

from __future__ import annotations

import asyncio
import errno
import time
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError, SlackClientError

from agent_core import ConfigError
from agent_core.values.redact import public_url, redact
from bot.errors import SlackUnreachable
from bot.slack_api.identity import AppIdentity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncApp
    from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.config.settings import Settings
    from bot.observe.metrics import Metrics

__all__ = [
    "OAUTH_IDENTITY",
    "STEP_TIMEOUT_S",
    "TimedSocketMode",
    "authorization",
    "bind",
    "slack_fault",
    "socket_url",
    "step",
    "who_am_i",
]

_T = TypeVar("_T")

STEP_TIMEOUT_S = 8.0
"""Each start-up step that waits on something outside (Slack, the database, the Socket
Mode connection) gets this long: a fault ends start-up well within 15 s."""


class TimedSocketMode(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, timing each control from receipt to its ack; it
    connects at ``url``, the one start-up already got (its token is known to work)."""

    def __init__(
        self, app: AsyncApp, app_token: str, *, url: str, metrics: Metrics, **kwargs: Any
    ) -> None:
        super().__init__(app, app_token, **kwargs)
        self.client.wss_uri = url
        self._metrics = metrics

    async def connected(self) -> bool:
        """Whether the socket is open now (``/readyz`` asks)."""
        return await self.client.is_connected()

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        received, start = time.perf_counter(), time.time()
        response = await run_async_bolt_app(self.app, req)
        await send_async_response(client, req, response, start)
        self._metrics.acked(req.payload, received)


def slack_fault(settings: Settings) -> Callable[[str], Exception]:
    """The error for "Slack cannot be reached": it names ``SLACK_API_URL`` only when the
    operator set it; at the default address the network is what to check."""

    def fault(problem: str) -> Exception:
        if "SLACK_API_URL" in settings.model_fields_set:
            return ConfigError("SLACK_API_URL", problem)
        return SlackUnreachable(problem)

    return fault


async def who_am_i(client: AsyncWebClient, unreachable: Callable[[str], Exception]) -> AppIdentity:
    """The app's ids, which also proves the token works: a clear start-up error if not."""
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        raise ConfigError(
            "SLACK_BOT_TOKEN", f"Slack refused it ({exc.response.get('error')})"
        ) from exc
    except (SlackClientError, aiohttp.ClientError, OSError) as exc:
        raise unreachable(
            f"cannot reach Slack at {public_url(client.base_url)} ({redact(str(exc))})"
        ) from exc
    return AppIdentity.from_auth_test(auth.data if isinstance(auth.data, dict) else {})


OAUTH_IDENTITY = AppIdentity(user_id="", bot_id="")
"""OAuth mode's process-wide identity: none (each workspace's bot user is in its
installation, and Bolt's authorization carries it per request)."""


def authorization(me: AppIdentity, token: str) -> Callable[[], Awaitable[AuthorizeResult]]:
    """Bolt's ``authorize``: every request is this app's, as start-up's ``auth.test`` said."""
    result = AuthorizeResult(
        enterprise_id=me.enterprise_id,
        team_id=me.team_id or None,
        team=me.team or None,
        url=me.url or None,
        bot_user_id=me.user_id,
        bot_id=me.bot_id or None,
        bot_token=token,
    )

    async def authorize() -> AuthorizeResult:
        return result

    return authorize


async def socket_url(
    client: AsyncWebClient, app_token: str, unreachable: Callable[[str], Exception]
) -> str:
    """A Socket Mode connection URL, which also proves the app-level token works."""
    try:
        response = await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        raise ConfigError(
            "SLACK_APP_TOKEN",
            f"Slack refused it ({exc.response.get('error')}); it must be an app-level "
            "token of this app with the connections:write scope",
        ) from None
    except (SlackClientError, aiohttp.ClientError, OSError) as exc:
        raise unreachable(
            f"cannot reach Slack at {public_url(client.base_url)} ({redact(str(exc))})"
        ) from None
    url = response.get("url")
    if not isinstance(url, str):
        raise ConfigError("SLACK_APP_TOKEN", "Slack gave no Socket Mode URL for it")
    return url


async def step(fault: Callable[[str], Exception], what: str, work: Awaitable[_T]) -> _T:
    """``work``, or ``fault``'s error (one naming the setting) if it takes too long."""
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S) as deadline:
            return await work
    except TimeoutError:
        if not deadline.expired():
            raise
        # No advice here: the setting it names (or, for Slack at its default address, the
        # network) is where to look.
        raise fault(f"no answer from {what} within {STEP_TIMEOUT_S:g} s") from None


async def bind(
    web_app: web.Application, host: str, port: int, *, setting: str
) -> tuple[web.AppRunner, int]:
    """Serve ``web_app`` on ``host:port``: its runner and the port bound (``port`` 0 picks
    one); a :class:`ConfigError` naming ``setting`` if it cannot listen there."""
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(setting, _cannot_listen(host, port, exc, setting)) from None
    sockets = getattr(site._server, "sockets", None) or []
    return runner, sockets[0].getsockname()[1] if sockets else port


def _cannot_listen(host: str, port: int, exc: OSError, setting: str) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} is already in use on {host}; stop what listens there or set "
            f"{setting} to a free port"
        )
    return f"cannot listen on {host}:{port} ({exc.strerror or exc}); set {setting} to another port"
