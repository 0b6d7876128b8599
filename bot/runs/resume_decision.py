"""Whether and when a run that ended resumes, and making it live again: the decisions the
resume schedule (:mod:`bot.workers.resume`), the run queue and the supervisor share.

:func:`settle_resume` asks the pure policy (:func:`agent_core.decide_resume`:
``AUTO_RESUME``, ``MAX_AUTO_RESUMES``, ``USER_EXIT_GRACE``) and stores the answer on the
run by compare-and-set, so exactly one worker decides: ``scheduled`` at ``resume_at``, or
``declined``, logged with its reason and written as an audit event (``resume.scheduled``
/ ``resume.declined``). :func:`resume_in_place` makes a due resume live again under one
worker, by compare-and-set. The rest reads what a stored run says: why it ended, what
the request had spent, what its status message says of its ending, when its resume is due.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from agent_core import (
    AuditEvent,
    DontResume,
    EndedBecause,
    ResumeAt,
    RunResult,
    RunState,
    decide_resume,
    weighs_last_stop,
)
from agent_core.values.records import ResumeState
from bot import messages
from bot.views.status import EndingView

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core import ResumeDecision, ResumeSettings, Spent
    from agent_core.values.records import RunRecord
    from bot.store_needs import ResumeDecisions

__all__ = [
    "FINAL_WAIT_S",
    "due_at",
    "ending_view",
    "resume_in_place",
    "settle_resume",
    "spent_of",
    "stored_ended_because",
    "thread_moved_on",
]

log = structlog.get_logger("bot.runs.resume_decision")

FINAL_WAIT_S = 30.0
"""A resume waits for the ended run's final message to be in Slack (its worker writes it
just after deciding; else the two would write over each other), at most this long, and
no longer than that worker's lease: once it has run out, the worker is gone."""


# -- what a stored run says ------------------------------------------------------------


def stored_ended_because(record: RunRecord) -> EndedBecause:
    """Why the stored run ended (its column, or else its result's classification)."""
    if record.ended_because is not None:
        return record.ended_because
    if record.result is not None:
        return RunResult.from_dict(record.result).ended_because
    return EndedBecause.UNKNOWN


def spent_of(record: RunRecord) -> Spent | None:
    """What the request had spent when the stored run ended (None if its result does not
    say): an automatic resume or continuation of it goes on from there."""
    return RunResult.from_dict(record.result).spent if record.result else None


def ending_view(record: RunRecord) -> EndingView | None:
    """What the status message of the stored run says about its ending (None while live)."""
    if not record.state.is_terminal:
        return None
    return EndingView(
        ended_because=stored_ended_because(record).value,
        resume=record.resume,
        resume_at=record.resume_at,
        reason=record.resume_reason,
        by=record.resume_by,
        blocked=record.state is RunState.BLOCKED,
    )


def due_at(record: RunRecord) -> datetime | None:
    """When the pending resume of ``record`` may be started; None if it has none."""
    if record.resume is ResumeState.CLAIMED:
        return record.lease_expires_at  # the claim's holder is gone when it runs out
    if record.resume is not ResumeState.SCHEDULED or record.resume_at is None:
        return None
    if record.final_posted_at is None and record.lease_expires_at is not None:
        writing_until = record.updated_at + timedelta(seconds=FINAL_WAIT_S)
        return max(record.resume_at, min(writing_until, record.lease_expires_at))
    return record.resume_at


# -- deciding --------------------------------------------------------------------------


async def settle_resume(
    store: ResumeDecisions, record: RunRecord, policy: ResumeSettings, *, actor: str, now: datetime
) -> RunRecord:
    """Decide, and store, whether and when the ended ``record`` resumes; the stored run
    after (as decided here, or by whoever decided first)."""
    if record.resume is not None or not record.state.is_terminal:
        return record
    ended = stored_ended_because(record)
    decision = await _decision(store, record, ended, policy, now)
    if isinstance(decision, DontResume):
        won = await store.set_resume(
            record.id, ResumeState.DECLINED, expected=[None], resume_reason=decision.reason
        )
    else:
        at = decision.at if isinstance(decision, ResumeAt) else now
        won = await store.set_resume(
            record.id,
            ResumeState.SCHEDULED,
            expected=[None],
            resume_at=at,
            resume_reason=decision.reason,
        )
    if won:
        kind = "resume.declined" if isinstance(decision, DontResume) else "resume.scheduled"
        detail = {**decision.to_dict(), "ended_because": ended.value}
        detail["attempt"] = record.auto_resumes + 1
        log.info(kind, run_id=record.id, **detail)
        await store.record_event(AuditEvent(record.id, kind, actor, at=now, detail=detail))
    return await store.get_run(record.id) or record


async def _decision(
    store: ResumeDecisions,
    record: RunRecord,
    ended: EndedBecause,
    policy: ResumeSettings,
    now: datetime,
) -> ResumeDecision:
    if record.parent_id is not None:
        return DontResume(messages.RESUME_SUB_AGENT)
    last_stop = (
        await store.last_user_stop(record.thread) if weighs_last_stop(ended, policy) else None
    )
    decision = decide_resume(
        ended,
        settings=policy,
        resumes_in_thread=record.auto_resumes,
        last_user_stop_at=last_stop,
        not_before=_resume_after(record),
        now=now,
    )
    if isinstance(decision, DontResume):
        return decision
    if record.state is not RunState.BLOCKED:
        return DontResume(messages.resume_not_blocked(record.state.value))
    stops = await store.stop_requests_for(record.id)
    if any(r.kind.by_person for r in stops):
        return DontResume(messages.RESUME_PERSON_STOPPED)  # whatever ended it after: never resumed
    if await thread_moved_on(store, record):
        return DontResume(messages.RESUME_MOVED_ON)
    return decision


def _resume_after(record: RunRecord) -> datetime | None:
    return RunResult.from_dict(record.result).resume_after if record.result else None


async def thread_moved_on(store: ResumeDecisions, record: RunRecord) -> bool:
    """True if a newer run started in the run's thread: the conversation went on without
    it, and resuming it would put an old task back over the newer one."""
    runs = await store.find_runs(thread=record.thread, top_level=True, limit=1000)
    return any(r.created_at > record.created_at for r in runs)


# -- making it live again --------------------------------------------------------------------------


async def resume_in_place(
    store: ResumeDecisions, record: RunRecord, *, worker_id: str, lease_ttl_s: float, now: datetime
) -> bool:
    """Make the due, scheduled ``record`` live again under ``worker_id`` (the caller then
    runs it from its checkpoint). False if another worker (or a person) got there first."""
    won = await store.set_resume(
        record.id,
        None,
        expected=[ResumeState.SCHEDULED],
        due_by=now,
        state=RunState.QUEUED,
        owner=worker_id,
        lease_expires_at=now + timedelta(seconds=lease_ttl_s),
        auto_resumes=record.auto_resumes + 1,
        resume_at=None,
        resume_reason=None,
        resume_by=None,
        outcome=None,
        stop_reason=None,
        exit_code=None,
        stopped_by=None,
        result=None,
        final_posted_at=None,
    )
    if not won:
        return False
    checkpoint = await store.latest_checkpoint(record.id)
    turn = checkpoint.turn if checkpoint else 0
    detail = {
        "from_turn": turn,
        "attempt": record.auto_resumes + 1,
        "ended_because": stored_ended_because(record).value,
        "reason": record.resume_reason,
    }
    await store.record_event(AuditEvent(record.id, "run.resumed", worker_id, at=now, detail=detail))
    log.info("run.resumed", run_id=record.id, **detail)
    return True
