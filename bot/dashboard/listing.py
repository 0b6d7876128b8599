"""What App Home and ``/threadpilot`` show and do (docs/slack-setup.md, Home tab and
/threadpilot): a viewer's runs, read from the database, and ``Stop all``.

The listing is read from the database, never from this worker's memory: a click or an
event lands on any worker, and every worker must show the same runs the same way,
whichever worker runs them. The one exception is what a live run has spent so far: it
lives in the run, so only the worker that holds the run shows it (:class:`LiveRuns`),
and the others show nothing rather than a guess. A member sees the runs they started; an admin
(``ADMIN_USER_IDS``) every run of the workspace, but the request of someone else's run
only where its channel is public (:mod:`bot.slack_api.channels`). Top-level runs are listed, each
with its live sub-agents (and theirs) under it, which have controls of their own (Stop,
Abort, Steer…: a person may stop one sub-agent and let the rest go on). Someone who may
not use the app at all (:mod:`bot.access.trust`) is shown only why.

``Stop all`` (admins only) asks every live run of the workspace that is not already
stopping for a Stop, decided by the stop service (:mod:`bot.stopping.stops`) and committed as one
batch (one transaction, however many runs) before the click or the command is
acknowledged; a run already stopping is left alone, since a second Stop would escalate
it to an Abort.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import RunState, StopReason, StopSource, StorageError, strongest
from agent_core.run.delegation import MAX_DEPTH
from agent_core.values.clock import utcnow
from bot import messages
from bot.access.stop_policy import StopAsk
from bot.access.trust import Person
from bot.errors import BudgetNotRunning, SlackError
from bot.slack_api.channels import ChannelPrivacy
from bot.views.home import FEEDBACK_KIND, ListedRun, Listing

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core import Run, RunRecord, Spent, StopRequestRecord
    from bot.access.admins import Admins
    from bot.access.trust import TrustGate
    from bot.config.settings import Settings
    from bot.slack_api.surface import Workspaces
    from bot.stopping.decisions import StopDecision
    from bot.stopping.stops import StopService
    from bot.store_needs import DashboardStore

__all__ = ["ENDED_LIMIT", "LIVE_LIMIT", "Dashboard", "LiveRuns", "StopAll"]

log = structlog.get_logger("bot.dashboard.listing")

LIVE_LIMIT = 500
"""Live runs read for one listing (and for Stop all): far more than a view can show."""
ENDED_LIMIT = 10
READ_BUDGET_S = 0.8
"""Stop all reads the live runs within this, then commits each Stop within the stop
service's own budget: together inside Slack's 3 seconds to acknowledge."""
TEAM_URL_RETRY_S = 60.0
TEAM_URL_BUDGET_S = 1.0
"""``auth.test`` for the workspace's URL may hold a listing up this long, no longer: a
listing answers a slash command, which Slack wants within 3 seconds."""


class _Held(Protocol):
    run: Run


class LiveRuns(Protocol):
    """The runs this worker holds (:class:`bot.runs.supervisor.Supervisor`)."""

    def get(self, run_id: str) -> _Held | None: ...


@dataclass(frozen=True, slots=True)
class StopAll:
    """What ``Stop all`` did before the ack; :meth:`Dashboard.after_stop_all` ends it."""

    decisions: tuple[StopDecision, ...] = ()
    already: int = 0
    """Live runs left alone: already stopping (a Stop there would be an Abort)."""
    refusal: str | None = None
    """Why nothing was asked (not an admin, the database did not answer)."""

    @property
    def answer(self) -> str:
        """What to tell the admin who asked."""
        if self.refusal is not None:
            return self.refusal
        stopped = sum(1 for d in self.decisions if d.changed)
        failed = sum(1 for d in self.decisions if d.verdict is None)
        ended = len(self.decisions) - stopped - failed  # ended or stopping meanwhile
        if not stopped and not failed and not self.already and not ended:
            return messages.STOP_ALL_NOTHING
        return messages.stop_all_done(stopped, self.already + ended, failed)


class Dashboard:
    def __init__(
        self,
        store: DashboardStore,
        settings: Settings,
        workspaces: Workspaces,
        stops: StopService,
        trust: TrustGate,
        live_runs: LiveRuns,
        admins: Admins,
    ) -> None:
        self._admins = admins
        self._store = store
        self._live_runs = live_runs
        self._trust = trust
        self._settings = settings
        self._workspaces = workspaces
        self._stops = stops
        self._channels = ChannelPrivacy(workspaces)
        self._team_urls: dict[str, str] = {}
        self._team_url_failed: dict[str, float] = {}

    def is_admin(self, user: str, team: str) -> bool:
        """What is known now (:meth:`bot.access.admins.Admins.known`), without asking."""
        return self._admins.known(user, team)

    # -- reading -----------------------------------------------------------------------

    async def listing(self, team: str, viewer: str, *, notice: str | None = None) -> Listing:
        """What ``viewer`` sees now. Raises :class:`agent_core.StorageError`.

        Someone who may not use the app (:mod:`bot.access.trust`) sees only why."""
        if (refusal := await self._trust.refusal(Person(viewer, workspace=team))) is not None:
            return Listing(viewer=viewer, admin=False, now=utcnow(), notice=refusal, refused=True)
        admin = await self._admins.is_admin(viewer, team)
        requester = None if admin else viewer
        store = self._store
        live = await store.team_live_runs(team, requester=requester, limit=LIVE_LIMIT)
        ended = await store.team_ended_runs(team, requester=requester, limit=ENDED_LIMIT)
        children = await _live_children(store, [r.id for r in live])
        live_ids = [r.id for r in live] + [c.id for c in children]
        turns = await store.checkpoint_turns(live_ids) if live_ids else {}
        pending = _strongest(await store.pending_stop_requests(live_ids) if live_ids else [])
        # Sub-agents' held calls too: they wait in the same thread, for the same people.
        held = await store.pending_approvals_under(live_ids) if live_ids else []
        ended_ids = [r.id for r in ended]
        votes = await store.events_of_kind(ended_ids, [FEEDBACK_KIND]) if ended_ids else []
        # Someone else's request is shown only where the channel is public. Slack is
        # asked that and the workspace's URL side by side: each call is bounded.
        others = [r.thread.channel for r in (*live, *ended) if r.requester != viewer]
        team_url, public = await asyncio.gather(
            self.team_url(team), self._channels.public(team, others)
        )
        return Listing(
            viewer=viewer,
            admin=admin,
            now=utcnow(),
            live=tuple(
                ListedRun(
                    r,
                    turns.get(r.id),
                    pending.get(r.id),
                    spent=self._spent(r.id),
                    children=_nested(r.id, children, turns, pending),
                )
                for r in live
            ),
            ended=tuple(
                ListedRun(r, feedback=tuple(v for v in votes if v.run_id == r.id)) for r in ended
            ),
            team_url=team_url,
            notice=notice,
            public_channels=public,
            approvals=tuple(held),
        )

    def _spent(self, run_id: str) -> Spent | None:
        """What the run's request has spent so far, if this worker holds the run."""
        held = self._live_runs.get(run_id)
        return held.run.budget.spent() if held is not None else None

    async def team_url(self, team: str) -> str | None:
        """``https://<workspace>.slack.com/`` from ``auth.test``, for links to threads;
        None (the listing shows the channel alone) while it cannot be had."""
        if (url := self._team_urls.get(team)) is not None:
            return url
        failed = self._team_url_failed.get(team)
        if failed is not None and time.monotonic() - failed < TEAM_URL_RETRY_S:
            return None
        try:
            async with asyncio.timeout(TEAM_URL_BUDGET_S):
                surface = await self._workspaces.get(team)
                answer = await surface.budget.call("auth.test")
        except (SlackError, BudgetNotRunning, TimeoutError) as exc:
            error = str(exc) or type(exc).__name__
            log.warning("dashboard.team_url_unavailable", team=team, error=error)
            self._team_url_failed[team] = time.monotonic()
            return None
        url = answer.get("url")
        if not isinstance(url, str) or not url.startswith("https://"):
            self._team_url_failed[team] = time.monotonic()
            return None
        self._team_urls[team] = url
        return url

    # -- Stop all ----------------------------------------------------------------------

    async def stop_all(
        self,
        team: str,
        user: str,
        source: StopSource,
        *,
        delivery: str | None,
        user_team: str | None = None,
    ) -> StopAll:
        """Ask every live run of ``team`` that is not stopping yet for a Stop; before the
        ack, every request in one batch (:meth:`bot.stopping.stops.StopService.request_many`).
        ``delivery`` is the click's (or command's) key, taken by the batch: a
        re-delivery changes nothing, and a new press can retry. ``user_team``: the
        asker's own team, when the payload names it."""
        if not await self._admins.is_admin(user, team):
            return StopAll(refusal=messages.STOP_ALL_NOT_ALLOWED)
        person = Person(user, user_team, team)
        if (refusal := await self._trust.refusal(person)) is not None:
            return StopAll(refusal=refusal)
        try:
            async with asyncio.timeout(READ_BUDGET_S):
                live = await self._store.team_live_runs(team, limit=LIVE_LIMIT)
                pending = await self._store.pending_stop_requests([r.id for r in live])
        except (StorageError, TimeoutError) as exc:
            log.warning("stop_all.not_listed", error=str(exc) or type(exc).__name__)
            return StopAll(refusal=messages.DASHBOARD_UNAVAILABLE)
        stopping = {p.run_id for p in pending} | {
            r.id for r in live if r.state is RunState.STOPPING
        }
        targets = {r.id: r for r in live if r.id not in stopping}
        asks = [_ask(person, source, run_id) for run_id in targets]
        decisions = await self._stops.request_many(asks, targets, delivery=delivery, admin=True)
        log.info(
            "stop_all.requested",
            user=user,
            source=source.value,
            asked=len(asks),
            recorded=sum(1 for d in decisions if d.changed),
            already_stopping=len(stopping),
        )
        return StopAll(tuple(decisions), already=len(stopping))

    async def after_stop_all(self, result: StopAll) -> None:
        """The audit events, and the runs whose worker is gone ended here."""
        await asyncio.gather(*(self._stops.after(d) for d in result.decisions))


