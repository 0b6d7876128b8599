"""Approve and Deny clicks, with the stop service's discipline (docs/tools.md, Approvals).

Before the ack, within :data:`~bot.stopping.stops.ACK_BUDGET_S`, :meth:`ApprovalClicks.decide`
decides the click and commits it: the click must come from the approval's own message
(or App Home), a run must still be able to take it (live, or ended in a way that is
resumed, its resume ahead or undecided: :func:`~bot.approvals.desk.still_counts`),
``APPROVAL_POLICY`` must allow the person (admins always), and the row must still be
``requested`` (compare-and-set: the first decision wins, in whichever worker). A
committed decision is handed at once to the call if it waits in this worker; elsewhere,
the commit's wake-up reaches the owner's stop watcher. After the ack,
:meth:`ApprovalClicks.after` updates the approval message in place (the decision and who
made it), writes the audit event, and answers a click that changed nothing with an
ephemeral.

What the person is told is what the store holds. A database that answers after the
click's budget is not abandoned: the click is acknowledged (verdict ``LATE``) and the
decision goes on in the background for up to :data:`LATE_S`. When it commits,
:meth:`ApprovalClicks.after` does what it does for any decision (the message in place,
the audit event) and tells the person it was recorded late. If it has still not
answered then, the decision is cancelled and the row read back: whatever the store then
holds is what the person is told (decided by this click; not recorded, press again; or,
if even that read fails, that it cannot tell and the message shows what was).

**Show all** (:meth:`ApprovalClicks.show_all`) opens a modal with a held call's
arguments in full, for whoever may see them: on the approval's own message, anyone who
sees it; on App Home, as App Home shows them (the requester, or anyone for a run in a
public channel). It changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import ApprovalStatus, StorageError
from bot import messages
from bot.access.stop_policy import may_stop, read_participants
from bot.access.trust import Person
from bot.approvals.desk import still_counts
from bot.errors import BudgetNotRunning, SlackError
from bot.slack_api.channels import ChannelPrivacy
from bot.views.approval import arguments_view, may_see_arguments, render_approval

if TYPE_CHECKING:
    from agent_core import ApprovalRecord
    from bot.access.admins import Admins
    from bot.access.stop_policy import Origin
    from bot.access.trust import TrustGate
    from bot.approvals.desk import ApprovalDesk
    from bot.config.settings import Settings
    from bot.slack_api.click_answer import ClickAnswer
    from bot.slack_api.surface import Workspaces
    from bot.store_needs import ApprovalClickStore

__all__ = ["LATE_S", "ApprovalAsk", "ApprovalClick", "ApprovalClicks", "ApprovalVerdict"]

log = structlog.get_logger("bot.approvals.clicks")

LATE_S = 60.0
"""How long a decision the database did not answer within the click's budget is still
waited for, after the ack (the blips that cause it last seconds)."""


@dataclass(frozen=True, slots=True)
class ApprovalAsk:
    """Someone pressed Approve or Deny."""

    user: str
    approval_id: str
    approve: bool
    message: Origin | None = None
    """The message it was pressed on; None on App Home."""
    on_home: bool = False
    team: str | None = None
    """The workspace it was pressed in (App Home is published there again)."""
    user_team: str | None = None

    @property
    def status(self) -> ApprovalStatus:
        return ApprovalStatus.APPROVED if self.approve else ApprovalStatus.DENIED


class ApprovalVerdict(StrEnum):
    DECIDED = "decided"
    NOT_FOUND = "not_found"
    NOT_THIS_MESSAGE = "not_this_message"
    RUN_ENDED = "run_ended"
    NOT_ALLOWED = "not_allowed"
    ALREADY_DECIDED = "already_decided"
    REDELIVERED = "redelivered"
    """The same person's same decision again (Slack re-delivered the click)."""
    UNTRUSTED = "untrusted"
    NOT_RECORDED = "not_recorded"
    LATE = "late"
    """Not decided within the click's budget: still going on (:attr:`ApprovalClick.deciding`)."""
    NOT_CONFIRMED = "not_confirmed"
    """Given up on after :data:`LATE_S`, and the row could not be read back either."""


