"""Which channels are public: what App Home may show of a run to someone else.

On App Home and in the ``/threadpilot`` list, the request text of a run in a DM, a group
DM or a private channel is shown only to whoever asked; others (admins) see that it is
private (:mod:`bot.views.home`). A channel counts as public only when Slack says so
(``conversations.info``: neither ``is_private``, ``is_im`` nor ``is_mpim``): a DM (``D``)
or group DM (``G``) id needs no call, and a channel Slack does not describe in time, or
refuses to (no ``channels:read``, or a private channel the app cannot see), is private.
Answers are cached for :data:`CACHE_TTL_S` (a channel can be made private).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import structlog

from bot.errors import BudgetNotRunning, SlackError, SlackRefused

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from bot.slack_api.surface import Workspaces

__all__ = ["CACHE_TTL_S", "LOOKUP_BUDGET_S", "MAX_LOOKUPS", "ChannelPrivacy"]

log = structlog.get_logger("bot.slack_api.channels")

CACHE_TTL_S = 10 * 60.0
LOOKUP_BUDGET_S = 1.0
"""Looking channels up may hold a listing this long (it may answer a slash command)."""
MAX_LOOKUPS = 20
"""Channels looked up for one listing at most; the rest count as private until a later
listing has looked them up (``conversations.info`` is Tier 3)."""
_ALWAYS_PRIVATE = ("D", "G")
"""DMs, and group DMs (or old-style private channels): private by their id alone."""


class ChannelPrivacy:
    def __init__(self, workspaces: Workspaces, *, clock: Callable[[], float] = time.monotonic):
        self._workspaces = workspaces
        self._clock = clock
        self._public: dict[tuple[str, str], tuple[float, bool]] = {}

    async def public(self, team: str, channels: Iterable[str]) -> frozenset[str]:
        """Those of ``channels`` known to be public, within :data:`LOOKUP_BUDGET_S`."""
        known: set[str] = set()
        unknown: list[str] = []
        for channel in dict.fromkeys(channels):
            if channel.startswith(_ALWAYS_PRIVATE):
                continue
            cached = self._cached(team, channel)
            if cached is None:
                unknown.append(channel)
            elif cached:
                known.add(channel)
        if unknown:
            looked_up = await self._look_up(team, unknown[:MAX_LOOKUPS])
            known.update(channel for channel, public in looked_up.items() if public)
        return frozenset(known)

    async def _look_up(self, team: str, channels: list[str]) -> dict[str, bool]:
        found: dict[str, bool] = {}

        async def one(channel: str) -> None:
            public = await self._ask_slack(team, channel)
            if public is not None:
                found[channel] = public
                self._public[(team, channel)] = (self._clock(), public)

        try:
            async with asyncio.timeout(LOOKUP_BUDGET_S), asyncio.TaskGroup() as group:
                for channel in channels:
                    group.create_task(one(channel))
        except TimeoutError:
            log.warning("channels.lookup_slow", team=team, asked=len(channels), found=len(found))
        return found

    async def _ask_slack(self, team: str, channel: str) -> bool | None:
        """True if Slack says ``channel`` is public, False if not (or refuses to say);
        None if it did not answer (private for this listing, asked again for the next)."""
        try:
            surface = await self._workspaces.get(team)
            answer = await surface.budget.call("conversations.info", channel=channel)
        except SlackRefused as exc:
            # channel_not_found (a private channel the app cannot see), missing_scope...:
            # asking again would get the same answer.
            log.info("channels.not_described", channel=channel, error=exc.error)
            return False
        except (SlackError, BudgetNotRunning):
            return None
        return _is_public(answer.get("channel"))

    def _cached(self, team: str, channel: str) -> bool | None:
        found = self._public.get((team, channel))
        if found is None or self._clock() - found[0] > CACHE_TTL_S:
            return None
        return found[1]


def _is_public(channel: Any) -> bool:
    if not isinstance(channel, dict):
        return False
    return not any(channel.get(key) for key in ("is_private", "is_im", "is_mpim"))
