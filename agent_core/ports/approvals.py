"""Held tool calls waiting for a person's decision."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Collection
    from datetime import datetime

    from agent_core.values.records import (
        ApprovalRecord,
        ApprovalStatus,
        RunRecord,
    )

__all__ = ["ApprovalStore"]


class ApprovalStore(Protocol):
    """Tool calls held for a person's decision (:mod:`agent_core.values.approvals`), committed
    before the click that decides one is acknowledged.

    Adding and deciding one also moves its run's ``updated_at`` (in the same
    transaction): App Home lists a run's pending approvals, and refreshes on that."""

    async def add_approval(self, record: ApprovalRecord) -> bool:
        """Add a ``requested`` approval; False (nothing written) if its id exists."""
        ...

    async def set_approval_message(self, approval_id: str, message_ts: str) -> bool:
        """Note where the approval message was posted; False if there is no such row."""
        ...

    async def decide_approval(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        decided_by: str | None = None,
        at: datetime | None = None,
    ) -> bool:
        """Compare-and-set ``requested`` → ``status``: True if this call decided it, False
        if it was decided already (the first decision wins) or does not exist. On
        PostgreSQL the commit wakes the run's owner (the stop requests' channel)."""
        ...

    async def take_approval(self, approval_id: str, *, at: datetime | None = None) -> bool:
        """Mark a decided approval taken by its run (once: True the first time)."""
        ...

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...

    async def pending_approvals(
        self, run_ids: Collection[str] | None = None
    ) -> list[ApprovalRecord]:
        """``requested`` approvals (of these runs), oldest first."""
        ...

    async def approvals_for(self, run_id: str) -> list[ApprovalRecord]:
        """Every approval of a run, oldest first."""
        ...

    async def pending_approvals_under(self, run_ids: Collection[str]) -> list[ApprovalRecord]:
        """``requested`` approvals of these runs and of their sub-agents (any depth),
        oldest first: App Home lists a live run's held calls, its sub-agents' included."""
        ...

    async def ended_runs_with_open_approvals(self, *, limit: int = 100) -> list[RunRecord]:
        """Runs that have ended (any terminal state) with an approval still ``requested``,
        in one query (the reconciler's pass), oldest ``updated_at`` first, at most
        ``limit``. Runs and their approvals are purged together: an approval without
        its run is not listed."""
        ...
