"""The interfaces the core depends on. The records that cross them are in
:mod:`agent_core.values.chat` (the chat model's) and :mod:`agent_core.values.records` (the stores').

Adapters live beside each other in :mod:`agent_core.stores` (``memory`` here; ``sqlite``
and ``postgres`` for durable, multi-worker state) and one contract test suite runs against
all of them. The core never imports an adapter.

- :class:`ChatModel` streams one model turn (one adapter per API:
  :mod:`agent_core.models.openai_chat` for Chat Completions,
  :mod:`agent_core.models.openai_responses`, :mod:`agent_core.models.anthropic_messages`).
- :class:`RunStore` keeps runs, their checkpoints (the conversation after each turn) and
  the audit trail. Terminal state is written by compare-and-set: exactly one wins.
- :class:`StopRequestStore` keeps stop requests so that a click landing in any worker
  reaches the run's owner, and survives a restart (docs/operations.md, Several workers).
- :class:`RunQueries` finds runs by what they became, and writes fields without moving
  state: what the reconciler needs to repost final messages and resume runs.
- :class:`DeliveryLog` tells every worker whether a Slack delivery (an event, a click)
  was already taken by some worker, so a re-delivery changes nothing.
- :class:`ParticipantStore` remembers who wrote in which Slack thread, so every worker
  decides alike who may stop a run under ``STOP_POLICY=participants``.
- :class:`GuidanceStore` keeps the replies people write to a live run until its owner
  has given them to the model, or the run ended first (docs/stopping.md, Guidance).
- :class:`DashboardQueries` reads what App Home and ``/threadpilot`` list: a workspace's
  runs (a person's or everyone's), the runs that changed lately, checkpoint turns and
  audit events of some kinds (docs/slack-setup.md, Home tab and /threadpilot).
- :class:`ResumeStore` keeps each ended run's resume decision, the durable schedule any
  worker starts a resume from (docs/stopping.md, "Why a run ended").
- :class:`QueueStore` keeps the runs waiting for room under ``MAX_LIVE_RUNS``: any worker
  with room takes the oldest (docs/operations.md, Queue and MAX_LIVE_RUNS).
"""

from __future__ import annotations

from typing import Protocol

from agent_core.ports.approvals import ApprovalStore
from agent_core.ports.installations import InstallationRows
from agent_core.ports.model import Approvals, ChatModel, TextSink
from agent_core.ports.runs import (
    DashboardQueries,
    GuidanceStore,
    ParticipantStore,
    RunQueries,
    RunStore,
    StopRequestStore,
)
from agent_core.ports.schedule import QueueStore, ResumeStore
from agent_core.ports.workers import (
    DeliveryLog,
    LeaseStore,
    Reconnected,
    RetentionStore,
    StopListener,
    StopWakeup,
    StopWakeups,
)

__all__ = [
    "ApprovalStore",
    "Approvals",
    "ChatModel",
    "DashboardQueries",
    "DeliveryLog",
    "GuidanceStore",
    "InstallationRows",
    "LeaseStore",
    "ParticipantStore",
    "QueueStore",
    "Reconnected",
    "ResumeStore",
    "RetentionStore",
    "RunQueries",
    "RunStore",
    "StopListener",
    "StopRequestStore",
    "StopWakeup",
    "StopWakeups",
    "Store",
    "TextSink",
]


class Store(
    RunStore,
    ApprovalStore,
    RunQueries,
    DashboardQueries,
    StopRequestStore,
    LeaseStore,
    RetentionStore,
    DeliveryLog,
    GuidanceStore,
    ParticipantStore,
    ResumeStore,
    QueueStore,
    InstallationRows,
    Protocol,
):
    """Everything a worker needs from one database.

    :func:`agent_core.stores.factory.open_store` returns one; the caller closes it.
    """

    async def close(self) -> None: ...
