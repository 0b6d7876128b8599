"""What each part of the Slack app needs of the store: the core's narrow ports
(:mod:`agent_core.ports`), joined only where one part uses several.

Each part takes its own protocol here, or a single port, never the whole
:class:`agent_core.ports.Store`: only what opens the store and wires the parts (the app,
the worker, the handlers' context) holds all of it.
"""

from __future__ import annotations

from typing import Protocol

from agent_core.ports import (
    ApprovalStore,
    DashboardQueries,
    GuidanceStore,
    LeaseStore,
    ParticipantStore,
    QueueStore,
    ResumeStore,
    RunQueries,
    RunStore,
    StopRequestStore,
)

__all__ = [
    "ApprovalClickStore",
    "ApprovalDeskStore",
    "DashboardStore",
    "GuidanceMarksStore",
    "QueueOrderStore",
    "ReconcilerStore",
    "ResumeDecisions",
    "ResumeSchedule",
    "RunQueueStore",
    "SessionStore",
    "StopIntakeStore",
    "StopWatchStore",
    "SupervisorStore",
]


class GuidanceMarksStore(GuidanceStore, RunStore, Protocol):
    """Settling guidance, with its audit events (:mod:`bot.steering.guidance`)."""


class SessionStore(GuidanceStore, RunStore, Protocol):
    """A run's Slack session: its run's records and its guidance (:mod:`bot.runs.session`)."""


class DashboardStore(DashboardQueries, StopRequestStore, ApprovalStore, Protocol):
    """App Home and ``/threadpilot``: the listings, the pending stops and the pending
    approvals (:mod:`bot.dashboard.listing`)."""


class StopIntakeStore(RunStore, RunQueries, StopRequestStore, ParticipantStore, Protocol):
    """Taking a person's stop, abort or resume decision: the run, who wrote in its
    thread, the request and its audit event (:mod:`bot.stopping.stops`,
    :mod:`bot.stopping.resume_controls`)."""


class QueueOrderStore(QueueStore, RunStore, Protocol):
    """Places in the queue (:mod:`bot.runs.queue_places`)."""


class ResumeDecisions(ResumeStore, RunQueries, RunStore, Protocol):
    """Deciding a run's resume, and starting one in place (:func:`bot.workers.resume.decide`,
    :func:`bot.workers.resume.resume_in_place`)."""


class ResumeSchedule(ResumeDecisions, SessionStore, QueueStore, Protocol):
    """Deciding and starting resumes, each in a session of its own, and Continue's
    admission (:mod:`bot.workers.resume`)."""


class RunQueueStore(StopRequestStore, ResumeSchedule, Protocol):
    """Taking runs from the queue to a session, and ending the ones stopped while
    waiting, with their resume decision (:mod:`bot.runs.run_queue`)."""


class StopWatchStore(GuidanceStore, RunStore, StopRequestStore, Protocol):
    """What a worker's stop watcher scans: pending requests and guidance
    (:mod:`bot.workers.stop_watch`)."""


class ReconcilerStore(
    LeaseStore, QueueStore, ResumeStore, RunQueries, RunStore, StopRequestStore, Protocol
):
    """Ending the runs whose worker went away (:mod:`bot.workers.reconciler`)."""


class SupervisorStore(LeaseStore, QueueStore, RunQueries, SessionStore, Protocol):
    """The runs this worker drives (:mod:`bot.runs.supervisor`)."""


class ApprovalDeskStore(ApprovalStore, RunStore, Protocol):
    """Held tool calls and their audit events (:mod:`bot.approvals.desk`)."""


class ApprovalClickStore(ApprovalStore, RunStore, ParticipantStore, Protocol):
    """Deciding an Approve / Deny click: the approval, its run, who wrote in the thread
    (:mod:`bot.approvals.clicks`)."""
