"""``app_uninstalled`` and ``tokens_revoked``: a workspace let the app go.

Either event (in either order, neither needing a working token) uninstalls the workspace
(:class:`bot.runs.uninstall.Uninstaller`); ``tokens_revoked`` only when it names the bot's
token (a person's revoked token is not ours to worry about). Both are acknowledged at once
and the work goes on after the ack. From then on a payload from that workspace does
nothing here but one log line (a middleware, before any listener), until it installs the
app again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from slack_bolt.response import BoltResponse

from bot.access.organisation import scope_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncApp

    from bot.runs.uninstall import Uninstaller

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.uninstall")

_UNINSTALL_EVENTS = frozenset({"app_uninstalled", "tokens_revoked"})


def register(app: AsyncApp, uninstaller: Uninstaller) -> None:
    async def gone(
        body: dict[str, Any], next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        scope = scope_of(body)
        event = body.get("event")
        kind = event.get("type") if isinstance(event, dict) else None
        if scope is not None and kind not in _UNINSTALL_EVENTS and uninstaller.gone(scope.team):
            log.info("team.payload_ignored", team=scope.team, reason="uninstalled")
            return BoltResponse(status=200, body="")
        await next()
        return None

    async def on_uninstalled(body: dict[str, Any]) -> None:
        await _uninstall(uninstaller, body, "app_uninstalled")

    async def on_tokens_revoked(body: dict[str, Any], event: dict[str, Any]) -> None:
        tokens = event.get("tokens")
        bots = tokens.get("bot") if isinstance(tokens, dict) else None
        if not bots:
            log.info("tokens_revoked.not_ours", kinds=sorted(tokens or {}))
            return  # people's tokens: the app holds none
        await _uninstall(uninstaller, body, "tokens_revoked")

    app.middleware(gone)
    app.event("app_uninstalled")(on_uninstalled)
    app.event("tokens_revoked")(on_tokens_revoked)


async def _uninstall(uninstaller: Uninstaller, body: dict[str, Any], why: str) -> None:
    scope = scope_of(body)
    if scope is None:
        log.warning("uninstall.malformed", why=why)
        return
    at = body.get("event_time")
    when = datetime.fromtimestamp(at, UTC) if isinstance(at, int) else datetime.now(UTC)
    await uninstaller.uninstall(scope.team, scope.enterprise, why=why, at=when)
