"""From a request's team (or enterprise) to its installation, cached: Bolt's authorize in
OAuth mode, and the token each workspace's Web API calls carry.

Bolt's own ``AsyncInstallationStoreAuthorize`` calls ``auth.test`` on every request
unless told to cache, and its cache never forgets a deleted installation. Here an
installation read from the database serves for :data:`CACHE_TTL_S`, and is forgotten at
once when this process saves or deletes it (:meth:`InstallationLookup.forget`), when its
token has expired, or when Slack refuses its token (:meth:`InstallationLookup.refused`):
another worker's uninstall or refresh is seen here within the TTL, and a token Slack
has revoked is not offered again after the first refusal. No ``auth.test``: the
installation holds the bot's ids.

Which installation serves a request is the one its ``authorizations[0]`` names (Bolt's
context: an org-wide install's requests carry the enterprise and no team there). Runs
only know their workspace, so the middleware remembers which installation each
workspace was served by (:meth:`InstallationLookup.bot_token`).

A request from a team with no installation raises :class:`UnknownInstallation`: the
app's error handler logs one line and answers 200 (Slack does not retry it), and no
listener runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog
from slack_bolt.authorization import AuthorizeResult

from bot.errors import BotError
from bot.installs.store import InstallationStore, key_of
from bot.slack_api.identity import AppIdentity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.context.async_context import AsyncBoltContext
    from slack_sdk.oauth.installation_store.models.installation import Installation

    from agent_core.ports import InstallationRows
    from bot.config.token_key import Sealer
    from bot.installs.store import Key

__all__ = ["CACHE_TTL_S", "REFUSED_TOKEN_ERRORS", "InstallationLookup", "UnknownInstallation"]

log = structlog.get_logger("bot.installs.lookup")

CACHE_TTL_S = 10.0
"""How long an installation read from the database serves before it is read again: how
late another worker's uninstall or refresh can be seen here."""

REFUSED_TOKEN_ERRORS = frozenset(
    {"token_revoked", "token_expired", "invalid_auth", "account_inactive", "not_authed"}
)
"""Slack's answers that mean the token itself is no good."""

_KEY = "threadpilot_installation"
"""Where authorize leaves the installation's key in Bolt's context, for the middleware."""


class UnknownInstallation(BotError):
    """A request from a workspace (or organisation) the app is not installed in."""

    def __init__(self, enterprise_id: str | None, team_id: str | None) -> None:
        super().__init__(f"no installation for team {team_id} (enterprise {enterprise_id})")
        self.enterprise_id = enterprise_id
        self.team_id = team_id


