"""People's say over a scheduled resume: ``Resume now``, ``Don't resume``, and a Stop.

Part of the one stop service (:class:`bot.stopping.stops.StopService` owns a
:class:`ResumeControls` and hands these asks to it), with its order: decide and commit
before the click is acknowledged, within the ack budget; then the audit event, the status
message and the person's answer (docs/stopping.md).

- ``Resume now`` (:attr:`ResumeAction.RESUME_NOW`) brings a scheduled resume forward to
  now; any worker's schedule starts it.
- ``Don't resume`` (:attr:`ResumeAction.DONT_RESUME`) cancels it.
- ``Continue`` (:attr:`ResumeAction.CONTINUE`), under a run that spent its budget (never
  resumed on its own), schedules it once, now: any worker's schedule starts the
  continuation, a new run in the thread from the run's checkpoint with one more budget
  of the same size (:meth:`bot.workers.resume.Resumes.continue_budget`). It spends on the
  requester's behalf, so only the requester and admins may press it, whatever
  ``STOP_POLICY`` says (:func:`bot.access.stop_policy.may_continue`), and it counts towards
  the requester's ``MAX_RUNS_PER_USER`` like a new run: past it, the press is refused.
- A Stop or Abort (button, native stop, stop word, App Home, the command) that finds no
  live run but a run whose resume is ahead cancels that resume, and posts its handoff
  without the resume. It is committed as a stop request too (handled at once), so it
  counts as a person's stop for ``USER_EXIT_GRACE``.

Who may: for ``Resume now`` and ``Don't resume``, the same people ``STOP_POLICY`` lets stop
the run; for ``Continue``, the requester and admins. A button counts only on the run's own
status message (:func:`bot.access.stop_policy.comes_from`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import AuditEvent, EndedBecause, RunState, StorageError
from agent_core.values.records import ResumeState
from bot import messages
from bot.access.stop_policy import (
    RunHome,
    RunView,
    Verdict,
    comes_from,
    may_continue,
    may_stop,
    read_participants,
    verdict_for,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agent_core import RunRecord
    from bot.access.admins import Admins
    from bot.access.stop_policy import Origin, StopAsk
    from bot.config.settings import Settings
    from bot.inbound.dedupe import Deliveries
    from bot.slack_api.click_answer import ClickAnswer
    from bot.stopping.decisions import StopDecision
    from bot.store_needs import StopIntakeStore
    from bot.workers.worker import Worker

__all__ = ["ResumeAction", "ResumeAsk", "ResumeControls", "ResumeDecided", "ResumeVerdict"]

log = structlog.get_logger("bot.stopping.resume_controls")

_AHEAD = (ResumeState.SCHEDULED, ResumeState.CLAIMED)


class ResumeAction(StrEnum):
    RESUME_NOW = "resume_now"
    DONT_RESUME = "dont_resume"
    CONTINUE = "continue"


@dataclass(frozen=True, slots=True)
class ResumeAsk:
    """Someone pressed ``Resume now``, ``Don't resume`` or ``Continue`` on a run's status
    message."""

    user: str
    action: ResumeAction
    run_id: str
    delivery: str | None = None
    """The click's delivery key: the same click again changes nothing."""
    message: Origin | None = None


class ResumeVerdict(StrEnum):
    HURRIED = "hurried"
    CANCELLED = "cancelled"
    CONTINUED = "continued"
    """Continue: the continuation with one more budget is scheduled, now."""
    NOTHING_SCHEDULED = "nothing_scheduled"
    """It resumed already, or will not: nothing to do."""
    ALREADY_CONTINUED = "already_continued"
    """Continue on a run continued before (a second press)."""
    SUPERSEDED = "superseded"
    """Continue on a run a newer run in its thread took over."""
    NOT_CONTINUABLE = "not_continuable"
    """Continue on a run that did not spend its budget."""
    PERSON_FULL = "person_full"
    """Continue while the requester has ``MAX_RUNS_PER_USER`` requests counted already."""
    NOT_ALLOWED = "not_allowed"
    NOT_THIS_RUN = "not_this_run"
    NOT_FOUND = "not_found"
    REDELIVERED = "redelivered"


@dataclass(frozen=True, slots=True)
class ResumeDecided:
    """What became of a :class:`ResumeAsk` before the ack."""

    ask: ResumeAsk
    verdict: ResumeVerdict | None
    """None when nothing could be recorded (``failure`` says so)."""
    record: RunRecord | None = None
    failure: str | None = None


