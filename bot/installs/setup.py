"""OAuth mode's parts, built from the settings: the installations (cached, sealed with
``SLACK_TOKEN_KEY``), the install routes, and the token rotation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from slack_sdk.web.async_client import AsyncWebClient

from bot.config.token_key import Sealer
from bot.installs.lookup import InstallationLookup
from bot.installs.oauth import OAuthRoutes, OAuthStates
from bot.installs.rotation import Rotation

if TYPE_CHECKING:
    from collections.abc import Callable

    import aiohttp

    from agent_core.ports import Store
    from bot.config.settings import Settings
    from bot.installs.rotation import RotationTiming

__all__ = ["oauth_mode", "token_rotation"]

log = structlog.get_logger("bot.installs.setup")


def oauth_mode(
    settings: Settings,
    store: Store,
    session: aiohttp.ClientSession,
    *,
    installed: Callable[[str], None],
) -> tuple[InstallationLookup, OAuthRoutes]:
    """OAuth mode's installations (cached) and its two routes; ``installed`` is told each
    workspace that installs the app."""
    assert settings.SLACK_CLIENT_ID is not None and settings.SLACK_CLIENT_SECRET is not None
    installs = InstallationLookup(store, Sealer(settings.SLACK_TOKEN_KEY))
    if not installs.store.sealing:
        log.warning(
            "installations.stored_in_clear",
            fix="set SLACK_TOKEN_KEY to encrypt the tokens in the database",
        )
    routes = OAuthRoutes(
        client_id=settings.SLACK_CLIENT_ID,
        client_secret=settings.SLACK_CLIENT_SECRET,
        redirect_uri=settings.SLACK_REDIRECT_URI,
        api_url=settings.SLACK_API_URL,
        states=OAuthStates(settings.SLACK_CLIENT_SECRET, store),
        installations=installs.store,
        session=session,
        installed=installed,
    )
    return installs, routes


def token_rotation(
    settings: Settings,
    installs: InstallationLookup,
    store: Store,
    session: aiohttp.ClientSession,
    owner: str,
    timing: RotationTiming,
) -> Rotation:
    """OAuth mode's token refresher, at ``SLACK_API_URL`` (a client without a token)."""
    assert settings.SLACK_CLIENT_ID is not None and settings.SLACK_CLIENT_SECRET is not None
    return Rotation(
        store,
        installs.store,
        installs,
        AsyncWebClient(base_url=settings.SLACK_API_URL, session=session),
        client_id=settings.SLACK_CLIENT_ID,
        client_secret=settings.SLACK_CLIENT_SECRET,
        owner=owner,
        timing=timing,
    )
