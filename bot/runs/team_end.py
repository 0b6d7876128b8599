"""Ending one workspace's live runs without a word to Slack (uninstall, access revoked).

The workspace can no longer be reached: its token is revoked, or the org admin took the
app away from it. So nothing is posted: the workspace's Slack surface is dropped first
(:meth:`bot.slack_api.surface.Workspaces.drop`: every call a run of it still makes fails
at once, here, instead of reaching Slack), then each of its runs this worker holds is
aborted on the spot, and every other live run of the workspace (another worker's) gets
an Abort request in the database, which its owner honours as any other; its own calls to
Slack are then refused by Slack (the token is gone), which costs a log line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import StopReason, StopSource, StorageError

if TYPE_CHECKING:
    from agent_core import RunRecord, StopRequestRecord, ThreadKey
    from bot.runs.supervisor import Supervisor
    from bot.slack_api.surface import Workspaces

__all__ = [
    "ENDED_BY",
    "TEAM_EVENT_RUN",
    "TEAM_RUNS_LIMIT",
    "TeamEnd",
    "TeamEndStore",
    "team_event_run",
]

log = structlog.get_logger("bot.runs.team_end")

ENDED_BY = "slack"
"""Who the runs' Abort is recorded as asked by: Slack itself, not a person."""
TEAM_RUNS_LIMIT = 10_000
TEAM_EVENT_RUN = "team:"
"""Audit events about a whole workspace are filed under ``team:<team id>``."""


def team_event_run(team: str) -> str:
    """The run id a workspace's own audit events are filed under."""
    return f"{TEAM_EVENT_RUN}{team}"


class TeamEndStore(Protocol):
    """What ending a workspace's runs needs of the store."""

    async def team_live_runs(
        self, team: str, *, requester: str | None = None, limit: int = 100
    ) -> list[RunRecord]: ...

    async def add_stop_request(
        self,
        run_id: str,
        thread: ThreadKey,
        kind: StopReason,
        requested_by: str,
        *,
        request_id: str | None = None,
    ) -> StopRequestRecord: ...


class TeamEnd:
    def __init__(self, store: TeamEndStore, supervisor: Supervisor, workspaces: Workspaces) -> None:
        self._store = store
        self._supervisor = supervisor
        self._workspaces = workspaces

    async def end_team(self, team: str, *, why: str) -> int:
        """End ``team``'s live runs without calling Slack; how many were asked to end."""
        await self._workspaces.drop(team)
        ended: set[str] = set()
        for live in self._supervisor.live_runs:
            if live.run.thread.team == team and not live.lost:
                live.run.request_stop(StopReason.ABORT, ENDED_BY, source=StopSource.LOCAL)
                ended.add(live.run.id)
        try:
            stored = await self._store.team_live_runs(team, limit=TEAM_RUNS_LIMIT)
            for record in stored:
                if record.id in ended or self._supervisor.holds(record.id):
                    continue
                await self._store.add_stop_request(
                    record.id, record.thread, StopReason.ABORT, ENDED_BY
                )
                ended.add(record.id)
        except StorageError:
            log.exception("team.runs_not_ended", team=team, why=why)
        log.info("team.runs_ended", team=team, why=why, runs=len(ended))
        return len(ended)
