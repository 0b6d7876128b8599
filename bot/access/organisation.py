"""Which workspaces are one organisation: a team, or every workspace of an enterprise.

On Enterprise Grid an org-wide install serves many workspaces (teams) of one enterprise,
and a person of any of them is a coworker, not someone from another organisation
(:mod:`bot.access.trust`). What enterprise a workspace belongs to is learnt from what
Slack signs: every payload names its workspace and, on Grid, its enterprise
(:func:`scope_of`); ``team_access_granted`` names the workspaces an org admin added; a
bot token's ``auth.test`` names its own. Nothing here calls Slack.

Bolt's ``context.team_id`` is None for an org-wide install: the workspace is the body's
``team_id`` (events, commands), ``team.id`` (clicks) or the event's ``team``, which is
what :func:`scope_of` reads.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["MEMORY", "Organisations", "Scope", "scope_of"]

MEMORY = 100_000
"""Workspaces remembered (an enterprise has at most a few thousand)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The workspace a payload comes from, and its enterprise on Grid."""

    team: str
    enterprise: str | None = None


def scope_of(body: dict[str, Any]) -> Scope | None:
    """The workspace (and enterprise) of any payload: an event, a click, a command; None
    if it names no workspace."""
    team = _text(body.get("team_id")) or _field(body.get("team"), "id")
    event = body.get("event")
    if team is None and isinstance(event, dict):
        team = _text(event.get("team"))
    if team is None:
        team = _field(body.get("user"), "team_id")
    if team is None:
        return None
    enterprise = _text(body.get("enterprise_id")) or _field(body.get("enterprise"), "id")
    if enterprise is None:
        authorizations = body.get("authorizations")
        if isinstance(authorizations, list) and authorizations:
            enterprise = _field(authorizations[0], "enterprise_id")
    return Scope(team, enterprise)


class Organisations:
    """What enterprise each workspace belongs to, as far as Slack has said.

    ``home``: the bot token's own workspace (``auth.test``), if any."""

    def __init__(self, home: Scope | None = None, *, capacity: int = MEMORY) -> None:
        self._enterprises: OrderedDict[str, str] = OrderedDict()
        self._capacity = capacity
        if home is not None:
            self.learn(home)

    def learn(self, scope: Scope) -> None:
        """``scope.team`` belongs to ``scope.enterprise`` (nothing learnt without one)."""
        if scope.enterprise is None:
            return
        self._enterprises[scope.team] = scope.enterprise
        self._enterprises.move_to_end(scope.team)
        while len(self._enterprises) > self._capacity:
            self._enterprises.popitem(last=False)

    def forget(self, team: str) -> None:
        """``team`` left its enterprise's install (``team_access_revoked``)."""
        self._enterprises.pop(team, None)

    def enterprise_of(self, team: str) -> str | None:
        return self._enterprises.get(team)

    def same(self, workspace: str, team: str) -> bool:
        """True if a person whose own team is ``team`` belongs to ``workspace``'s
        organisation: the same workspace, or (on Grid) its enterprise or one of its
        enterprise's workspaces. An unknown workspace of an enterprise is not assumed to
        be one of its own (:meth:`bot.access.trust.TrustGate` asks ``users.info``)."""
        if team == workspace:
            return True
        enterprise = self._enterprises.get(workspace)
        if enterprise is None:
            return False
        return team == enterprise or self._enterprises.get(team) == enterprise


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _field(value: Any, key: str) -> str | None:
    return _text(value.get(key)) if isinstance(value, dict) else None
