"""What the stop policy sees of a run (:class:`bot.access.stop_policy.RunView`) and the
decision it starts from: a run this worker owns, as its memory has it (no database read),
or one another worker owns (or nobody does), as the database has it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import RunResult, RunState, StopReason, strongest
from agent_core.values.clock import utcnow
from bot.access.stop_policy import RunHome, RunView
from bot.stopping.decisions import StopDecision

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core import RunRecord, StopRequestRecord
    from bot.access.stop_policy import StopAsk
    from bot.runs.run_life import LiveRun

__all__ = ["live_view", "owner_gone", "since_own_stop", "stored_view"]


def live_view(ask: StopAsk, live: LiveRun) -> tuple[RunView, StopDecision]:
    """A run this worker owns, as its memory has it (no database read)."""
    run, session = live.run, live.session
    view = RunView(
        requester=live.requester,
        home=RunHome(run.thread.team, session.channel, run.thread.thread_ts, session.status_ts),
        finished=run.result is not None,
        pending=run.control.reason,
    )
    base = StopDecision(
        ask,
        None,
        run_id=run.id,
        thread=run.thread,
        requester=live.requester,
        result=run.result,
        local=True,
        parent_id=run.parent.id if run.parent is not None else None,
    )
    return view, base


def stored_view(
    ask: StopAsk, record: RunRecord, pending: Sequence[StopRequestRecord]
) -> tuple[RunView, StopDecision]:
    """A run another worker owns (or nobody does), as the database has it."""
    in_force = strongest(pending)
    reason = in_force.kind if in_force is not None else None
    if reason is None and record.state is RunState.STOPPING:
        reason = StopReason.STOP  # honoured already: its request is handled
    thread = record.thread
    view = RunView(
        requester=record.requester,
        home=RunHome(thread.team, thread.channel, thread.thread_ts, record.status_ts),
        finished=record.state.is_terminal,
        pending=reason,
    )
    base = StopDecision(
        ask,
        None,
        run_id=record.id,
        thread=thread,
        requester=record.requester,
        result=RunResult.from_dict(record.result) if record.result else None,
        record=record,
        parent_id=record.parent_id,
    )
    return view, base


def since_own_stop(requests: Sequence[StopRequestRecord], user: str) -> float | None:
    """Seconds since ``user``'s latest Stop among ``requests``; None if they made none."""
    own = [r.requested_at for r in requests if r.kind is StopReason.STOP and r.requested_by == user]
    return (utcnow() - max(own)).total_seconds() if own else None


def owner_gone(record: RunRecord) -> bool:
    return record.lease_expires_at is None or record.lease_expires_at <= utcnow()
