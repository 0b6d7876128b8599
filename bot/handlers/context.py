"""What every handler needs, built once at start-up and passed in (no globals)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_core.ports import Store
    from bot.access.admins import Admins
    from bot.access.trust import TrustGate
    from bot.approvals.clicks import ApprovalClicks
    from bot.config.settings import Settings
    from bot.inbound.dedupe import Deliveries
    from bot.installs.lookup import InstallationLookup
    from bot.runs.supervisor import Supervisor
    from bot.slack_api.identity import AppIdentity
    from bot.slack_api.surface import Workspaces
    from bot.stopping.stops import StopService
    from bot.workers.worker import Worker

__all__ = ["BotContext"]


@dataclass(frozen=True, slots=True)
class BotContext:
    settings: Settings
    supervisor: Supervisor
    workspaces: Workspaces
    me: AppIdentity
    """The app's ids, from ``auth.test``: which posts are ours, and who a mention names."""
    store: Store
    worker: Worker
    stops: StopService
    """The one way to ask a run to end (buttons, native stop, stop words, ...)."""
    deliveries: Deliveries
    """Which Slack deliveries were taken: events, clicks, feedback. One per process, so
    what one handler took, another knows without asking the database."""

    trust: TrustGate
    """Who may act at all (external people and guests): every entry asks it first."""
    admins: Admins
    """Who administers a workspace's runs, beside the requester: they may stop, steer and
    decide for any of its runs."""
    approvals: ApprovalClicks
    """Approve and Deny clicks on held tool calls (:mod:`bot.approvals`)."""
    installs: InstallationLookup | None = None
    """OAuth mode: the installations (``installs.store`` is slack_sdk's installation
    store: ``async_delete_installation`` at an uninstall); None with a bot token."""