@dataclass(frozen=True, slots=True)
class ApprovalClick:
    ask: ApprovalAsk
    verdict: ApprovalVerdict
    record: ApprovalRecord | None = None
    """The approval as it stands after the click."""
    answer: str | None = None
    """The ephemeral answer, for a click that changed nothing."""
    deciding: asyncio.Task[ApprovalClick] | None = None
    """A ``LATE`` click's decision, still going on."""

    @property
    def notice(self) -> str | None:
        """What App Home says on top after the press."""
        if self.verdict is ApprovalVerdict.DECIDED and self.record is not None:
            return messages.approval_decided(self.record.status.value, self.record.decided_by)
        return self.answer


class ApprovalClicks:
    """Decides and commits Approve / Deny clicks (one per process)."""

    def __init__(
        self,
        store: ApprovalClickStore,
        desk: ApprovalDesk,
        settings: Settings,
        trust: TrustGate,
        workspaces: Workspaces,
        *,
        budget_s: float,
        admins: Admins | None = None,
    ) -> None:
        """``admins``: who besides ``ADMIN_USER_IDS`` administers a workspace's runs."""
        self._admins = admins
        self._store = store
        self._desk = desk
        self._settings = settings
        self._trust = trust
        self._workspaces = workspaces
        self._budget_s = budget_s
        self._channels = ChannelPrivacy(workspaces)
        self._deciding: set[asyncio.Task[ApprovalClick]] = set()
        """Decisions under way (held here so that none is dropped unseen)."""

    async def decide(self, ask: ApprovalAsk) -> ApprovalClick:
        """Before the ack: decided and, if it counts, committed; ``LATE`` if the database
        has not answered within the budget (the decision goes on). Never raises for a
        database fault (the answer then says nothing was recorded)."""
        refusal = await self._trust.refusal(_person(ask))
        if refusal is not None:
            return ApprovalClick(ask, ApprovalVerdict.UNTRUSTED, answer=refusal)
        deciding = asyncio.create_task(self._decide(ask), name=f"approval-click:{ask.approval_id}")
        self._deciding.add(deciding)
        deciding.add_done_callback(self._deciding.discard)
        try:
            await asyncio.wait({deciding}, timeout=self._budget_s)
        except asyncio.CancelledError:
            deciding.cancel()
            raise
        if deciding.done():
            return _settled(ask, deciding)
        log.warning("approval.late", reason="database_busy", user=ask.user)
        return ApprovalClick(ask, ApprovalVerdict.LATE, deciding=deciding)

    async def _late(self, click: ApprovalClick) -> ApprovalClick:
        """A ``LATE`` click, followed up (after the ack): its decision once the database
        answers, or, after :data:`LATE_S`, what the store holds."""
        deciding = click.deciding
        assert deciding is not None
        await asyncio.wait({deciding}, timeout=LATE_S)
        if not deciding.done():
            deciding.cancel()
            await asyncio.wait({deciding})
        if deciding.cancelled():  # given up on here, or at shutdown (:meth:`close`)
            return await self._read_back(click.ask)
        return _settled(click.ask, deciding)

    async def close(self) -> None:
        """At shutdown: cancel the decisions still under way (each follow-up then says
        what the store holds) and wait for them to unwind."""
        for deciding in list(self._deciding):
            deciding.cancel()
        if self._deciding:
            await asyncio.wait(set(self._deciding))

    async def _read_back(self, ask: ApprovalAsk) -> ApprovalClick:
        """What the store holds of a decision given up on (it may have committed as it
        was cancelled)."""
        try:
            async with asyncio.timeout(self._budget_s):
                stored = await self._store.get_approval(ask.approval_id)
        except (TimeoutError, StorageError) as exc:
            log.warning("approval.not_confirmed", error=repr(exc))
            return ApprovalClick(
                ask, ApprovalVerdict.NOT_CONFIRMED, answer=messages.APPROVAL_NOT_CONFIRMED
            )
        if stored is None or not stored.status.terminal:
            log.warning("approval.not_recorded", reason="database_busy", late=True)
            answer = messages.stop_not_recorded(busy=True, typed=False)
            return ApprovalClick(ask, ApprovalVerdict.NOT_RECORDED, stored, answer)
        if stored.decided_by == ask.user and stored.status is ask.status:
            self._desk.decided(stored)
            return ApprovalClick(ask, ApprovalVerdict.DECIDED, stored)
        return _already(ask, stored)

    async def _decide(self, ask: ApprovalAsk) -> ApprovalClick:
        record = await self._store.get_approval(ask.approval_id)
        if record is None:
            return ApprovalClick(ask, ApprovalVerdict.NOT_FOUND, answer=messages.APPROVAL_NOT_FOUND)
        if not _comes_from(ask, record):
            return ApprovalClick(
                ask, ApprovalVerdict.NOT_THIS_MESSAGE, answer=messages.APPROVAL_NOT_FOUND
            )
        run = await self._store.get_run(record.run_id)
        ended = not still_counts(run)
        if record.status.terminal and not (ended and record.status is ApprovalStatus.CANCELLED):
            return _already(ask, record)
        if ended:
            return ApprovalClick(
                ask, ApprovalVerdict.RUN_ENDED, record, messages.APPROVAL_RUN_ENDED
            )
        if not await self._may_decide(ask.user, record):
            policy = self._settings.APPROVAL_POLICY.value
            answer = messages.approval_not_allowed(policy, record.requester)
            return ApprovalClick(ask, ApprovalVerdict.NOT_ALLOWED, record, answer)
        if not await self._store.decide_approval(record.id, ask.status, decided_by=ask.user):
            stored = await self._store.get_approval(record.id)
            return _already(ask, stored or record)
        pressed_on = ask.message.message_ts if ask.message is not None else None
        decided = dataclasses.replace(
            record,
            status=ask.status,
            decided_by=ask.user,
            message_ts=record.message_ts or pressed_on,
        )
        local = self._desk.decided(decided)
        log.info(
            "approval.decided",
            approval_id=record.id,
            run_id=record.run_id,
            status=ask.status.value,
            user=ask.user,
            local=local,
        )
        return ApprovalClick(ask, ApprovalVerdict.DECIDED, decided)

    async def _may_decide(self, user: str, record: ApprovalRecord) -> bool:
        """True if ``user`` may decide ``record`` under ``APPROVAL_POLICY``."""
        settings = self._settings
        participants = await read_participants(
            self._store,
            user,
            record.requester,
            record.thread,
            settings,
            policy=settings.APPROVAL_POLICY,
        )
        allowed = may_stop(
            user,
            policy=settings.APPROVAL_POLICY,
            requester=record.requester,
            admins=settings.ADMIN_USER_IDS,
            participants=participants,
        )
        if allowed or self._admins is None:
            return allowed
        return await self._admins.is_admin(user, record.thread.team)

    async def after(self, click: ApprovalClick, answer: ClickAnswer | None) -> ApprovalClick:
        """After the ack: the message in place and the audit event, or the ephemeral
        (a ``LATE`` click is followed up first). The click as it ended."""
        late = click.verdict is ApprovalVerdict.LATE
        if late:
            click = await self._late(click)
        record = click.record
        if click.verdict is ApprovalVerdict.DECIDED and record is not None:
            if answer is not None and click.ask.message is not None:
                await answer(*render_approval(record))
            await self._desk.show(record)
            await self._desk.audit(record, actor=click.ask.user, on_home=click.ask.on_home)
            if late:
                status, by = record.status.value, record.decided_by
                await self._ephemeral(click.ask, messages.approval_recorded_late(status, by))
            return click
        log.info("approval.click_refused", verdict=click.verdict.value, user=click.ask.user)
        if click.answer is not None:
            await self._ephemeral(click.ask, click.answer)
        return click

    async def show_all(self, ask: ApprovalAsk, trigger_id: str) -> None:
        """**Show all** (after the ack): the modal with the arguments in full, or an
        ephemeral saying why not. ``ask.approve`` plays no part."""
        found = await self._shown(ask)
        if isinstance(found, str):
            log.info("approval.arguments_refused", approval_id=ask.approval_id, user=ask.user)
            await self._ephemeral(ask, found)
            return
        try:
            surface = await self._workspaces.get(found.thread.team)
            view = arguments_view(found)
            await surface.budget.call("views.open", trigger_id=trigger_id, view=view)
        except (SlackError, BudgetNotRunning) as exc:
            log.warning("approval.arguments_not_opened", approval_id=found.id, error=repr(exc))
            await self._ephemeral(ask, messages.ARGUMENTS_NOT_SHOWN)

    async def _shown(self, ask: ApprovalAsk) -> ApprovalRecord | str:
        """The approval whose arguments ``ask``'s person may see in full, or why not."""
        refusal = await self._trust.refusal(_person(ask))
        if refusal is not None:
            return refusal
        try:
            async with asyncio.timeout(self._budget_s):
                record = await self._store.get_approval(ask.approval_id)
        except (TimeoutError, StorageError) as exc:
            log.warning("approval.arguments_not_read", error=repr(exc))
            return messages.ARGUMENTS_NOT_SHOWN
        if record is None or not _comes_from(ask, record):
            return messages.APPROVAL_NOT_FOUND
        if ask.on_home and record.requester != ask.user:
            public = await self._channels.public(record.thread.team, [record.thread.channel])
            if not may_see_arguments(record, ask.user, public):
                return messages.APPROVAL_NOT_FOUND
        return record

    async def _ephemeral(self, ask: ApprovalAsk, text: str) -> None:
        message = ask.message
        if message is None:
            return  # App Home answers by refreshing
        kwargs: dict[str, Any] = {"channel": message.channel, "user": ask.user, "text": text}
        if message.thread_ts:
            kwargs["thread_ts"] = message.thread_ts
        try:
            surface = await self._workspaces.get(message.team)
            await surface.budget.call("chat.postEphemeral", **kwargs)
        except (SlackError, BudgetNotRunning) as exc:
            log.warning("approval.reply_failed", error=repr(exc))


