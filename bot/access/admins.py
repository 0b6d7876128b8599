"""Who is an admin of a workspace's runs: one rule, asked wherever admins may do more.

An admin may stop or abort anyone's run, decide anyone's held call, see and stop every
run of the workspace on App Home and ``/threadpilot`` (``Stop all``). They are:

- everyone in ``ADMIN_USER_IDS`` (in every workspace);
- the workspace's own admins and owners, as ``users.info`` says (``is_admin``,
  ``is_owner``; asked through :class:`bot.access.trust.TrustGate`'s cache, so a click is
  usually decided from memory, and only when the answer matters);
- the person who installed the app in the workspace (OAuth mode's installation knows
  them: :class:`Installers`; with a bot token there is none).

An admin of one workspace is nobody special in another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.access.trust import TrustGate
    from bot.config.settings import Settings

__all__ = ["NO_INSTALLERS", "Admins", "Installers"]


class Installers(Protocol):
    """Who installed the app in a workspace (OAuth mode's installation store)."""

    async def installer_of(self, team: str) -> str | None: ...


class _NoInstallers:
    """A bot token's app keeps no installation: nobody is its installer."""

    async def installer_of(self, team: str) -> str | None:
        return None


NO_INSTALLERS: Installers = _NoInstallers()


class Admins:
    def __init__(
        self, settings: Settings, trust: TrustGate, installers: Installers = NO_INSTALLERS
    ) -> None:
        self._ids = settings.ADMIN_USER_IDS
        self._trust = trust
        self._installers = installers
        self._confirmed: set[tuple[str, str]] = set()

    def named(self, user: str) -> bool:
        """True if ``ADMIN_USER_IDS`` names ``user``."""
        return user in self._ids

    def known(self, user: str, team: str) -> bool:
        """What is known without asking anyone: named, or found an admin of ``team``
        before (for what must not wait, such as which Home tabs to refresh)."""
        return user in self._ids or (user, team) in self._confirmed

    async def is_admin(self, user: str, team: str | None) -> bool:
        """True if ``user`` is an admin of ``team``'s runs (see the module)."""
        if user in self._ids:
            return True
        if team is None:
            return False
        admin = await self._installers.installer_of(team) == user or (
            await self._trust.is_workspace_admin(user, team)
        )
        if admin:
            self._confirmed.add((user, team))
        else:
            self._confirmed.discard((user, team))
        return admin
