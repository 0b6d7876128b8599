"""The parts of the app that take work, each built once and wired when it is built: the
workspaces' Slack surface, the trust gate and the workspace admins, the worker (and its
supervisor) running the app's agent, the stop service, what ends a workspace's runs, the
App Home and the approval clicks; then the handlers' context and what the listeners are
given beside it. Nothing here opens a connection or starts a task: the app starts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core import BUILTIN_TOOLS, Agent, AgentConfig, RetryPolicy
from bot import messages
from bot.access.admins import NO_INSTALLERS, Admins
from bot.access.organisation import Organisations, Scope
from bot.access.trust import TrustGate
from bot.approvals.clicks import ApprovalClicks
from bot.approvals.desk import ApprovalDesk
from bot.dashboard.listing import Dashboard
from bot.dashboard.refresh import HomeRefresher
from bot.handlers.context import BotContext
from bot.inbound.dedupe import Deliveries
from bot.process.bolt_app import ListenerParts
from bot.runs.team_end import TeamEnd
from bot.runs.tools import slack_read_thread
from bot.runs.uninstall import NO_INSTALLATIONS, Uninstaller
from bot.slack_api.surface import Workspaces
from bot.stopping.stops import ACK_BUDGET_S, StopService
from bot.workers.worker import Worker, default_worker_id

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slack_sdk.web.async_client import AsyncWebClient

    from agent_core import ChatModel, Tool
    from agent_core.ports import Store
    from bot.config.settings import Settings
    from bot.installs.lookup import InstallationLookup
    from bot.observe.loop_load import LoopLoad
    from bot.observe.metrics import Metrics
    from bot.slack_api.identity import AppIdentity

__all__ = ["Parts", "assemble"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What :func:`assemble` built, for the app to start, serve and close."""

    ctx: BotContext
    listeners: ListenerParts
    load: LoopLoad | None
    """The event loop's load, which the worker reads when ``BUSY_LOOP_LAG_MS`` is set (the
    app starts and closes it)."""


def assemble(
    settings: Settings,
    client: AsyncWebClient,
    me: AppIdentity,
    store: Store,
    *,
    model: ChatModel,
    tools: Sequence[Tool],
    metrics: Metrics,
    installs: InstallationLookup | None,
) -> Parts:
    """Build the parts that take work. ``tools``: the MCP servers'; ``installs``: OAuth
    mode's installations (None with a bot token)."""
    workspaces = Workspaces(
        client, me, metrics=metrics, credentials=installs, history_limit=settings.history_limit
    )
    organisations, trust, admins = _access(settings, workspaces, me, installs)
    desk = ApprovalDesk(store, workspaces, metrics=metrics)
    worker = _worker(settings, store, workspaces, me, trust, desk, model, tools, metrics)
    deliveries = Deliveries(store)
    stops = StopService(
        store,
        worker.supervisor,
        worker,
        workspaces,
        settings,
        deliveries,
        trust,
        metrics=metrics,
        admins=admins,
    )
    clicks = ApprovalClicks(
        store, desk, settings, trust, workspaces, budget_s=ACK_BUDGET_S, admins=admins
    )
    ctx = BotContext(
        settings,
        worker.supervisor,
        workspaces,
        me,
        store,
        worker,
        stops,
        deliveries,
        trust,
        admins,
        clicks,
        installs=installs,
    )
    return Parts(ctx, _listener_parts(ctx, organisations), worker.load)


def _access(
    settings: Settings,
    workspaces: Workspaces,
    me: AppIdentity,
    installs: InstallationLookup | None,
) -> tuple[Organisations, TrustGate, Admins]:
    """Who may use the app: the trust gate, learning which workspaces are one enterprise
    (:mod:`bot.access.organisation`, starting from the app's own workspace when it has
    one); and who administers a workspace's runs (in OAuth mode its installer too)."""
    own = Scope(me.team_id, me.enterprise_id) if me.team_id else None
    organisations = Organisations(own)
    trust = TrustGate(settings, workspaces, me.team_id, organisations=organisations)
    installers = NO_INSTALLERS if installs is None else installs
    return organisations, trust, Admins(settings, trust, installers)


def _worker(
    settings: Settings,
    store: Store,
    workspaces: Workspaces,
    me: AppIdentity,
    trust: TrustGate,
    desk: ApprovalDesk,
    model: ChatModel,
    tools: Sequence[Tool],
    metrics: Metrics,
) -> Worker:
    """This process's worker (it builds the supervisor), running the app's agent."""
    agent = _agent(
        settings,
        model,
        [*BUILTIN_TOOLS, slack_read_thread(workspaces, me, trust), *tools],
        store,
        desk,
    )
    return Worker(
        store,
        agent,
        workspaces,
        settings,
        worker_id=settings.WORKER_ID or default_worker_id(),
        me=me,
        trust=trust,
        metrics=metrics,
        approvals=desk,
    )


def _agent(
    settings: Settings,
    model: ChatModel,
    tools: Sequence[Tool],
    store: Store,
    desk: ApprovalDesk,
) -> Agent:
    """The app's agent: ``model`` with ``tools``, limited by the settings; its calls that
    need approval wait at ``desk``."""
    return Agent(
        model,
        tools,
        config=AgentConfig(
            max_turns=settings.MAX_TURNS,
            final_turn_timeout_s=settings.FINAL_TURN_TIMEOUT,
            tool_timeout_s=settings.TOOL_TIMEOUT,
            approval_timeout_s=settings.APPROVAL_TIMEOUT,
            how_to_continue=messages.HOW_TO_CONTINUE,
            name_person=messages.mention,
            retry=RetryPolicy(max_retry_after_s=settings.MAX_RETRY_AFTER),
            budget=settings.run_limits.budget,
            max_tool_calls_per_step=settings.run_limits.max_tool_calls_per_step,
            max_children_per_run=settings.run_limits.max_children_per_run,
            context_window=settings.run_limits.context_window,
        ),
        store=store,
        approvals=desk,
    )


def _listener_parts(ctx: BotContext, organisations: Organisations) -> ListenerParts:
    """What the listeners are given beside the context: what ends a workspace's runs (its
    access revoked; the app uninstalled, which in OAuth mode deletes the workspace's
    installation too) and the App Home."""
    team_end = TeamEnd(ctx.store, ctx.supervisor, ctx.workspaces)
    installs = ctx.installs
    uninstaller = Uninstaller(
        ctx.store,
        team_end,
        ctx.supervisor,
        ctx.deliveries,
        installations=NO_INSTALLATIONS if installs is None else installs,
    )
    dashboard = Dashboard(
        ctx.store, ctx.settings, ctx.workspaces, ctx.stops, ctx.trust, ctx.supervisor, ctx.admins
    )
    home = HomeRefresher(dashboard, ctx.store, ctx.workspaces)
    return ListenerParts(organisations, team_end, uninstaller, dashboard, home)
