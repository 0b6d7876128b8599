"""The Bolt app: how it authorizes a request, what it does when a listener fails, and its
middleware and listeners, registered in the order they must run.

Bolt is given a client of its own, without a token: it takes each request's token from
the authorization (start-up's ``auth.test`` answer with a bot token, the workspace's
installation in OAuth mode). In Socket Mode payloads are not signed (the ``xapp-``
token authenticates the socket), so Bolt checks signatures only over HTTP.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncApp

from bot.handlers import (
    actions,
    approvals,
    command,
    events,
    feedback,
    home,
    mentions,
    sub_agent_steer,
    team_access,
    uninstall,
)
from bot.inbound.dedupe import EventDeduper
from bot.process.http_guard import on_bolt_error
from bot.process.start_up import authorization
from bot.stopping.stops import ACK_BUDGET_S

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.authorization import AuthorizeResult
    from slack_bolt.context.async_context import AsyncBoltContext
    from slack_bolt.request.async_request import AsyncBoltRequest
    from slack_bolt.response import BoltResponse
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.access.organisation import Organisations
    from bot.config.settings import Settings
    from bot.dashboard.listing import Dashboard
    from bot.dashboard.refresh import HomeRefresher
    from bot.handlers.context import BotContext
    from bot.handlers.late_admissions import LateAdmissions
    from bot.installs.lookup import InstallationLookup
    from bot.runs.team_end import TeamEnd
    from bot.runs.uninstall import Uninstaller

__all__ = ["ListenerParts", "bolt_app"]


@dataclass(frozen=True, slots=True)
class ListenerParts:
    """What the listeners are given beside the handlers' context."""

    organisations: Organisations
    """Which workspaces are one enterprise: every payload teaches it."""
    team_end: TeamEnd
    uninstaller: Uninstaller
    dashboard: Dashboard
    home: HomeRefresher


def bolt_app(
    settings: Settings, client: AsyncWebClient, ctx: BotContext, parts: ListenerParts
) -> tuple[AsyncApp, LateAdmissions]:
    """The Bolt app, every listener registered; and the mentions admitted late
    (:mod:`bot.handlers.late_admissions`), which the app shuts down first."""
    socket_mode = settings.socket_mode
    bolt = AsyncApp(
        client=_tokenless(client),
        authorize=_authorize(settings, ctx),
        # Socket Mode payloads are not signed (the xapp- token authenticates the socket).
        signing_secret=settings.SLACK_SIGNING_SECRET or "unused-in-socket-mode",
        request_verification_enabled=not socket_mode,
        ignoring_self_events_enabled=True,
        # Requests no listener takes go to on_bolt_error too: one line, not Bolt's
        # multi-line suggestion of a listener to write.
        raise_error_for_unhandled_request=True,
    )
    # Durable and shared by every worker: a retry delivered elsewhere is dropped too.
    deduper = EventDeduper(ctx.deliveries, ctx.store, ctx.me, budget_s=ACK_BUDGET_S)
    bolt.error(_forgetting_failed_deliveries(deduper))
    return bolt, _register(bolt, ctx, parts, deduper)


def _tokenless(client: AsyncWebClient) -> AsyncWebClient:
    """Bolt takes its token from the authorization: a client of its own without one (the
    token would be set aside, with a warning)."""
    tokenless = copy.copy(client)
    tokenless.token = None
    return tokenless


def _authorize(settings: Settings, ctx: BotContext) -> Callable[..., Awaitable[AuthorizeResult]]:
    """Bolt's ``authorize``: from the workspace's installation in OAuth mode, else
    start-up's ``auth.test`` answer."""
    installs = ctx.installs
    if installs is None:
        assert settings.SLACK_BOT_TOKEN is not None  # settings: one mode or the other
        return authorization(ctx.me, settings.SLACK_BOT_TOKEN)
    return _installation_authorize(installs)


def _installation_authorize(
    installs: InstallationLookup,
) -> Callable[..., Awaitable[AuthorizeResult]]:
    # A function, not the bound method: Bolt passes arguments by their names.
    async def authorize(context: AsyncBoltContext) -> AuthorizeResult:
        return await installs.authorize(context)

    return authorize


def _forgetting_failed_deliveries(
    deduper: EventDeduper,
) -> Callable[..., Awaitable[BoltResponse | None]]:
    """Bolt's error handler: a request that failed before its ack is forgotten, so the
    delivery Slack sends again is handled (on any worker); then :func:`on_bolt_error`."""

    async def on_error(
        error: Exception, request: AsyncBoltRequest, response: BoltResponse | None
    ) -> BoltResponse | None:
        if response is not None:  # before the ack: Slack delivers it again
            await deduper.forget(request.body)
        return await on_bolt_error(error, request, response)

    return on_error


def _register(
    bolt: AsyncApp, ctx: BotContext, parts: ListenerParts, deduper: EventDeduper
) -> LateAdmissions:
    """The middleware and listeners, in the order Bolt must try them."""
    # First: every payload teaches which enterprise its workspace is of (trust asks).
    team_access.register(bolt, parts.organisations, ctx.store, parts.team_end)
    uninstall.register(bolt, parts.uninstaller)
    if ctx.installs is not None:
        bolt.middleware(ctx.installs.middleware)
    bolt.middleware(deduper.middleware)
    late = mentions.register(bolt, ctx)
    # Before actions.register, whose last listener takes every button nobody took.
    home.register(bolt, ctx, parts.dashboard, parts.home)
    command.register(bolt, parts.dashboard)
    feedback.register(bolt, ctx)
    approvals.register(bolt, ctx, parts.home)
    sub_agent_steer.register(bolt, ctx)  # before actions': it takes every other id
    actions.register(bolt, ctx)
    events.register(bolt, ctx)
    return late
