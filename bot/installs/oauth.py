"""OAuth mode's two routes on ``PORT``: ``GET /slack/install`` sends the person to Slack's
authorize page, and ``GET /slack/oauth_redirect`` takes Slack's answer, exchanges its code
with ``oauth.v2.access`` and stores the installation.

Both at ``SLACK_API_URL``'s host: the authorize page is its origin + ``/oauth/v2/authorize``
(``slack.com``, ``slack-gov.com``, a test server), the exchange a Web API call there.

The ``state`` (:class:`OAuthStates`, slack_sdk's state-store interface) is single-use,
expires after :data:`STATE_TTL_S`, and is bound to the browser by a cookie holding the
same value: a redirect whose state is not the cookie's is refused before any exchange.
A state is a random nonce and its time, signed (HMAC-SHA256 with the client secret), so
any worker can check it; it is spent by taking ``oauth_state:<nonce>`` in the delivery
log (the database), so a second use is refused on every worker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import structlog
from aiohttp import web
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.oauth.authorize_url_generator import AuthorizeUrlGenerator
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import StorageError
from bot.installs.pages import Outcome, page

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent_core.ports import DeliveryLog
    from bot.installs.store import InstallationStore

__all__ = [
    "BOT_SCOPES",
    "INSTALL_PATH",
    "REDIRECT_PATH",
    "STATE_COOKIE",
    "STATE_TTL_S",
    "OAuthRoutes",
    "OAuthStates",
    "authorize_url",
    "installation_from",
    "oauth_v2_access",
]

log = structlog.get_logger("bot.installs.oauth")

INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
STATE_COOKIE = "threadpilot-oauth-state"
STATE_TTL_S = 600.0
"""How long a person has between the install link and Slack's redirect."""

BOT_SCOPES = (
    "app_mentions:read",
    "chat:write",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "commands",
    "reactions:write",
    "assistant:write",
    "users:read",
    "channels:read",
)
"""The bot scopes the install asks for: ``manifest.yml``'s (a test holds them equal)."""


def authorize_url(api_url: str) -> str:
    """Slack's authorize page on the host of ``SLACK_API_URL``."""
    parts = urlsplit(api_url)
    return urlunsplit((parts.scheme, parts.netloc, "/oauth/v2/authorize", "", ""))