def _person(ask: ApprovalAsk) -> Person:
    """The person clicking, with the workspace the click comes from."""
    workspace = ask.team or (ask.message.team if ask.message is not None else None)
    return Person(ask.user, ask.user_team, workspace)


def _comes_from(ask: ApprovalAsk, record: ApprovalRecord) -> bool:
    """A click counts only on the approval's own message, or on its own workspace's App
    Home (a Home click from another workspace names a run not of its own)."""
    if ask.on_home:
        return ask.team is not None and ask.team == record.thread.team
    where = ask.message
    thread = record.thread
    if where is None or (where.team, where.channel) != (thread.team, thread.channel):
        return False
    if record.message_ts is not None:
        return where.message_ts == record.message_ts
    # Posted, but its ts not written yet (the owner writes it just after the post): all
    # the click can be held to is the run's thread.
    return thread.thread_ts == where.thread_ts


def _settled(ask: ApprovalAsk, deciding: asyncio.Task[ApprovalClick]) -> ApprovalClick:
    """The click a finished decision made; not recorded if the database failed it."""
    if not deciding.cancelled():
        error = deciding.exception()
        if error is None:
            return deciding.result()
        log.error("approval.not_recorded", reason="database_error", error=repr(error))
    answer = messages.stop_not_recorded(busy=False, typed=False)
    return ApprovalClick(ask, ApprovalVerdict.NOT_RECORDED, answer=answer)


def _already(ask: ApprovalAsk, record: ApprovalRecord) -> ApprovalClick:
    text = messages.approval_already_decided(record.status.value, record.decided_by)
    same = record.decided_by == ask.user and record.status is ask.status
    verdict = ApprovalVerdict.REDELIVERED if same else ApprovalVerdict.ALREADY_DECIDED
    return ApprovalClick(ask, verdict, record, text)
