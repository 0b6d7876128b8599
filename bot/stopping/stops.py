"""The one stop service: every way of asking a run to end goes through here.

The Stop and Abort buttons, Slack's native stop (``agent_session_stopped``), a reply
that is only a stop word, App Home's buttons and ``/threadpilot``'s each turn what they
received into a :class:`~bot.access.stop_policy.StopAsk` (its ``source`` an
:class:`agent_core.StopSource`) and call, in this order (docs/architecture.md, "The path
of a click")::

    decision = await stops.request(ask)   # before the click or event is acknowledged
    ...ack...
    await stops.after(decision)           # after it

:meth:`StopService.request` does everything that must be done before the ack, all of
its database work within :data:`ACK_BUDGET_S` of Slack's 3 seconds:

1. find the run: this worker's own (memory), or the database's;
2. read what the policy needs besides the run, only where it can change the answer:
   who wrote in the thread (for ``STOP_POLICY=participants``) and the asker's own
   earlier Stops (for a double press), from the database, which every worker reads;
   then decide once, by the pure :func:`bot.access.stop_policy.verdict_for`, so every worker
   decides alike;
3. for an ask that changes the run, commit the stop request, durable before the ack,
   in one transaction with its delivery's key: Slack re-delivers a click or an event,
   maybe to another worker, and a delivery some worker took already commits nothing
   (this process's memory answers a repeat it took itself without the database);
4. apply it at once if this worker owns the run. The stop watcher learns the request's
   id before the commit, so when it finds the request in the table it does not apply it
   a second time.

``Stop all`` (App Home, ``/threadpilot``) asks many runs at once: each is decided as
above, from what the listing read, and every request is committed in one transaction,
with its audit event and one delivery key (:meth:`StopService.request_many`), so hundreds
of runs cost one commit before the ack, not hundreds through the click connections.

A sub-agent asked by its own run id (its menu on its parent's status message, App Home) is
decided like any run, as this worker's memory has it (:meth:`Supervisor.reachable
<bot.runs.supervisor.Supervisor.reachable>`: its parent's status message, requester and
ownership) or as the database does; it holds no lease, so a request for it never ends it
as an orphan here (its parent's worker, or the reconciler, answers for it).

A run still waiting in the queue (:mod:`bot.runs.run_queue`) is decided like any other; after
the ack it is ended where it waits, never having reached the model.

A Stop that finds no live run but a run whose automatic resume is ahead cancels that
resume instead, and ``Resume now`` / ``Don't resume`` come here too
(:mod:`bot.stopping.resume_controls`, in the same order: committed before the ack).

A request that cannot be made durable in the budget changes nothing, anywhere, and the
person is told so: a stop that took effect here but not in the table would be lost with
this worker, and asking again would then read as an escalation.

:meth:`StopService.after` does the slow part: the audit event, the person's answer
(once per delivery, whatever Slack re-sends), and ending the run on the spot when the
worker that owned it is gone.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import (
    LIVE_STATES,
    AuditEvent,
    StopRequestRecord,
    StorageError,
    record_elsewhere,
)
from agent_core.values.answering import answering
from agent_core.values.records import is_waiting
from bot import messages
from bot.access.stop_policy import (
    DOUBLE_PRESS_S,
    StopAsk,
    Verdict,
    needs_own_stops,
    read_participants,
    records_participants,
    verdict_for,
)
from bot.access.trust import Person
from bot.errors import BudgetNotRunning, SlackError
from bot.stopping.decisions import StopDecision, stop_answer
from bot.stopping.resume_controls import ResumeControls, ResumeDecided
from bot.stopping.run_views import live_view, owner_gone, since_own_stop, stored_view

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from agent_core import RunRecord, ThreadKey
    from bot.access.admins import Admins
    from bot.access.stop_policy import Origin
    from bot.access.trust import TrustGate
    from bot.config.settings import Settings
    from bot.inbound.dedupe import Deliveries
    from bot.observe.metrics import Metrics
    from bot.runs.run_life import LiveRun
    from bot.runs.supervisor import Supervisor
    from bot.slack_api.click_answer import ClickAnswer
    from bot.slack_api.surface import Workspaces
    from bot.stopping.resume_controls import ResumeAsk
    from bot.store_needs import StopIntakeStore
    from bot.workers.worker import Worker

__all__ = ["ACK_BUDGET_S", "StopService"]

log = structlog.get_logger("bot.stopping.stops")

ACK_BUDGET_S = 2.0
"""Database work before an ack gets this long; Slack wants the ack within 3 s."""


class StopService:
    def __init__(
        self,
        store: StopIntakeStore,
        supervisor: Supervisor,
        worker: Worker,
        workspaces: Workspaces,
        settings: Settings,
        deliveries: Deliveries,
        trust: TrustGate,
        *,
        budget_s: float = ACK_BUDGET_S,
        metrics: Metrics | None = None,
        admins: Admins | None = None,
    ) -> None:
        """``admins``: who besides ``ADMIN_USER_IDS`` administers a workspace's runs."""
        self._admins = admins
        self._store = store
        self._metrics = metrics
        self._supervisor = supervisor
        self._worker_id = worker.id
        self._watcher = worker.watcher
        self._queue = worker.queue
        self._reconciler = worker.reconciler
        self._workspaces = workspaces
        self._settings = settings
        self._deliveries = deliveries
        self._trust = trust
        self._budget_s = budget_s
        self.double_press_s = DOUBLE_PRESS_S
        """The double-press window (:data:`bot.access.stop_policy.DOUBLE_PRESS_S`)."""
        self.resume_controls = ResumeControls(
            store, worker, settings, self._deliveries, self._tell, admins=admins
        )

    # -- who may stop ------------------------------------------------------------------

    async def note_participant(self, thread: ThreadKey, user: str) -> None:
        """``user`` wrote in ``thread``: under ``STOP_POLICY=participants`` they may stop
        its run, under ``APPROVAL_POLICY=participants`` decide its held calls, whichever
        worker their click lands on. Recorded only under either policy
        (:func:`~bot.access.stop_policy.records_participants`); a failure is logged (the next
        message records them again)."""
        if not records_participants(self._settings):
            return
        try:
            await self._store.add_participant(thread, user)
        except StorageError:
            log.exception("participant.not_recorded", thread=str(thread), user=user)

    # -- before the ack ----------------------------------------------------------------

    async def request(self, ask: StopAsk) -> StopDecision:
        """Decide, commit (with the delivery's key) and apply; every store call in the
        budget.

        Never raises for a database fault: the decision then has no verdict, and its
        ``failure`` is the answer :meth:`after` gives. Its store calls are made as
        :func:`~agent_core.values.answering.answering` ones: a person waits for their answer.
        Whoever may not act at all (:mod:`bot.access.trust`) is refused first, and nothing about
        the run is read.
        """
        person = Person(ask.user, ask.user_team, ask.workspace)
        refusal = await self._trust.refusal(person)
        if refusal is not None:
            return StopDecision(ask, Verdict.UNTRUSTED, failure=refusal)
        live = self._live(ask)
        try:
            with answering():  # not what it sets in motion: the run's own work
                decided = await self._request(ask, live)
        except TimeoutError:
            log.warning("stop.not_recorded", reason="database_busy", budget_s=self._budget_s)
            return StopDecision(ask, None, failure=_not_recorded(ask, busy=True))
        except StorageError:
            log.exception("stop.not_recorded", reason="database_error")
            return StopDecision(ask, None, failure=_not_recorded(ask, busy=False))
        if live is not None and decided.request is not None:
            kind = decided.request.kind
            live.run.request_stop(kind, ask.user, source=ask.source)
        return decided

    async def request_many(
        self,
        asks: Sequence[StopAsk],
        runs: Mapping[str, RunRecord],
        *,
        delivery: str | None,
        admin: bool = False,
    ) -> list[StopDecision]:
        """``Stop all``: decide each ask (a run id, its run read already in ``runs``, with
        no stop pending), then commit every request that changes a run, with its audit
        event, in one transaction before the ack, with one delivery key for all
        (``delivery``: a re-delivery commits nothing). Each owner is reached as for one
        request (a wake-up, or its poll); this worker's own runs are applied here.

        Never raises for a database fault: every decision then has no verdict, and a
        ``failure``. A request the store did not add (its run ended, or someone asked it
        meanwhile) leaves its decision without a request.
        """
        decisions = [self._decide_read(ask, runs, admin=admin) for ask in asks]
        asking = [(i, d) for i, d in enumerate(decisions) if d.verdict and d.verdict.changes_state]
        requests = {i: _new_request(d) for i, d in asking}
        local = {i: live for i, d in asking if (live := self._live(d.ask)) is not None}
        for i in local:
            self._watcher.applied_here(requests[i].id)  # before the commit
        events = [self._audit_event(decisions[i], r) for i, r in requests.items()]
        try:
            with answering():
                async with asyncio.timeout(self._budget_s):
                    added = await self._commit_many(list(requests.values()), events, delivery)
        except (TimeoutError, StorageError) as exc:
            busy = isinstance(exc, TimeoutError)
            log.warning("stop_all.not_recorded", error=str(exc) or type(exc).__name__)
            added = set()
            for i, d in asking:
                decisions[i] = replace(d, verdict=None, failure=_not_recorded(d.ask, busy=busy))
        return self._outcomes(decisions, requests, local, added)

    def _outcomes(
        self,
        decisions: list[StopDecision],
        requests: Mapping[int, StopRequestRecord],
        local: Mapping[int, LiveRun],
        added: set[str] | None,
    ) -> list[StopDecision]:
        """Each decision with what became of its request; this worker's runs asked."""
        for i, request in requests.items():
            decision = decisions[i]
            if added is None:
                decisions[i] = replace(decision, verdict=Verdict.REDELIVERED)
            elif request.id in added:
                decisions[i] = replace(decision, request=request, audited=True)
                if (live := local.get(i)) is not None:
                    source = decision.ask.source
                    live.run.request_stop(request.kind, request.requested_by, source=source)
                continue
            if i in local:
                self._watcher.forget(request.id)  # not committed: nothing to apply
        return decisions

    async def _commit_many(
        self, requests: list[StopRequestRecord], events: list[AuditEvent], delivery: str | None
    ) -> set[str] | None:
        """The ids the store added; None when the delivery was taken before."""
        if not requests:
            return set()
        if delivery is None:
            added = await self._store.add_stop_requests(requests, events=events)
        else:
            added = await self._deliveries.take(
                _delivery_key(delivery),
                lambda key: self._store.add_stop_requests(requests, events=events, delivery=key),
            )
        return None if added is None else {r.id for r in added}

    def _decide_read(
        self, ask: StopAsk, runs: Mapping[str, RunRecord], *, admin: bool
    ) -> StopDecision:
        """A decision from what was read already (no database read): this worker's run
        from its memory, another's from ``runs``."""
        assert ask.run_id is not None
        live = self._live(ask)
        if live is not None:
            view, base = live_view(ask, live)
        elif (record := runs.get(ask.run_id)) is not None:
            view, base = stored_view(ask, record, [])
        else:
            return StopDecision(ask, Verdict.NOT_FOUND)
        settings, double = self._settings, self.double_press_s
        verdict = verdict_for(ask, view, settings, double_press_s=double, admin=admin)
        return replace(base, verdict=verdict)

    async def _request(self, ask: StopAsk, live: LiveRun | None) -> StopDecision:
        """Decide and commit; the decision carries the committed request, if any."""
        async with asyncio.timeout(self._budget_s):
            decision = await self._decide(ask, live)
            verdict = decision.verdict
            if live is None and verdict in (Verdict.NOT_FOUND, Verdict.FINISHED):
                return await self.resume_controls.stop(ask, decision)
            if verdict is None or not verdict.changes_state:
                return decision
            request = await self._commit(decision, verdict, live)
            if request is None:
                return replace(decision, verdict=Verdict.REDELIVERED)
        return replace(decision, request=request)

    def _live(self, ask: StopAsk) -> LiveRun | None:
        """This worker's run for the ask; None if another worker owns it (or nobody)."""
        if ask.run_id is not None:
            live = self._supervisor.reachable(ask.run_id)  # a sub-agent's own, too
        else:
            assert ask.thread is not None
            live = self._supervisor.live_in_thread(ask.thread)
        # A run another worker took over is theirs to stop: ask the database.
        return None if live is None or live.lost else live

    async def _decide(self, ask: StopAsk, live: LiveRun | None) -> StopDecision:
        """Read the run, then what the policy needs beyond it, then decide once."""
        requests: list[StopRequestRecord] | None = None
        if live is not None:
            view, base = live_view(ask, live)
        else:
            record, requests = await self._stored_run(ask)
            if record is None:
                return StopDecision(ask, Verdict.NOT_FOUND)
            if record.state.is_terminal:
                requests = None  # an ended run's are not its view's
            elif requests is None:
                requests = await self._store.pending_stop_requests([record.id])
            view, base = stored_view(ask, record, requests or [])
        assert base.run_id is not None and base.thread is not None
        if not view.finished:
            view = replace(
                view,
                participants=await read_participants(
                    self._store, ask.user, view.requester, base.thread, self._settings
                ),
            )
        if needs_own_stops(ask, view):
            if requests is None:
                requests = await self._store.pending_stop_requests([base.run_id])
            view = replace(view, since_users_stop_s=since_own_stop(requests, ask.user))
        verdict = verdict_for(ask, view, self._settings, double_press_s=self.double_press_s)
        if verdict is Verdict.NOT_ALLOWED and await self._workspace_admin(ask, base.thread.team):
            verdict = verdict_for(
                ask, view, self._settings, double_press_s=self.double_press_s, admin=True
            )
        return replace(base, verdict=verdict)

    async def _workspace_admin(self, ask: StopAsk, team: str) -> bool:
        """True if the asker administers ``team``'s runs (asked only when it matters)."""
        return self._admins is not None and await self._admins.is_admin(ask.user, team)

    async def _stored_run(
        self, ask: StopAsk
    ) -> tuple[RunRecord | None, list[StopRequestRecord] | None]:
        """The run asked about, from the database, and (for a run named by id) its
        pending stop requests: read side by side, the person waits for both. The
        requests are None where they were not read (found by thread)."""
        if ask.run_id is not None:
            if not ask.run_id:
                return None, None
            return await asyncio.gather(
                self._store.get_run(ask.run_id),
                self._store.pending_stop_requests([ask.run_id]),
            )
        assert ask.thread is not None
        found = await self._store.find_runs(
            states=LIVE_STATES, thread=ask.thread, top_level=True, limit=1
        )
        return (found[0] if found else None), None

    async def _commit(
        self, decision: StopDecision, verdict: Verdict, live: LiveRun | None
    ) -> StopRequestRecord | None:
        """The stop request, committed with its delivery's key in one transaction; None,
        and nothing committed, if the delivery was taken before (by any worker)."""
        kind = verdict.requests
        assert kind is not None and decision.run_id is not None and decision.thread is not None
        run_id, thread, user = decision.run_id, decision.thread, decision.ask.user
        request_id = uuid.uuid4().hex
        delivery = decision.ask.delivery
        watcher = self._watcher
        if live is not None:
            watcher.applied_here(request_id)  # before the commit: a scan may find it first
        try:
            if delivery is None:
                return await self._store.add_stop_request(
                    run_id, thread, kind, user, request_id=request_id
                )
            request = await self._deliveries.take(
                _delivery_key(delivery),
                lambda key: self._store.add_stop_request_once(
                    run_id, thread, kind, user, request_id=request_id, delivery=key
                ),
            )
        except BaseException:
            if live is not None:
                watcher.forget(request_id)  # it may have landed: then the watcher applies it
            raise
        if request is None and live is not None:
            watcher.forget(request_id)  # a repeat: nothing was committed
        return request

    # -- after the ack -----------------------------------------------------------------

    async def after(self, decision: StopDecision, *, answer: ClickAnswer | None = None) -> None:
        """The audit event, the person's answer, and the run's end if its owner is gone.

        ``answer``: the click's own answer on its message (:mod:`bot.slack_api.click_answer`), for
        an ending written here (a queued run, a cancelled resume): it shows first."""
        ask = decision.ask
        if self._metrics is not None:
            verdict = decision.verdict.value if decision.verdict is not None else None
            self._metrics.stop_asked(decision.ask.kind, decision.ask.source, verdict)
        if decision.request is not None and not decision.audited:
            await self._audit(decision, decision.request)
        if decision.request is not None and decision.record is not None and not decision.local:
            # Another worker runs it: this worker's part shows in the run's trace as a link.
            record_elsewhere(
                "threadpilot.stop_request",
                decision.record.trace_context,
                {
                    "threadpilot.run.id": decision.record.id,
                    "threadpilot.stop.kind": ask.kind.value,
                    "threadpilot.stop.requested_by": ask.user,
                    "threadpilot.stop.source": ask.source.value,
                },
            )
        decision = await self._answer_once(decision)
        record = decision.record
        if decision.resume_cancelled:
            await self.resume_controls.stopped(decision, answer=answer)
        elif decision.request is not None and record is not None and is_waiting(record):
            # Nobody runs it yet: end it in the queue (if a worker took it meanwhile, the
            # committed request reaches it there, as for any live run).
            try:
                await self._queue.end_queued(record, decision.request, answer=answer)
            except StorageError:
                log.exception("stop.queued_not_ended", run_id=record.id)
        elif (
            decision.request is not None
            and record is not None
            and record.parent_id is None  # a sub-agent holds no lease: its parent's tells
            and owner_gone(record)
        ):
            # Its worker is gone: end it here, from the database, and say so in the thread.
            try:
                await self._reconciler.end_orphan(record)
            except StorageError:
                log.exception("stop.orphan_not_ended", run_id=record.id)
        reply = stop_answer(decision, self._settings)
        if reply is not None:
            await self._ephemeral(ask, reply)

    async def _audit(self, decision: StopDecision, request: StopRequestRecord) -> None:
        """Written after the ack: the stop request is the record that had to be durable
        first; this says who did what, and how, and may trail it."""
        try:
            await self._store.record_event(self._audit_event(decision, request))
        except StorageError:
            log.exception("stop.audit_not_recorded", run_id=request.run_id)

    def _audit_event(self, decision: StopDecision, request: StopRequestRecord) -> AuditEvent:
        """Who did what, and how: the audit event of a committed request."""
        verdict = decision.verdict
        assert verdict is not None
        kind = (
            "stop.escalated" if verdict is Verdict.ESCALATE else f"{request.kind.value}.requested"
        )
        detail: dict[str, Any] = {
            "request_id": request.id,
            "worker": self._worker_id,
            "source": decision.ask.source.value,
            "level": verdict.level,
        }
        if decision.parent_id is not None:
            detail["sub_agent_of"] = decision.parent_id  # the event names the sub-agent
        return AuditEvent(
            run_id=request.run_id,
            kind=kind,
            actor=request.requested_by,
            at=request.requested_at,
            detail=detail,
        )

    async def _answer_once(self, decision: StopDecision) -> StopDecision:
        """An ask that changes nothing is still answered once, not once per delivery
        (those that change state were checked before their commit)."""
        verdict = decision.verdict
        delivery = decision.ask.delivery
        if verdict is None or verdict.changes_state or verdict is Verdict.REDELIVERED:
            return decision
        if delivery is None:
            return decision
        try:
            async with asyncio.timeout(self._budget_s):
                first = await self._deliveries.first(_delivery_key(delivery))
        except (StorageError, TimeoutError) as exc:
            # Answering twice is the lesser harm than not answering at all.
            log.warning("stop.dedupe_unavailable", error=str(exc) or type(exc).__name__)
            return decision
        return decision if first else replace(decision, verdict=Verdict.REDELIVERED)

    # -- Resume now / Don't resume (docs/stopping.md) ----------------------------------

    async def resume(self, ask: ResumeAsk) -> ResumeDecided:
        """Before the ack: decide and commit, every store call in the budget; never raises
        for a database fault (the answer then says nothing was recorded). Whoever may not
        act at all (:mod:`bot.access.trust`) is refused first."""
        workspace = ask.message.team if ask.message is not None else None
        refusal = await self._trust.refusal(Person(ask.user, workspace=workspace))
        if refusal is not None:
            return ResumeDecided(ask, None, failure=refusal)
        try:
            async with asyncio.timeout(self._budget_s):
                return await self.resume_controls.request(ask)
        except TimeoutError:
            log.warning("resume.not_recorded", reason="database_busy", budget_s=self._budget_s)
            failure = messages.stop_not_recorded(busy=True, typed=False)
        except StorageError:
            log.exception("resume.not_recorded", reason="database_error")
            failure = messages.stop_not_recorded(busy=False, typed=False)
        return ResumeDecided(ask, None, failure=failure)

    async def resume_after(
        self, decided: ResumeDecided, *, answer: ClickAnswer | None = None
    ) -> None:
        """After the ack: the audit event, the status message (first on the clicked
        message, through ``answer``) and the person's answer."""
        await self.resume_controls.after(decided, answer=answer)

    async def _ephemeral(self, ask: StopAsk, text: str) -> None:
        """Answer the person where they asked: the clicked message's thread, or the
        run's thread."""
        await self._tell(ask.user, ask.message, ask.thread, text)

    async def _tell(
        self, user: str, message: Origin | None, thread: ThreadKey | None, text: str
    ) -> None:
        """An ephemeral answer to ``user`` in the thread of the ``message`` they clicked,
        or in ``thread``; nowhere for App Home and the command (they answer themselves)."""
        if message is not None:
            team, channel, thread_ts = message.team, message.channel, message.thread_ts
        elif thread is not None:
            team, channel, thread_ts = thread.team, thread.channel, thread.thread_ts
        else:
            return  # App Home and the command answer in their own way
        kwargs: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        try:
            surface = await self._workspaces.get(team)
            await surface.budget.call("chat.postEphemeral", **kwargs)
        except SlackError as exc:
            log.warning("stop.reply_failed", error=exc.error)
        except BudgetNotRunning:
            log.warning("stop.reply_failed", error="shutting down")


def _new_request(decision: StopDecision) -> StopRequestRecord:
    """The request a decision that changes its run makes (not committed yet)."""
    assert decision.verdict is not None and decision.verdict.requests is not None
    assert decision.run_id is not None and decision.thread is not None
    return StopRequestRecord(
        id=uuid.uuid4().hex,
        run_id=decision.run_id,
        thread=decision.thread,
        kind=decision.verdict.requests,
        requested_by=decision.ask.user,
    )


def _delivery_key(delivery: str) -> str:
    # Its own namespace: the event de-duplication middleware has already recorded
    # ``event:<id>`` by the time an event's listener asks here.
    return f"stop:{delivery}"


def _not_recorded(ask: StopAsk, *, busy: bool) -> str:
    return messages.stop_not_recorded(busy=busy, typed=ask.source.typed)