class InstallationLookup:
    """Installations by ``(enterprise, team)``, cached for :data:`CACHE_TTL_S`."""

    def __init__(
        self,
        rows: InstallationRows,
        sealer: Sealer,
        *,
        ttl_s: float = CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = InstallationStore(rows, sealer, on_change=self.forget)
        """The installation store (slack_sdk's interface) over the same rows: what it
        saves or deletes, this cache forgets at once."""
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[Key, tuple[Installation | None, float]] = {}
        """By the key a request asks with; None cached too (an unknown team)."""
        self._served_by: dict[str, Key] = {}
        """Workspace -> the installation key its requests were authorised from."""

    async def installation(self, key: Key) -> Installation | None:
        """The installation serving requests keyed ``key`` (the workspace's own, else its
        enterprise's org-wide one), from the cache while it is fresh."""
        cached = self._cache.get(key)
        now = self._clock()
        if cached is not None and now - cached[1] < self._ttl_s:
            found = cached[0]
            if found is None or not _expired(found):
                return found
        enterprise_id, team_id = key
        found = await self.store.find(enterprise_id or None, team_id or None)
        self._cache[key] = (found, self._clock())
        return found

    def forget(self, key: Key) -> None:
        """Drop what the cache holds for installation ``key`` (and, for an org-wide
        one, for every workspace of its enterprise)."""
        enterprise_id, team_id = key
        for cached in list(self._cache):
            if cached == key or (not team_id and enterprise_id and cached[0] == enterprise_id):
                del self._cache[cached]
            elif cached[1] == team_id and team_id:
                del self._cache[cached]

    def refused(self, team_id: str, error: str) -> None:
        """Slack refused a workspace's token: read its installation afresh next time."""
        if error in REFUSED_TOKEN_ERRORS:
            key = self._served_by.get(team_id, ("", team_id))
            self.forget(key)
            log.warning("installation.token_refused", team=team_id, error=error)

    def remember(self, team_id: str, enterprise_id: str | None) -> None:
        """Say which enterprise a workspace belongs to (a stored run's, say), so that its
        calls find an org-wide installation even before a request from it has reached
        this worker (after a restart)."""
        if enterprise_id and team_id not in self._served_by:
            self._served_by[team_id] = (enterprise_id, team_id)

    async def bot_token(self, team_id: str) -> str | None:
        """The bot token for a workspace's Web API calls: from the installation its
        requests were served by, else its own; None if there is none."""
        found = await self.installation(self._served_by.get(team_id, ("", team_id)))
        return None if found is None else found.bot_token

    async def identity(self, team_id: str) -> AppIdentity | None:
        """The app in a workspace (its bot user and bot), from the installation serving
        it; None if there is none."""
        found = await self.installation(self._served_by.get(team_id, ("", team_id)))
        if found is None or not found.bot_user_id:
            return None
        return AppIdentity(
            user_id=found.bot_user_id,
            bot_id=found.bot_id or "",
            team_id=team_id,
            team=found.team_name or "",
            enterprise_id=found.enterprise_id,
        )

    async def installer_of(self, team: str) -> str | None:
        """Who installed the app serving workspace ``team`` (an admin of its runs);
        None if nobody is known."""
        found = await self.installation(self._served_by.get(team, ("", team)))
        return None if found is None else found.user_id

    async def forget_installation(self, team: str, enterprise: str | None) -> None:
        """The app was uninstalled from workspace ``team``: delete the installation that
        served it (its own, or its organisation's org-wide one)."""
        enterprise_id, team_id = self._served_by.pop(team, (enterprise or "", team))
        await self.store.async_delete_installation(
            enterprise_id=enterprise_id or None, team_id=team_id or None
        )

    async def authorize(self, context: AsyncBoltContext) -> AuthorizeResult:
        """Bolt's ``authorize``: the installation of the request's ``authorizations[0]``.
        Raises :class:`UnknownInstallation` when there is none."""
        enterprise_id, team_id = context.enterprise_id, context.team_id
        key = key_of(enterprise_id, team_id, org_wide=bool(context.get("is_enterprise_install")))
        found = await self.installation(key)
        if found is None or found.bot_token is None:
            raise UnknownInstallation(enterprise_id, team_id)
        context[_KEY] = key
        return AuthorizeResult(
            enterprise_id=found.enterprise_id,
            team_id=found.team_id,
            bot_user_id=found.bot_user_id,
            bot_id=found.bot_id,
            bot_token=found.bot_token,
            bot_scopes=found.bot_scopes,
            user_id=found.user_id,
        )

    async def middleware(
        self, context: AsyncBoltContext, body: dict[str, Any], next: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Bolt middleware: remember which installation served the request's workspace
        (an org-wide install's workspace is only in the payload)."""
        key = context.get(_KEY)
        workspace = _workspace(body) or context.team_id
        if key is not None and workspace:
            self._served_by[workspace] = key
        return await next()


def _workspace(body: dict[str, Any]) -> str | None:
    """The workspace a payload comes from: ``team_id`` (events, commands), ``team.id``
    (clicks), ``event.team``, or the clicking user's team."""
    team = body.get("team_id")
    if isinstance(team, str) and team:
        return team
    team = body.get("team")
    if isinstance(team, dict) and isinstance(team.get("id"), str):
        return str(team["id"])
    event = body.get("event")
    if isinstance(event, dict) and isinstance(event.get("team"), str):
        return str(event["team"])
    user = body.get("user")
    if isinstance(user, dict) and isinstance(user.get("team_id"), str):
        return str(user["team_id"])
    return None


def _expired(installation: Installation) -> bool:
    expires = installation.bot_token_expires_at
    return expires is not None and expires <= time.time()