class ResumeControls:
    def __init__(
        self,
        store: StopIntakeStore,
        worker: Worker,
        settings: Settings,
        deliveries: Deliveries,
        tell: Callable[[str, Origin | None, Any, str], Awaitable[None]],
        *,
        admins: Admins | None = None,
    ) -> None:
        """``admins``: who besides ``ADMIN_USER_IDS`` administers a workspace's runs."""
        self._store = store
        self._admins = admins
        self._worker_id = worker.id
        self._resumes = worker.resumes
        self._reconciler = worker.reconciler
        self._settings = settings
        self._deliveries = deliveries
        self._tell = tell
        """Answers a person ephemerally: (user, where they clicked, the thread, text)."""

    # -- Resume now / Don't resume -----------------------------------------------------

    async def request(self, ask: ResumeAsk) -> ResumeDecided:
        """Decide and commit (the caller bounds it by the ack budget)."""
        record = await self._store.get_run(ask.run_id) if ask.run_id else None
        if record is None:
            return ResumeDecided(ask, ResumeVerdict.NOT_FOUND)
        if not comes_from(ask.message, _home(record)):
            return ResumeDecided(ask, ResumeVerdict.NOT_THIS_RUN)
        if ask.action is ResumeAction.CONTINUE:
            return await self._continue(ask, record)
        if not record.state.is_terminal or record.resume not in _AHEAD:
            return ResumeDecided(ask, ResumeVerdict.NOTHING_SCHEDULED, record)
        if not await self._may(ask.user, record):
            return ResumeDecided(ask, ResumeVerdict.NOT_ALLOWED, record)
        if ask.delivery is not None and not await self._deliveries.first(f"resume:{ask.delivery}"):
            return ResumeDecided(ask, ResumeVerdict.REDELIVERED, record)
        resumes = self._resumes
        if ask.action is ResumeAction.RESUME_NOW:
            won, verdict = await resumes.hurry(record, ask.user), ResumeVerdict.HURRIED
        else:
            won, verdict = await resumes.cancel(record, ask.user), ResumeVerdict.CANCELLED
        return ResumeDecided(ask, verdict if won else ResumeVerdict.NOTHING_SCHEDULED, record)

    async def _continue(self, ask: ResumeAsk, record: RunRecord) -> ResumeDecided:
        """Continue: only a run that spent its budget, by its requester or an admin, once
        (the compare-and-set from ``declined`` is the commit), within the requester's
        ``MAX_RUNS_PER_USER``, and not once a newer run has the thread. A re-delivered
        click is taken before the run's state is read, so it changes nothing and is not
        answered twice."""
        spent = record.state.is_terminal and record.ended_because is EndedBecause.BUDGET_EXHAUSTED
        if not spent:
            return ResumeDecided(ask, ResumeVerdict.NOT_CONTINUABLE, record)
        admins = self._settings.ADMIN_USER_IDS
        allowed = may_continue(ask.user, requester=record.requester, admins=admins)
        if not allowed and not await self._workspace_admin(ask.user, record):
            return ResumeDecided(ask, ResumeVerdict.NOT_ALLOWED, record)
        if ask.delivery is not None and not await self._deliveries.first(f"resume:{ask.delivery}"):
            return ResumeDecided(ask, ResumeVerdict.REDELIVERED, record)
        resumes = self._resumes
        if record.resume is not ResumeState.DECLINED or record.resume_by is not None:
            return ResumeDecided(ask, ResumeVerdict.ALREADY_CONTINUED, record)
        if await resumes.superseded(record):
            return ResumeDecided(ask, ResumeVerdict.SUPERSEDED, record)
        limit = self._settings.MAX_RUNS_PER_USER or None
        if await resumes.continue_budget(record, ask.user, limit=limit):
            return ResumeDecided(ask, ResumeVerdict.CONTINUED, record)
        fresh = await self._store.get_run(record.id) or record
        if fresh.resume is ResumeState.DECLINED and fresh.resume_by is None:
            return ResumeDecided(ask, ResumeVerdict.PERSON_FULL, fresh)
        return ResumeDecided(ask, ResumeVerdict.ALREADY_CONTINUED, fresh)  # a race lost

    async def after(self, decided: ResumeDecided, *, answer: ClickAnswer | None = None) -> None:
        """The audit event, the status message (first through the click's ``answer``),
        and the person's answer."""
        ask, record = decided.ask, decided.record
        if record is not None and decided.verdict in (
            ResumeVerdict.HURRIED,
            ResumeVerdict.CANCELLED,
            ResumeVerdict.CONTINUED,
        ):
            kind = f"resume.{decided.verdict.value}"
            log.info(kind, run_id=record.id, user=ask.user, source="button")
            await self._written_after(record, kind, ask.user, {"source": "button"}, answer)
        reply = _answer(decided, self._settings)
        if reply is not None:
            await self._tell(ask.user, ask.message, None, reply)

    # -- a Stop that finds a resume ahead --------------------------------------------

    async def stop(self, ask: StopAsk, decision: StopDecision) -> StopDecision:
        """A Stop or Abort that found no live run: if the run asked about (or the newest
        of the thread) has a resume ahead, cancel it; else ``decision`` unchanged."""
        record = await self._ahead(ask, decision)
        if record is None:
            return decision
        base = replace(
            decision,
            run_id=record.id,
            thread=record.thread,
            requester=record.requester,
            record=record,
        )
        people = await read_participants(
            self._store, ask.user, record.requester, record.thread, self._settings
        )
        view = RunView(record.requester, _home(record), False, None, participants=people)
        verdict = verdict_for(ask, view, self._settings)
        kind = verdict.requests
        if kind is None:
            return replace(base, verdict=verdict)
        if ask.delivery is not None and not await self._deliveries.first(f"stop:{ask.delivery}"):
            return replace(base, verdict=Verdict.REDELIVERED)
        if not await self._resumes.cancel(record, ask.user):
            return replace(base, verdict=Verdict.FINISHED)  # it started, or was cancelled
        request = await self._store.add_stop_request(record.id, record.thread, kind, ask.user)
        await self._store.mark_stop_handled(request.id)  # nothing runs: nothing to honour
        return replace(base, verdict=verdict, request=request, resume_cancelled=True)

    async def stopped(self, decision: StopDecision, *, answer: ClickAnswer | None = None) -> None:
        """After the ack of :meth:`stop`: the audit event and the handoff, now without a
        resume (the stop request's own audit event is the stop service's)."""
        record = decision.record
        if record is None:
            return
        log.info("resume.cancelled", run_id=record.id, user=decision.ask.user, source="stop")
        detail = {"source": decision.ask.source.value}
        await self._written_after(record, "resume.cancelled", decision.ask.user, detail, answer)

    async def _ahead(self, ask: StopAsk, decision: StopDecision) -> RunRecord | None:
        if ask.run_id is not None:
            record = decision.record or await self._store.get_run(ask.run_id)
            found = [record] if record is not None else []
        else:
            assert ask.thread is not None
            found = await self._store.find_runs(
                states=[RunState.BLOCKED], thread=ask.thread, top_level=True, limit=1000
            )
        ahead = [r for r in found if r.state.is_terminal and r.resume in _AHEAD]
        return ahead[-1] if ahead else None

    # -- shared ------------------------------------------------------------------------

    async def _may(self, user: str, record: RunRecord) -> bool:
        settings = self._settings
        people = await read_participants(
            self._store, user, record.requester, record.thread, settings
        )
        allowed = may_stop(
            user,
            policy=settings.STOP_POLICY,
            requester=record.requester,
            admins=settings.ADMIN_USER_IDS,
            participants=people,
        )
        return allowed or await self._workspace_admin(user, record)

    async def _workspace_admin(self, user: str, record: RunRecord) -> bool:
        """True if ``user`` administers the run's workspace (its admins and owners, its
        installer); asked only when the answer would change the decision."""
        return self._admins is not None and await self._admins.is_admin(user, record.thread.team)

    async def _written_after(
        self,
        record: RunRecord,
        kind: str,
        user: str,
        detail: dict[str, Any],
        answer: ClickAnswer | None,
    ) -> None:
        """The audit event, then the status message as the stored run now is (first
        through the click's ``answer``, if it came from one)."""
        try:
            detail = {**detail, "worker": self._worker_id}
            await self._store.record_event(AuditEvent(record.id, kind, user, detail=detail))
            fresh = await self._store.get_run(record.id)
            if fresh is not None and fresh.state.is_terminal:
                await self._reconciler.post_final(fresh, answer=answer)
        except StorageError:
            log.exception("resume.not_shown", run_id=record.id)


