"""Which workspaces an install reaches: what every payload says, and Grid's access events.

Every payload names its workspace and, on Enterprise Grid, its enterprise; a middleware
teaches :class:`bot.access.organisation.Organisations` that pairing before any listener
asks the trust gate, so a person of a sibling workspace is a coworker from the first
click on. An org admin adding the app to a workspace of an org-wide install sends
``team_access_granted`` (those workspaces are the enterprise's); removing it sends
``team_access_revoked``: those workspaces are forgotten, and their live runs end
without a word to Slack (the app can no longer post there). Both are logged and audited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agent_core import AuditEvent, StorageError
from bot.access.organisation import Scope, scope_of
from bot.runs.team_end import team_event_run

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_bolt.async_app import AsyncApp

    from bot.access.organisation import Organisations

__all__ = ["AuditLog", "TeamRuns", "register"]

log = structlog.get_logger("bot.handlers.team_access")


class AuditLog(Protocol):
    """Where the events are audited (the store)."""

    async def record_event(self, event: AuditEvent) -> None: ...


class TeamRuns(Protocol):
    """Ends a workspace's live runs without calling Slack (:mod:`bot.runs.team_end`)."""

    async def end_team(self, team: str, *, why: str) -> int: ...


def register(app: AsyncApp, organisations: Organisations, audit: AuditLog, runs: TeamRuns) -> None:
    async def learn(body: dict[str, Any], next: Callable[[], Awaitable[None]]) -> None:
        scope = scope_of(body)
        if scope is not None:
            organisations.learn(scope)
        await next()

    async def on_granted(body: dict[str, Any], event: dict[str, Any]) -> None:
        enterprise = _enterprise(body)
        teams = _teams(event)
        for team in teams:
            organisations.learn(Scope(team, enterprise))
        log.info("team_access.granted", enterprise=enterprise, teams=teams)
        await _audit(audit, teams, "team.access_granted", enterprise, {})

    async def on_revoked(body: dict[str, Any], event: dict[str, Any]) -> None:
        enterprise = _enterprise(body)
        teams = _teams(event)
        ended: dict[str, int] = {}
        for team in teams:
            organisations.forget(team)
            ended[team] = await runs.end_team(team, why="team_access_revoked")
        log.info("team_access.revoked", enterprise=enterprise, teams=teams, runs_ended=ended)
        await _audit(audit, teams, "team.access_revoked", enterprise, ended)

    app.middleware(learn)
    app.event("team_access_granted")(on_granted)
    app.event("team_access_revoked")(on_revoked)


async def _audit(
    audit: AuditLog, teams: list[str], kind: str, enterprise: str | None, ended: dict[str, int]
) -> None:
    for team in teams:
        detail: dict[str, Any] = {"enterprise": enterprise}
        if team in ended:
            detail["runs_ended"] = ended[team]
        try:
            await audit.record_event(AuditEvent(team_event_run(team), kind, "slack", detail=detail))
        except StorageError:
            log.exception("team_access.not_audited", team=team, kind=kind)


def _enterprise(body: dict[str, Any]) -> str | None:
    scope = scope_of(body)
    if scope is not None and scope.enterprise is not None:
        return scope.enterprise
    enterprise = body.get("enterprise_id")
    return enterprise if isinstance(enterprise, str) and enterprise else None


def _teams(event: dict[str, Any]) -> list[str]:
    teams = event.get("team_ids")
    if not isinstance(teams, list):
        return []
    return [t for t in teams if isinstance(t, str) and t]