class OAuthStates(AsyncOAuthStateStore):
    """Single-use, expiring, signed states, spent in the database (module docstring)."""

    def __init__(
        self,
        secret: str,
        deliveries: DeliveryLog,
        *,
        ttl_s: float = STATE_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = secret.encode()
        self._deliveries = deliveries
        self._ttl_s = ttl_s
        self._clock = clock

    @property
    def logger(self) -> logging.Logger:
        return logging.getLogger("bot.installs.oauth")

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        body = f"{secrets.token_urlsafe(18)}.{int(self._clock())}"
        return f"{body}.{self._sign(body)}"

    async def async_consume(self, state: str) -> bool:
        return await self.spend(state) is Outcome.INSTALLED

    async def spend(self, state: str) -> Outcome:
        """Check and spend ``state``: :attr:`Outcome.INSTALLED` if it was good (the
        caller goes on), else why not."""
        nonce, _, rest = state.partition(".")
        issued, _, signature = rest.partition(".")
        if not (nonce and issued.isdigit() and signature):
            return Outcome.BAD_STATE
        if not hmac.compare_digest(signature, self._sign(f"{nonce}.{issued}")):
            return Outcome.BAD_STATE
        if self._clock() - int(issued) > self._ttl_s:
            return Outcome.EXPIRED_STATE
        if not await self._deliveries.first_delivery(f"oauth_state:{nonce}"):
            return Outcome.REUSED_STATE
        return Outcome.INSTALLED

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class OAuthRoutes:
    """``/slack/install`` and ``/slack/oauth_redirect``, added to the app on ``PORT``."""

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        redirect_uri: str | None,
        api_url: str,
        states: OAuthStates,
        installations: InstallationStore,
        session: aiohttp.ClientSession,
        installed: Callable[[str], None] = lambda team: None,
    ) -> None:
        """``installed``: told each workspace (or organisation) just installed, so one
        uninstalled earlier is served again."""
        self._installed = installed
        self._client_id = client_id
        self._client_secret = client_secret
        self._redirect_uri = redirect_uri
        self._states = states
        self._installations = installations
        self._urls = AuthorizeUrlGenerator(
            client_id=client_id,
            redirect_uri=redirect_uri,
            scopes=list(BOT_SCOPES),
            authorization_url=authorize_url(api_url),
        )
        # The exchange: a Web API client without a token, at SLACK_API_URL.
        self._client = AsyncWebClient(base_url=api_url, session=session)
        self._secure_cookie = (redirect_uri or "").startswith("https://")

    def add_to(self, web_app: web.Application) -> None:
        web_app.router.add_get(INSTALL_PATH, self.install)
        web_app.router.add_get(REDIRECT_PATH, self.redirect)

    async def install(self, request: web.Request) -> web.Response:
        state = await self._states.async_issue()
        response = web.Response(status=302, headers={"Location": self._urls.generate(state)})
        response.set_cookie(
            STATE_COOKIE,
            state,
            max_age=int(STATE_TTL_S),
            path="/slack",
            httponly=True,
            secure=self._secure_cookie,
            samesite="Lax",  # sent on the top-level GET back from Slack's page
        )
        return response

    async def redirect(self, request: web.Request) -> web.Response:
        state = request.query.get("state", "")
        outcome = await self._check_state(state, request.cookies.get(STATE_COOKIE))
        if outcome is not Outcome.INSTALLED:
            return self._page(outcome, 400)
        if "error" in request.query or not request.query.get("code"):
            return self._page(Outcome.CANCELLED, 400, detail=request.query.get("error", "no code"))
        try:
            installation = await self._exchange(request.query["code"])
            await self._installations.async_save(installation)
            self._installed(installation.team_id or installation.enterprise_id or "")
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "unknown")
            log.warning("install.refused", error=error)
            return self._page(Outcome.REFUSED_CODE, 400, detail=error)
        except (SlackClientError, aiohttp.ClientError, OSError, StorageError) as exc:
            log.error("install.failed", error=f"{type(exc).__name__}: {exc}")
            return self._page(Outcome.UNAVAILABLE, 503, detail=type(exc).__name__)
        where = installation.enterprise_name if installation.is_enterprise_install else None
        log.info(
            "install.saved",
            team=installation.team_id,
            enterprise=installation.enterprise_id,
            org_wide=installation.is_enterprise_install,
            rotating=installation.bot_refresh_token is not None,
        )
        return self._page(Outcome.INSTALLED, 200, where=where or installation.team_name or "")

    async def _check_state(self, state: str, cookie: str | None) -> Outcome:
        if not state or cookie is None or not hmac.compare_digest(state, cookie):
            return Outcome.BAD_STATE
        try:
            return await self._states.spend(state)
        except StorageError as exc:
            log.error("install.state_unchecked", error=str(exc))
            return Outcome.UNAVAILABLE

    async def _exchange(self, code: str) -> Installation:
        """``oauth.v2.access`` for ``code``, and ``auth.test`` for the bot's id (the
        exchange does not give it), as one installation."""
        form = {"code": code, "redirect_uri": self._redirect_uri}
        answer = await oauth_v2_access(self._client, self._client_id, self._client_secret, form)
        return await installation_from(self._client, answer)

    def _page(
        self, outcome: Outcome, status: int, *, where: str = "", detail: str = ""
    ) -> web.Response:
        response = web.Response(
            text=page(outcome, where=where, detail=detail), status=status, content_type="text/html"
        )
        response.del_cookie(STATE_COOKIE, path="/slack")
        return response


async def oauth_v2_access(
    client: AsyncWebClient, client_id: str, client_secret: str, form: dict[str, str | None]
) -> dict[str, Any]:
    """``oauth.v2.access`` with the client's id and secret in HTTP Basic auth, as Slack
    recommends. (slack_sdk's own method builds aiohttp's deprecated ``BasicAuth``.)
    Raises ``SlackApiError`` when Slack refuses."""
    response = await client.api_call(
        "oauth.v2.access",
        data={k: v for k, v in form.items() if v is not None},
        headers={"Authorization": aiohttp.encode_basic_auth(client_id, client_secret)},
    )
    return response.data if isinstance(response.data, dict) else {}


async def installation_from(client: AsyncWebClient, answer: Any) -> Installation:
    """The installation in an ``oauth.v2.access`` answer (a code's, or a refresh's)."""
    data: dict[str, Any] = answer if isinstance(answer, dict) else {}
    enterprise = data.get("enterprise") or {}
    team = data.get("team") or {}
    token = data.get("access_token")
    auth = await client.auth_test(token=token)
    org_wide = bool(data.get("is_enterprise_install"))
    return Installation(
        app_id=data.get("app_id"),
        enterprise_id=enterprise.get("id"),
        enterprise_name=enterprise.get("name"),
        enterprise_url=auth.get("url") if org_wide else None,
        team_id=team.get("id"),
        team_name=team.get("name"),
        bot_token=token,
        bot_id=auth.get("bot_id"),
        bot_user_id=data.get("bot_user_id"),
        bot_scopes=data.get("scope") or "",
        bot_refresh_token=data.get("refresh_token"),
        bot_token_expires_in=data.get("expires_in"),
        user_id=(data.get("authed_user") or {}).get("id") or "",
        is_enterprise_install=org_wide,
        token_type=data.get("token_type"),
    )
