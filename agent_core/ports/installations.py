"""The Slack app's installations (OAuth mode), one row per workspace or organisation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core.values.records import (
        InstallationRecord,
    )

__all__ = ["InstallationRows"]


class InstallationRows(Protocol):
    """Where the app is installed (:class:`~agent_core.values.records.InstallationRecord`):
    one row per ``(enterprise_id, team_id)``, and the lease that lets exactly one worker
    at a time refresh a row's token."""

    async def save_installation(self, record: InstallationRecord) -> None:
        """Insert or replace the row of ``record``'s ``(enterprise_id, team_id)`` (a
        re-install replaces it; its refresh state starts clean, ``installed_at`` is kept)."""
        ...

    async def get_installation(
        self, enterprise_id: str, team_id: str
    ) -> InstallationRecord | None: ...

    async def delete_installation(self, enterprise_id: str, team_id: str) -> bool:
        """Delete that row; True if there was one."""
        ...

    async def installations_due(
        self, before: datetime, *, now: datetime | None = None, limit: int = 100
    ) -> list[InstallationRecord]:
        """Rows whose token expires before ``before`` and that no worker is refreshing
        (no lease, or its ``refresh_until`` has passed), soonest first."""
        ...

    async def claim_refresh(
        self, enterprise_id: str, team_id: str, owner: str, *, until: datetime, now: datetime
    ) -> InstallationRecord | None:
        """Take the refresh lease of a row until ``until``: the row as it is now, or None
        if another owner holds an unexpired lease (or the row is gone). Asking again as
        the same owner renews it."""
        ...

    async def finish_refresh(
        self,
        enterprise_id: str,
        team_id: str,
        owner: str,
        *,
        secret: str | None,
        expires_at: datetime | None,
        error: str | None,
        retry_at: datetime | None,
        now: datetime,
    ) -> bool:
        """End ``owner``'s lease: with ``secret`` (the refreshed installation) the row
        takes it and its failures are cleared; with ``error`` the failures count one more
        and the next try is ``retry_at``. False if ``owner`` no longer held the lease (the
        row was then left as it was)."""
        ...

    async def failing_refreshes(self, *, limit: int = 100) -> list[InstallationRecord]:
        """Rows whose last refresh failed, most failures first (``--check``)."""
        ...

    async def installations_after(
        self, after: tuple[str, str] | None = None, *, limit: int = 100
    ) -> list[InstallationRecord]:
        """Every row, a page at a time: those keyed after ``after`` (``(enterprise_id,
        team_id)``, None: from the first), in key order."""
        ...

    async def replace_secret(self, enterprise_id: str, team_id: str, old: str, new: str) -> bool:
        """Set the row's ``secret`` to ``new`` only if it is still ``old`` (re-sealing
        with a new key never overwrites a refresh or a re-install made meanwhile)."""
        ...