def _home(record: RunRecord) -> RunHome:
    thread = record.thread
    return RunHome(thread.team, thread.channel, thread.thread_ts, record.status_ts)


def _answer(decided: ResumeDecided, settings: Settings) -> str | None:
    if decided.verdict is None:
        return decided.failure
    match decided.verdict:
        case (
            ResumeVerdict.HURRIED
            | ResumeVerdict.CANCELLED
            | ResumeVerdict.CONTINUED
            | ResumeVerdict.REDELIVERED
        ):
            return None  # the status message shows it
        case ResumeVerdict.NOTHING_SCHEDULED:
            return messages.RESUME_NOTHING_SCHEDULED
        case ResumeVerdict.ALREADY_CONTINUED:
            return messages.already_continued(decided.record.resume_by if decided.record else None)
        case ResumeVerdict.SUPERSEDED:
            return messages.CONTINUE_SUPERSEDED
        case ResumeVerdict.NOT_CONTINUABLE:
            return messages.CONTINUE_NOT_BUDGET
        case ResumeVerdict.PERSON_FULL:
            requester = decided.record.requester if decided.record else ""
            return messages.continue_person_full(requester, settings.MAX_RUNS_PER_USER)
        case ResumeVerdict.NOT_ALLOWED:
            requester = decided.record.requester if decided.record else ""
            if decided.ask.action is ResumeAction.CONTINUE:
                return messages.continue_not_allowed(requester)
            return messages.resume_not_allowed(settings.STOP_POLICY.value, requester)
        case ResumeVerdict.NOT_THIS_RUN:
            return messages.CLICK_NOT_FROM_RUN
        case ResumeVerdict.NOT_FOUND:
            return messages.RUN_NOT_FOUND