def _ask(person: Person, source: StopSource, run_id: str) -> StopAsk:
    return StopAsk(
        user=person.user,
        kind=StopReason.STOP,
        source=source,
        run_id=run_id,
        user_team=person.team,
        team=person.workspace,
    )


def _strongest(requests: Sequence[StopRequestRecord]) -> dict[str, StopRequestRecord]:
    """Each run's request in force (:func:`agent_core.strongest`), by run id."""
    by_run: dict[str, list[StopRequestRecord]] = {}
    for request in requests:
        by_run.setdefault(request.run_id, []).append(request)
    return {run_id: found for run_id, mine in by_run.items() if (found := strongest(mine))}


async def _live_children(store: DashboardStore, parent_ids: list[str]) -> list[RunRecord]:
    """The live sub-agents under ``parent_ids``, and theirs (a sub-agent may delegate
    once more: :data:`agent_core.run.delegation.MAX_DEPTH`)."""
    found: list[RunRecord] = []
    wanted = parent_ids
    for _ in range(MAX_DEPTH):
        if not wanted:
            break
        level = await store.live_children(wanted)
        found += level
        wanted = [c.id for c in level]
    return found


def _nested(
    parent_id: str,
    children: Sequence[RunRecord],
    turns: dict[str, int],
    pending: dict[str, StopRequestRecord],
) -> tuple[ListedRun, ...]:
    """``parent_id``'s live sub-agents, each with its own, oldest first."""
    return tuple(
        ListedRun(
            c, turns.get(c.id), pending.get(c.id), children=_nested(c.id, children, turns, pending)
        )
        for c in children
        if c.parent_id == parent_id
    )
