"""One workspace's Slack surface: its Web API budget and which optional features work.

Chat streaming (``chat.startStream``...) and agent-session status
(``agents.sessions.setStatus``) are optional (docs/slack-setup.md): a workspace or app may not
have them. The first refusal switches the feature off for that workspace, logged once;
the app falls back and keeps working.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from bot.errors import SlackError
from bot.slack_budget import SlackBudget

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.metrics import Metrics

__all__ = ["Feature", "SlackSurface", "Workspaces"]

log = structlog.get_logger("bot.surface")

# Errors that mean "this workspace/app cannot use the method", not "try again".
_UNAVAILABLE = frozenset(
    {
        "unknown_method",
        "method_deprecated",
        "not_allowed_token_type",
        "missing_scope",
        "no_permission",
        "not_agent_app",
        "feature_not_enabled",
        "team_not_allowed",
        "access_denied",
        "invalid_arguments",
    }
)


@dataclass
class Feature:
    name: str
    available: bool = True

    def refused(self, team_id: str, error: str) -> bool:
        """Record a refusal; True if it means the feature is unavailable here."""
        if error not in _UNAVAILABLE:
            return False
        if self.available:
            self.available = False
            log.warning(
                "slack.feature_unavailable",
                feature=self.name,
                team=team_id,
                error=error,
                fallback="continuing without it",
            )
        return True


@dataclass
class SlackSurface:
    team_id: str
    budget: SlackBudget
    streaming: Feature = field(default_factory=lambda: Feature("chat streaming"))
    agent_sessions: Feature = field(default_factory=lambda: Feature("agent sessions"))

    async def optional_call(
        self, feature: Feature, method: str, **kwargs: Any
    ) -> dict[str, Any] | None:
        """Call an optional method; None when the feature is (or just became) unavailable.

        Other failures are logged and also give None: an optional surface never breaks a run.
        """
        if not feature.available:
            return None
        try:
            return await self.budget.call(method, **kwargs)
        except SlackError as exc:
            if not feature.refused(self.team_id, exc.error):
                log.warning(
                    "slack.optional_call_failed", method=method, team=self.team_id, error=exc.error
                )
            return None


class Workspaces:
    """One :class:`SlackSurface` (and budget) per team, created on first use."""

    def __init__(self, client: AsyncWebClient, *, metrics: Metrics | None = None) -> None:
        self._client = client
        self._metrics = metrics
        self._surfaces: dict[str, SlackSurface] = {}
        self._lock = asyncio.Lock()

    async def get(self, team_id: str) -> SlackSurface:
        surface = self._surfaces.get(team_id)
        if surface is not None:
            return surface
        async with self._lock:
            surface = self._surfaces.get(team_id)
            if surface is None:
                budget = SlackBudget(self._client, team_id=team_id, metrics=self._metrics)
                await budget.start()
                surface = SlackSurface(team_id, budget)
                self._surfaces[team_id] = surface
        return surface

    async def close(self) -> None:
        """Flush every workspace's pending final writes, then stop the budgets."""
        surfaces, self._surfaces = list(self._surfaces.values()), {}
        for surface in surfaces:
            await surface.budget.close()
