"""Who is this person: the one check every entry makes before anyone acts
(docs/slack-setup.md, Who may use threadpilot).

People from another organisation (Slack Connect: their team is not the workspace the app
is installed in) and guests (``is_restricted`` / ``is_ultra_restricted``) start nothing,
steer nothing and press nothing, unless ``ALLOW_EXTERNAL_USERS`` / ``ALLOW_GUESTS`` say
so. Every entry asks :meth:`TrustGate.refusal` before it changes anything: mentions, DMs
and replies (:mod:`bot.handlers.mentions`, :mod:`bot.handlers.steering`), every request to
end a run (:class:`bot.stopping.stops.StopService`: the buttons, Slack's native stop, stop words,
App Home, ``Stop all``), ``Resume now`` / ``Don't resume``, the Home tab, ``/threadpilot``
and feedback. A refused person gets the refusal as an ephemeral (or on their Home tab).

What decides:

- A person's team, when the payload names it (``user_team`` on a message,
  ``user.team_id`` on a click), against the workspace the payload comes from: another
  team is another organisation, decided without a call. Otherwise ``users.info``'s
  ``team_id``.
- Enterprise Grid: the workspaces of one enterprise are one organisation
  (:class:`bot.access.organisation.Organisations`). A person of a workspace of the same
  enterprise is a coworker; a team not yet known to be one of the enterprise's is
  looked up (``users.info``'s ``enterprise_user.enterprise_id``), and another
  enterprise is another organisation.
- Guest status only ``users.info`` knows. Its answer is cached (:data:`CACHE_TTL_S`), so
  a click is decided from memory when its person acted lately; a lookup before an ack is
  bounded by :data:`LOOKUP_BUDGET_S`. A person who cannot be looked up in that time is
  refused, and told to try again: the gate fails closed.
- With both settings ``true``, nobody is looked up.

The same rule says whose words in a thread are untrusted (:meth:`TrustGate.untrusted`):
what a person the gate would refuse wrote enters the model's history and
``slack_read_thread`` labelled as untrusted, never as a coworker's words
(:mod:`bot.inbound.thread_history`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog

from bot import messages
from bot.access.organisation import Organisations, Scope, scope_of
from bot.errors import BudgetNotRunning, SlackError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from bot.config.settings import Settings
    from bot.slack_api.surface import Workspaces

__all__ = [
    "CACHE_TTL_S",
    "LOOKUP_BUDGET_S",
    "Distrust",
    "Person",
    "Profile",
    "TrustGate",
    "person_of",
]

log = structlog.get_logger("bot.access.trust")

CACHE_TTL_S = 15 * 60.0
"""How long a ``users.info`` answer is trusted: guest status rarely changes."""
CACHE_SIZE = 10_000
LOOKUP_BUDGET_S = 0.5
"""A lookup before an ack gets this long (the database work after it has its own 2 s)."""


class Distrust(StrEnum):
    """Why the gate does not let a person act (the settings do not allow them)."""

    EXTERNAL = "external"
    """From another organisation (Slack Connect)."""
    GUEST = "guest"
    UNCHECKED = "unchecked"
    """Slack did not say who they are in time: the gate fails closed."""


_REFUSALS = {
    Distrust.EXTERNAL: messages.EXTERNAL_NOT_ALLOWED,
    Distrust.GUEST: messages.GUEST_NOT_ALLOWED,
    Distrust.UNCHECKED: messages.PERSON_NOT_CHECKED,
}


@dataclass(frozen=True, slots=True)
class Person:
    """Someone who asks the app for something, as the payload names them."""

    user: str
    team: str | None = None
    """Their own team, when the payload says (``user_team``, ``user.team_id``)."""
    workspace: str | None = None
    """The workspace the payload comes from (the gate's own team if not said)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """What ``users.info`` says about a person, as far as trust goes."""

    team: str
    guest: bool
    stranger: bool = False
    """Slack's ``is_stranger``: someone the workspace only meets in a Slack Connect channel."""
    enterprise: str | None = None
    """Their enterprise on Grid (``enterprise_user.enterprise_id``)."""
    admin: bool = False
    """A workspace admin or owner (``is_admin``, ``is_owner``)."""


def person_of(body: dict[str, Any]) -> Person | None:
    """The person behind any payload: an event (``event.user``, ``event.user_team``), a
    click (``user.id``, ``user.team_id``) or a slash command (``user_id``), with the
    workspace the payload comes from (:func:`bot.access.organisation.scope_of`)."""
    scope = scope_of(body)
    workspace = scope.team if scope is not None else None
    event = body.get("event")
    if isinstance(event, dict):
        return _person(event.get("user"), event.get("user_team"), workspace)
    user = body.get("user")
    if isinstance(user, dict):
        return _person(user.get("id"), user.get("team_id"), workspace)
    return _person(body.get("user_id"), None, workspace)


def _person(user: Any, team: Any, workspace: str | None = None) -> Person | None:
    if not isinstance(user, str) or not user:
        return None
    return Person(user, team if isinstance(team, str) and team else None, workspace)


class TrustGate:
    """Decides whether a person may act; ``team`` is the workspace a bot token serves,
    which a person's own ``workspace`` overrides (several workspaces by OAuth);
    ``organisations`` says which workspaces are one enterprise."""

    def __init__(
        self,
        settings: Settings,
        workspaces: Workspaces,
        team: str,
        *,
        organisations: Organisations | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._allow_external = settings.ALLOW_EXTERNAL_USERS
        self._allow_guests = settings.ALLOW_GUESTS
        self._workspaces = workspaces
        self._team = team
        self._orgs = organisations if organisations is not None else Organisations()
        self._clock = clock
        self._profiles: OrderedDict[tuple[str, str], tuple[float, Profile]] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def enterprise_of(self, team: str) -> str | None:
        """The Enterprise Grid org of workspace ``team``, as far as Slack has said."""
        return self._orgs.enterprise_of(team)

    async def refusal(self, person: Person) -> str | None:
        """None if ``person`` may act; otherwise what to tell them (nothing changes)."""
        distrust = await self.distrust(person)
        if distrust is None:
            return None
        if distrust is not Distrust.UNCHECKED:
            log.info("trust.refused", user=person.user, reason=distrust.value)
        return _REFUSALS[distrust]

    async def distrust(self, person: Person) -> Distrust | None:
        """None if ``person`` may act; otherwise why not."""
        if self._allow_external and self._allow_guests:
            return None
        workspace = person.workspace or self._team
        ours = person.team is not None and self._orgs.same(workspace, person.team)
        if person.team is not None and not ours and not self._allow_external:
            if self._orgs.enterprise_of(workspace) is None:
                return Distrust.EXTERNAL
            # Grid: maybe a workspace of the same enterprise not heard of yet; users.info says.
        if self._allow_guests and ours:
            return None  # of this organisation, as the payload says; guests may act
        profile = await self.profile(person.user, workspace)
        if profile is None:
            return Distrust.UNCHECKED
        if not self._of(workspace, profile) and not self._allow_external:
            return Distrust.EXTERNAL
        if profile.guest and not self._allow_guests:
            return Distrust.GUEST
        return None

    def _of(self, workspace: str, profile: Profile) -> bool:
        """True if ``profile`` is of ``workspace``'s organisation (learning, on Grid, that
        the person's team is one of its enterprise's)."""
        if profile.stranger:
            return False
        if self._orgs.same(workspace, profile.team):
            return True
        enterprise = self._orgs.enterprise_of(workspace)
        if enterprise is None or profile.enterprise != enterprise:
            return False
        self._orgs.learn(Scope(profile.team, enterprise))
        return True

    async def is_workspace_admin(self, user: str, workspace: str | None = None) -> bool:
        """True if ``users.info`` says ``user`` is an admin or owner of ``workspace``'s
        organisation (False when Slack does not answer in time: an admin's powers fail
        closed)."""
        workspace = workspace or self._team
        profile = await self.profile(user, workspace)
        return profile is not None and profile.admin and self._of(workspace, profile)

    async def untrusted(
        self, thread: Iterable[Mapping[str, Any]], *, workspace: str | None = None
    ) -> dict[str, Distrust]:
        """The people who wrote ``thread``'s messages (as ``conversations.replies`` gives
        them; apps' posts are not people's) whom the gate would refuse, and why: their
        words are data, not a coworker's (all looked up at once, each bounded as before).
        ``workspace``: the thread's (the gate's own team if not said)."""
        if self._allow_external and self._allow_guests:
            return {}
        people: dict[str, Person] = {}
        for message in thread:
            user, team = message.get("user"), message.get("user_team")
            if message.get("bot_id") or message.get("subtype") == "bot_message":
                continue
            if (person := _person(user, team, workspace)) is not None:
                people.setdefault(person.user, person)
        found = await asyncio.gather(*(self.distrust(p) for p in people.values()))
        return {user: why for user, why in zip(people, found, strict=True) if why is not None}

    async def profile(self, user: str, workspace: str | None = None) -> Profile | None:
        """``users.info`` about ``user`` (asked with ``workspace``'s token), from the cache
        or within the budget; None if Slack did not answer in time (or refused).

        Asked and remembered per workspace: what Slack says of a person (``is_stranger``
        above all) is relative to the workspace that asks."""
        workspace = workspace or self._team
        key = (workspace, user)
        if (cached := self._cached(key)) is not None:
            return cached
        # One lookup per person at a time: the others wait for its answer in the cache.
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with asyncio.timeout(LOOKUP_BUDGET_S), lock:
                if (cached := self._cached(key)) is not None:
                    return cached
                surface = await self._workspaces.get(workspace)
                answer = await surface.budget.call("users.info", user=user)
        except (SlackError, BudgetNotRunning, TimeoutError) as exc:
            log.warning("trust.lookup_failed", user=user, error=str(exc) or type(exc).__name__)
            return None
        finally:
            if not lock.locked():
                # Nobody holds it: forget it (a caller racing in makes a new one, which
                # costs one extra lookup at worst).
                self._locks.pop(key, None)
        profile = _profile(answer.get("user"))
        if profile is None:
            log.warning("trust.lookup_unreadable", user=user)
            return None
        self._remember(key, profile)
        return profile

    def _cached(self, key: tuple[str, str]) -> Profile | None:
        found = self._profiles.get(key)
        if found is None:
            return None
        at, profile = found
        if self._clock() - at > CACHE_TTL_S:
            del self._profiles[key]
            return None
        return profile

    def _remember(self, key: tuple[str, str], profile: Profile) -> None:
        self._profiles[key] = (self._clock(), profile)
        self._profiles.move_to_end(key)
        while len(self._profiles) > CACHE_SIZE:
            self._profiles.popitem(last=False)


def _profile(user: Any) -> Profile | None:
    if not isinstance(user, dict) or not isinstance(user.get("team_id"), str):
        return None
    guest = bool(user.get("is_restricted") or user.get("is_ultra_restricted"))
    grid = user.get("enterprise_user")
    enterprise = grid.get("enterprise_id") if isinstance(grid, dict) else None
    return Profile(
        user["team_id"],
        guest,
        bool(user.get("is_stranger")),
        enterprise if isinstance(enterprise, str) and enterprise else None,
        bool(user.get("is_admin") or user.get("is_owner")),
    )
