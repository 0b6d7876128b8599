"""Which token a workspace's Web API calls carry, in OAuth mode: the port the budgets
ask (:class:`~bot.installs.lookup.InstallationLookup` implements it). In single-workspace
mode there is none, and the client's own ``SLACK_BOT_TOKEN`` is used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.slack_api.identity import AppIdentity

__all__ = ["TeamCredentials"]


class TeamCredentials(Protocol):
    async def bot_token(self, team_id: str) -> str | None:
        """The workspace's bot token now (None: it has no installation)."""
        ...

    async def identity(self, team_id: str) -> AppIdentity | None:
        """The app in that workspace: its bot user and bot, from its installation."""
        ...

    def refused(self, team_id: str, error: str) -> None:
        """Slack refused one of the workspace's calls with ``error``."""
        ...
