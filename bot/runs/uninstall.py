"""A workspace uninstalls the app (``app_uninstalled``, ``tokens_revoked``).

Slack sends both, in either order, maybe to different workers, and neither with a token
that still works. What follows, once per workspace:

1. its installation is forgotten (:class:`Installations`: OAuth mode's store deletes it;
   with a bot token there is none to delete, :data:`NO_INSTALLATIONS`);
2. its live runs end without a word to Slack (:class:`bot.runs.team_end.TeamEnd`), this
   worker's waited for a moment, so that their rows can go too;
3. its rows are purged in batches (:meth:`agent_core.ports.RetentionStore.forget_team`):
   its ended runs and all that hangs off them, its threads' participants, handled stop
   requests and settled guidance. Runs still ending elsewhere are kept, and counted;
4. one audit event with the counts (``team.uninstalled``, filed under ``team:<id>``),
   written by whichever event comes first (the shared delivery log decides).

From then on this process ignores the workspace's payloads (:meth:`Uninstaller.gone`)
until it is installed again (:meth:`Uninstaller.reinstalled`); a re-install starts clean,
as nothing of the workspace is left. Other workspaces are untouched.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import AuditEvent, StorageError
from bot.runs.team_end import team_event_run

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core.values.records import TeamForgotten
    from bot.inbound.dedupe import Deliveries
    from bot.runs.supervisor import Supervisor
    from bot.runs.team_end import TeamEnd

__all__ = [
    "AUDIT_KIND",
    "LOCAL_RUNS_WAIT_S",
    "NO_INSTALLATIONS",
    "Installations",
    "TeamPurge",
    "Uninstaller",
]

log = structlog.get_logger("bot.runs.uninstall")

AUDIT_KIND = "team.uninstalled"
LOCAL_RUNS_WAIT_S = 5.0
"""How long this worker's runs of the workspace get to end before its rows are purged."""
_AUDIT_WINDOW_S = 3600
"""The two events of one uninstall come within this; one audit event per window."""


class Installations(Protocol):
    """Forgets a workspace's installation (OAuth mode's store)."""

    async def forget_installation(self, team: str, enterprise: str | None) -> None: ...


class _NoInstallations:
    """A bot token's app has no stored installation to forget."""

    async def forget_installation(self, team: str, enterprise: str | None) -> None:
        return None


NO_INSTALLATIONS: Installations = _NoInstallations()


class TeamPurge(Protocol):
    """What uninstalling needs of the store."""

    async def forget_team(self, team: str, *, batch_size: int = ...) -> TeamForgotten: ...

    async def record_event(self, event: AuditEvent) -> None: ...


class Uninstaller:
    def __init__(
        self,
        store: TeamPurge,
        team_end: TeamEnd,
        supervisor: Supervisor,
        deliveries: Deliveries,
        *,
        installations: Installations = NO_INSTALLATIONS,
        local_runs_wait_s: float = LOCAL_RUNS_WAIT_S,
    ) -> None:
        self._store = store
        self._team_end = team_end
        self._supervisor = supervisor
        self._deliveries = deliveries
        self._installations = installations
        self._wait_s = local_runs_wait_s
        self._gone: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        """One uninstall of a workspace at a time here: the pair's second event waits
        for the first, then finds (and purges) only what was left."""

    def gone(self, team: str) -> bool:
        """True if ``team`` uninstalled the app (here) and has not installed it again."""
        return team in self._gone

    def reinstalled(self, team: str) -> None:
        """``team`` installed the app again: its payloads are served again."""
        self._gone.discard(team)

    async def uninstall(
        self, team: str, enterprise: str | None, *, why: str, at: datetime
    ) -> TeamForgotten | None:
        """Forget ``team`` (see the module's steps); what was purged (None if the
        database failed: logged, and the other event of the pair tries again)."""
        self._gone.add(team)
        async with self._locks.setdefault(team, asyncio.Lock()):
            return await self._uninstall(team, enterprise, why=why, at=at)

    async def _uninstall(
        self, team: str, enterprise: str | None, *, why: str, at: datetime
    ) -> TeamForgotten | None:
        log.info("team.uninstalling", team=team, enterprise=enterprise, why=why)
        await self._installations.forget_installation(team, enterprise)
        ended = await self._team_end.end_team(team, why=why)
        await self._local_runs_ended(team)
        try:
            forgotten = await self._store.forget_team(team)
        except StorageError:
            log.exception("team.not_purged", team=team, why=why)
            return None
        log.info(
            "team.uninstalled",
            team=team,
            why=why,
            runs_ended=ended,
            runs_deleted=forgotten.runs,
            rows_deleted=forgotten.rows,
            runs_kept=forgotten.kept,
        )
        await self._audit_once(team, enterprise, why, at, ended, forgotten)
        return forgotten

    async def _local_runs_ended(self, team: str) -> None:
        tasks = {
            live.task
            for live in self._supervisor.live_runs
            if live.run.thread.team == team and live.task is not None
        }
        if tasks:
            await asyncio.wait(tasks, timeout=self._wait_s)

    async def _audit_once(
        self,
        team: str,
        enterprise: str | None,
        why: str,
        at: datetime,
        ended: int,
        forgotten: TeamForgotten,
    ) -> None:
        window = int(at.timestamp()) // _AUDIT_WINDOW_S
        detail = {
            "enterprise": enterprise,
            "why": why,
            "runs_ended": ended,
            "runs_deleted": forgotten.runs,
            "rows_deleted": forgotten.rows,
            "runs_kept": forgotten.kept,
        }
        try:
            if not await self._deliveries.first(f"uninstall:{team}:{window}"):
                return  # the other event of the pair wrote it
            await self._store.record_event(
                AuditEvent(team_event_run(team), AUDIT_KIND, "slack", detail=detail)
            )
        except StorageError:
            log.exception("team.uninstall_not_audited", team=team)
