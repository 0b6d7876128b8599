"""One workspace's Slack surface: its Web API budget and which optional features work.

Chat streaming (``chat.startStream``...) and agent-session status
(``agents.sessions.setStatus``) are optional (docs/slack-setup.md): a workspace or app may not
have them. The first refusal switches the feature off for that workspace, logged once,
for :data:`RECHECK_AFTER_S` (a workspace may gain it later); the app falls back and keeps
working. Until Slack has taken a feature's method once, its calls go one at a time
(:meth:`Feature.attempt`): runs that start together learn of a refusal once, instead of
each asking and each being refused.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from bot.config.settings import HistoryLimit
from bot.errors import SlackError
from bot.slack_api.history_allowance import HistoryAllowance
from bot.slack_api.rate_budget import SlackRateBudget

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from slack_sdk.web.async_client import AsyncWebClient

    from bot.observe.metrics import Metrics
    from bot.slack_api.credentials import TeamCredentials
    from bot.slack_api.identity import AppIdentity

__all__ = ["RECHECK_AFTER_S", "Feature", "SlackSurface", "Workspaces", "means_unavailable"]

log = structlog.get_logger("bot.slack_api.surface")

T = TypeVar("T")

RECHECK_AFTER_S = 3600.0
"""How long a workspace's refusal of an optional method is believed."""

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


def means_unavailable(error: str) -> bool:
    """True if Slack's ``error`` says the workspace or app cannot use the method."""
    return error in _UNAVAILABLE


class Feature:
    """An optional Slack feature of one workspace: whether to use it, as Slack last said."""

    def __init__(
        self,
        name: str,
        *,
        recheck_after_s: float = RECHECK_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._recheck_after_s = recheck_after_s
        self._clock = clock
        self._off_until = -math.inf
        self._works = False
        """Slack took one of its calls here since it was last refused."""
        self._probing = asyncio.Lock()

    @property
    def available(self) -> bool:
        """False while a refusal is believed (:data:`RECHECK_AFTER_S` after it)."""
        return self._clock() >= self._off_until

    async def attempt(self, team_id: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """``call()``, or None (not called) while the feature is off here.

        Until Slack has taken a call of the feature here, callers go one at a time, each
        seeing what the one before learnt. A refusal meaning "unavailable" switches the
        feature off; every :class:`~bot.errors.SlackError` is raised to the caller.
        """
        if not (self._works and self.available):
            async with self._probing:
                if not self.available:
                    return None
                if not self._works:
                    return await self._noted(team_id, call)
            # Slack took the call that went first: the rest need not wait on each other.
        return await self._noted(team_id, call)

    async def _noted(self, team_id: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await call()
        except SlackError as exc:
            self.refused(team_id, exc.error)
            raise
        self._works = True
        return result

    def refused(self, team_id: str, error: str) -> bool:
        """Record a refusal; True if it means the feature is unavailable here."""
        if not means_unavailable(error):
            return False
        if self.available:
            log.warning(
                "slack.feature_unavailable",
                feature=self.name,
                team=team_id,
                error=error,
                fallback="continuing without it",
                recheck_after_s=self._recheck_after_s,
            )
        self._off_until = self._clock() + self._recheck_after_s
        self._works = False
        return True


@dataclass
class SlackSurface:
    team_id: str
    budget: SlackRateBudget
    me: AppIdentity | None = None
    """The app in this workspace (its bot user and bot); None: the process's identity."""
    streaming: Feature = field(default_factory=lambda: Feature("chat streaming"))
    agent_sessions: Feature = field(default_factory=lambda: Feature("agent sessions"))
    history: HistoryAllowance = field(default_factory=lambda: HistoryAllowance(HistoryLimit.TIER3))
    """How much of a thread Slack lets this workspace's app read now."""

    async def optional_call(
        self, feature: Feature, method: str, **kwargs: Any
    ) -> dict[str, Any] | None:
        """Call an optional method; None when the feature is (or just became) unavailable.

        Other failures are logged and also give None: an optional surface never breaks a run.
        """
        try:
            return await feature.attempt(self.team_id, lambda: self.budget.call(method, **kwargs))
        except SlackError as exc:
            if not means_unavailable(exc.error):
                log.warning(
                    "slack.optional_call_failed", method=method, team=self.team_id, error=exc.error
                )
            return None


class Workspaces:
    """One :class:`SlackSurface` (and budget) per team, created on first use; ``me`` is
    this app (``auth.test``), whose messages alone the budgets take for ours."""

    def __init__(
        self,
        client: AsyncWebClient,
        me: AppIdentity,
        *,
        metrics: Metrics | None = None,
        credentials: TeamCredentials | None = None,
        history_limit: HistoryLimit = HistoryLimit.TIER3,
    ) -> None:
        """``credentials``: OAuth mode's token per workspace (None: the client's own);
        ``history_limit``: ``SLACK_HISTORY_LIMIT``, each workspace's allowance."""
        self._history_limit = history_limit
        self._client = client
        self._me = me
        self._metrics = metrics
        self._credentials = credentials
        self._surfaces: dict[str, SlackSurface] = {}
        self._lock = asyncio.Lock()

    async def get(self, team_id: str) -> SlackSurface:
        surface = self._surfaces.get(team_id)
        if surface is not None:
            return surface
        async with self._lock:
            surface = self._surfaces.get(team_id)
            if surface is None:
                me = self._me
                if self._credentials is not None:
                    me = await self._credentials.identity(team_id) or me
                budget = SlackRateBudget(
                    self._client,
                    team_id=team_id,
                    me=me,
                    metrics=self._metrics,
                    credentials=self._credentials,
                )
                await budget.start()
                surface = SlackSurface(
                    team_id, budget, me, history=HistoryAllowance(self._history_limit)
                )
                self._surfaces[team_id] = surface
        return surface

    async def drop(self, team_id: str) -> None:
        """``team_id`` can no longer be reached (uninstalled, revoked): its budget stops
        now, its pending writes dropped, so every call its runs still make fails with
        :class:`bot.errors.BudgetNotRunning` instead of reaching Slack. A later
        :meth:`get` (a re-install) starts a fresh surface."""
        async with self._lock:
            surface = self._surfaces.pop(team_id, None)
        if surface is not None:
            await surface.budget.close(flush_timeout_s=0)

    async def close(self) -> None:
        """Flush every workspace's pending final writes, then stop the budgets."""
        surfaces, self._surfaces = list(self._surfaces.values()), {}
        for surface in surfaces:
            await surface.budget.close()
