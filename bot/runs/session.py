"""A run's Slack surface: its status message, its streamed answer, its agent session.

The status message is posted once and then only updated in place:
progress updates are coalesced by the workspace budget and may be dropped; the terminal
update is never dropped. The answer streams with ``chat.startStream`` /
``chat.appendStream`` / ``chat.stopStream`` where the workspace allows; where it does not,
the answer is shown in the status message instead, through ``chat.update``.

A model call that fails partway is retried; the text it streamed is void. It is dropped
from the answer at once; a stream (append-only) shows a "retrying" marker meanwhile, and
its message is rewritten with the answer that counts once the run has ended.

Guidance (replies written to the run while it works) is marked on the reply itself by
the session's :class:`~bot.steering.guidance.GuidanceMarks`: taken, sent with a model request, or
never seen because the run ended first; what the model never saw is listed in the
handoff. A run interrupted by a shutdown leaves its guidance queued: the run is resumed,
and the resumed run takes it.

Tools and sub-agents: a running tool's progress (an MCP server's progress notifications)
is shown as the run's activity. The run's sub-agents (``delegate``) are listed as its
tasks, each with what it is doing (followed on the child's own events) and, once it has
ended, its outcome. In the streamed answer (:mod:`bot.runs.answer_stream`) each tool call and
each sub-agent is a ``task_update`` card of the timeline, under the run's task as title.

The thread's agent session (:mod:`bot.runs.agent_session`) is ``processing`` while the run
works and moves on at every ending: ``closed`` (or ``active`` when the run asks the
person a question) when it closes, ``closed`` when its task is torn down after a
failure; a run handed to another worker is left to its new owner.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import (
    ApprovalDecided,
    ApprovalRequested,
    ChildFinished,
    ChildStarted,
    ExitCode,
    GuidanceDelivered,
    Outcome,
    Retrying,
    RunEvent,
    StepRestarted,
    StopReason,
    StopRequested,
    StopSource,
    TextDelta,
    ToolFinished,
    ToolProgress,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from agent_core.run.delegation import DELEGATE
from bot import messages
from bot.errors import BudgetNotRunning, SlackError
from bot.runs.agent_session import SessionStatus, set_session_status
from bot.runs.answer_stream import AnswerStream, TaskStatus
from bot.runs.approval_wait import WaitingForApproval
from bot.steering.guidance import GuidanceMarks
from bot.views.status import ChildTask, StatusSnapshot, render_status

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent_core import GuidanceRecord, Run, RunResult
    from bot.slack_api.click_answer import ClickAnswer
    from bot.slack_api.surface import SlackSurface
    from bot.store_needs import SessionStore
    from bot.views.status import EndingView

__all__ = ["AnswerStream", "RunSession"]  # AnswerStream: bot.runs.answer_stream's, re-exported

log = structlog.get_logger("bot.runs.session")

RENDER_EVERY_S = 0.25
"""Progress re-renders of one status message are at least this far apart."""


class RunSession:
    """The run's Slack side, in its thread (``run.thread``): its status message, its
    streamed answer and its agent session.

    ``status_ts``: the status message it continues in (one queued for it, or its own when
    it resumes); ``resumed``: it resumes there, and says so while it starts.
    """

    def __init__(
        self,
        run: Run,
        surface: SlackSurface,
        *,
        store: SessionStore,
        status_ts: str | None = None,
        resumed: bool = False,
        history_note: str = "",
    ) -> None:
        """``history_note``: said under the status while the run is live (that the
        thread's older messages were not read)."""
        self.run = run
        self.surface = surface
        self._rate_budget = surface.budget
        """The workspace's rate budget: the session writes to Slack through it."""
        self._request_budget = run.budget
        """The request's budget (a sub-agent spends from it too): the status shows it."""
        self.channel = run.thread.channel
        self.thread_ts = run.thread.thread_ts
        self.status_ts = status_ts
        """Set when it continues in a message it already has (queued, or resuming)."""
        self._started = time.monotonic()
        self._last_render = -RENDER_EVERY_S
        self._render_timer: asyncio.TimerHandle | None = None
        resuming = resumed and status_ts is not None
        self._snapshot = _opening(run, resuming=resuming, history_note=history_note)
        self._answer: list[str] = []
        self._step_start = 0
        """Where the current step's text begins in ``_answer`` (void if the step fails)."""
        self._stream = _answer_stream(run, surface, answer=lambda: "".join(self._answer))
        self._session: SessionStatus | None = None
        """The agent-session status this run last set (None: never set, or handed over)."""
        self._guidance = GuidanceMarks(run.id, store, surface)
        self._approvals = WaitingForApproval(self._session_status)
        """Calls waiting for approval: the activity says so, the session is suspended."""
        self._closing = False
        """The run is ending here: nothing but its final (or its new owner) writes now."""
        self._click_answer = asyncio.Lock()
        """Held while a click's answer is in flight: the final waits for it."""
        run.events.add_listener(self._on_event)

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> bool:
        """Post the status message (or, resuming, take over the existing one).

        The post carries the run id in its metadata, so a post whose answer was lost (a
        5xx, a timeout) is found in the thread rather than posted twice. False (logged)
        if Slack would not take it, or it cannot be told whether it did.
        """
        if self.status_ts is not None:
            # Live again in a message whose final report was written (a resume): the
            # budget would drop its progress as late, and the old buttons would stay.
            self._rate_budget.reopen(self.channel, self.status_ts)
            self._push_progress()
            await self._session_status(SessionStatus.PROCESSING)
            self._stream.start()
            return True
        rendered = render_status(self._snapshot)
        try:
            self.status_ts = await self._rate_budget.post_message(
                self.channel,
                text=rendered.text,
                blocks=rendered.blocks,
                thread_ts=self.thread_ts,
                metadata=rendered.metadata,
            )
        except SlackError as exc:
            log.error("status.post_failed", error=exc.error, run_id=self.run.id)
            return False
        await self._session_status(SessionStatus.PROCESSING)
        self._stream.start()
        return True

    async def close(self, result: RunResult, *, ending: EndingView | None = None) -> bool:
        """Write the terminal status, then close the answer stream. True if Slack took it.

        ``ending``: why the run ended and whether it resumes (docs/stopping.md), shown under the
        handoff.

        The terminal status goes first: closing a stream is rate-limited harder than
        ``chat.update``, and at shutdown every run's final must land within the budget.
        """
        self._closing = True
        self._cancel_render()
        async with self._click_answer:
            pass  # a click's answer in flight lands before the final, never over it
        await self._stream.drain()
        if result.exit_code is not ExitCode.SHUTDOWN:
            # Ended for good: what the model never saw is marked, and listed in the handoff.
            undelivered = await self._guidance.undelivered(result.undelivered_guidance)
            result = replace(result, undelivered_guidance=undelivered)
        snapshot = replace(
            self._snapshot,
            phase="done",
            result=result,
            elapsed_s=self._elapsed(),
            spent=self._request_budget.spent(),
            answer="".join(self._answer),
            answer_streamed=self._stream.complete,
            ending=ending,
        )
        rendered = render_status(snapshot)
        assert self.status_ts is not None
        delivered = await self._rate_budget.update_final(
            self.channel, self.status_ts, text=rendered.text, blocks=rendered.blocks
        )
        if not delivered:
            log.error(
                "status.final_not_delivered", run_id=self.run.id, outcome=result.outcome.value
            )
        await self._stream.end("".join(self._answer))
        await self._approvals.settle()
        waiting = result.outcome is Outcome.ASK_USER_QUESTION
        await self._session_status(SessionStatus.ACTIVE if waiting else SessionStatus.CLOSED)
        # Last: reactions are rate-limited harder than anything above (Tier 2 removes).
        await self._guidance.drain()
        return delivered

    async def not_recorded(self) -> None:
        """Tell the thread the run was not started: the database did not answer when it
        was to be recorded (logged, if Slack will not take it either)."""
        try:
            await self._rate_budget.post_message(
                self.channel, text=messages.RUN_NOT_RECORDED, thread_ts=self.thread_ts
            )
        except SlackError as exc:
            log.error("reply.failed", error=exc.error)
        except BudgetNotRunning:
            log.error("reply.failed", error="shutting down")

    async def abandon(self) -> None:
        """Leave the Slack message (and the guidance) to the run's new owner: only close
        our stream. The agent session is the new owner's to move."""
        self._session = None
        self._closing = True
        self._cancel_render()
        await self._approvals.settle()
        await self._guidance.cancel()
        await self._stream.finish()

    async def discard(self) -> None:
        """Stop the answer pump without flushing (the run task is being torn down), and
        close an agent session the run left ``processing`` (it failed before closing)."""
        self._closing = True
        self._cancel_render()
        await self._guidance.cancel()
        await self._stream.cancel()
        await self._approvals.settle()
        if self._session in (SessionStatus.PROCESSING, SessionStatus.SUSPENDED):
            await self._session_status(SessionStatus.CLOSED)

    async def answer_click(self, answer: ClickAnswer) -> bool:
        """Show the status as it is now on the message a button was pressed on, through
        that click's ``response_url`` (:mod:`bot.slack_api.click_answer`): ahead of all progress
        waiting for ``chat.update``; the budget's own update follows as usual. False
        once the run is ending here (its final goes first, and nothing over it), or when
        Slack did not take it."""
        async with self._click_answer:
            if self._closing or self.status_ts is None:
                return False
            return await answer(*self._progress())

    def guidance_received(self, record: GuidanceRecord) -> None:
        """The run took a reply into its inbox (:meth:`bot.runs.supervisor.Supervisor.guide`)."""
        self._guidance.received(record)

    # -- progress ----------------------------------------------------------------------

    def _on_event(self, event: RunEvent) -> None:
        """Follow the run's events: the status message shows its progress."""
        match event:
            case StopRequested(reason=reason, requested_by=who, source=source):
                self._stop_requested(reason, who, source)
                return
            case GuidanceDelivered(turn=turn, guidance=guidance):
                self._guidance.delivered(guidance, turn)
                return
            case TextDelta(text=text):
                shown = self._text(text)
            case StepRestarted():
                shown = self._step_restarted()
            case ApprovalRequested(request=request):
                activity = self._approvals.requested(request.id, request.tool)
                shown = replace(self._snapshot, activity=activity)
            case ApprovalDecided(request=request, decision=decision):
                approved = decision.approved
                activity = self._approvals.decided(request.id, request.tool, approved=approved)
                shown = replace(self._snapshot, activity=activity)
            case ToolStarted() | ToolProgress() | ToolFinished() | ChildStarted() | ChildFinished():
                shown = self._tool_event(event)
            case _:
                shown = self._turn_event(event)
        if shown is None:
            return  # nothing visible changed in the status
        waiting = self._approvals.activity
        if waiting is not None and shown.activity != waiting:
            shown = replace(shown, activity=waiting)
        self._snapshot = shown
        self._push_progress()

    def _turn_event(self, event: RunEvent) -> StatusSnapshot | None:
        s = self._snapshot
        match event:
            case TurnStarted(turn=turn, final=final):
                activity = (
                    messages.ACTIVITY_FINAL_REPORT if final else messages.ACTIVITY_WAITING_FOR_MODEL
                )
                self._step_start = len(self._answer)
                return replace(
                    s,
                    phase="stopping" if s.phase == "stopping" else "running",
                    turn=turn,
                    activity=activity,
                )
            case Retrying(delay_s=delay, error=error):
                return replace(s, activity=messages.activity_retry(delay, error))
            case TurnFinished():
                return s  # the request's spend moved (read from its budget at render)
        return None

    def _text(self, text: str) -> StatusSnapshot | None:
        self._answer.append(text)
        self._stream.push(text)
        s = self._snapshot
        if s.activity != messages.ACTIVITY_WRITING_ANSWER:
            return replace(s, activity=messages.ACTIVITY_WRITING_ANSWER)
        if not self._stream.active:
            self._push_progress()  # the status message shows the answer
        # Else the answer goes to its own message (even while chat.startStream waits for
        # its budget): nothing visible changed in the status.
        return None

    def _step_restarted(self) -> StatusSnapshot | None:
        if len(self._answer) == self._step_start:
            return None  # the failed attempt had written nothing
        del self._answer[self._step_start :]
        self._stream.void("\n\n" + messages.STREAM_RETRYING + "\n\n")
        return self._snapshot

    def _tool_event(self, event: RunEvent) -> StatusSnapshot | None:
        s = self._snapshot
        match event:
            case ToolStarted(name=name, call_id=call_id):
                waiting = name == DELEGATE  # the sub-agents show their own progress
                activity = messages.ACTIVITY_SUB_AGENTS if waiting else messages.activity_tool(name)
                if not waiting:
                    self._stream.task(call_id, TaskStatus.IN_PROGRESS, title=name)
                return replace(s, activity=activity)
            case ToolProgress(name=name) if name == DELEGATE:
                return None  # a sub-agent's turns: shown on its own line (_watch_child)
            case ToolProgress(
                name=name, call_id=call_id, progress=progress, total=total, message=message
            ):
                activity = messages.activity_tool_progress(name, progress, total, message)
                self._stream.task(call_id, TaskStatus.IN_PROGRESS, details=activity)
                return replace(s, activity=activity)
            case ChildStarted(child_id=child_id, task=task):
                self._watch_child(child_id)
                self._stream.task(child_id, TaskStatus.IN_PROGRESS, title=task)
                return replace(s, children=(*s.children, ChildTask(child_id, task)))
            case ChildFinished(child_id=child_id, result=result):
                self._guidance.never_seen(result.undelivered_guidance)
                finished = result.outcome is Outcome.FINISHED
                status = TaskStatus.COMPLETE if finished else TaskStatus.ERROR
                self._stream.task(child_id, status, details=messages.result_label(result))
                return replace(s, children=_updated(s.children, child_id, result=result))
            case ToolFinished(name=name, call_id=call_id, ok=ok):
                if name != DELEGATE:
                    status = TaskStatus.COMPLETE if ok else TaskStatus.ERROR
                    self._stream.task(call_id, status)
                return replace(s, activity=messages.ACTIVITY_WAITING_FOR_MODEL)
        return None

    def _stop_requested(self, reason: StopReason, who: str, source: StopSource) -> None:
        """The buttons must change now: Stop disappears, Abort stays."""
        s = self._snapshot
        timed_out = source is StopSource.TIMER
        self._snapshot = replace(
            s,
            phase="stopping",
            stop_reason=reason,
            stop_requested_by=who,
            escalated_from=s.stop_requested_by if s.stop_reason is StopReason.STOP else None,
            # The run's only timer: FINAL_TURN_TIMEOUT (agent_core/run/final_turn.py).
            final_turn_timeout_s=(
                self.run.agent.config.final_turn_timeout_s if timed_out else None
            ),
        )
        self._push_progress(urgent=True)

    def _watch_child(self, child_id: str) -> None:
        """Follow a sub-agent's own events (they stay on its hub) for its task line."""
        child = next((c for c in self.run.children if c.id == child_id), None)
        if child is None:
            return
        turn = 0

        def on_child_event(event: RunEvent) -> None:
            nonlocal turn
            match event:
                case StopRequested(reason=reason, requested_by=who):
                    # Its own Stop or Abort (or its parent's, passed down): its section
                    # says so, and its controls change, at once.
                    s = self._snapshot
                    changes = {"stop": reason, "stopped_by": who}
                    self._snapshot = replace(s, children=_updated(s.children, child_id, **changes))
                    details = messages.sub_agent_stop_card(reason, who)
                    self._stream.task(child_id, TaskStatus.IN_PROGRESS, details=details)
                    self._push_progress(urgent=True)
                    return
                case GuidanceDelivered(turn=n, guidance=guidance):
                    self._guidance.delivered(guidance, n)  # guidance for it alone (Steer…)
                    return
                case TurnStarted(turn=n, final=final):
                    turn = n
                    doing = messages.SUB_AGENT_REPORTING if final else ""
                case ToolStarted(name=name):
                    doing = messages.activity_tool(name)
                case ToolProgress(name=name, progress=progress, total=total, message=message):
                    doing = messages.activity_tool_progress(name, progress, total, message)
                case TurnFinished():
                    self._push_progress()  # it spent from the request's budget
                    return
                case ApprovalRequested(request=request):
                    doing = self._approvals.requested(request.id, request.tool)
                case ApprovalDecided(request=request, decision=decision):
                    approved = decision.approved
                    self._approvals.decided(request.id, request.tool, approved=approved)
                    doing = messages.activity_tool(request.tool) if approved else ""
                case _:
                    return
            s = self._snapshot
            activity = messages.sub_agent_turn(turn, doing)
            self._stream.task(child_id, TaskStatus.IN_PROGRESS, details=activity)
            self._snapshot = replace(s, children=_updated(s.children, child_id, activity=activity))
            self._push_progress()

        child.events.add_listener(on_child_event)

    def _push_progress(self, *, urgent: bool = False) -> None:
        """Queue a re-render of the status message, at most every RENDER_EVERY_S (a
        trailing one catches the last change); ``urgent`` (a stop request) queues it at
        once. The render itself happens when the budget sends it (:meth:`_render_now`)."""
        if self.status_ts is None:
            return
        wait = self._last_render + RENDER_EVERY_S - time.monotonic()
        if urgent or wait <= 0:
            self._render_now()
        elif self._render_timer is None:
            self._render_timer = asyncio.get_running_loop().call_later(wait, self._render_now)

    def _cancel_render(self) -> None:
        if self._render_timer is not None:
            self._render_timer.cancel()
            self._render_timer = None

    def _render_now(self) -> None:
        """Queue the status message's update. It is rendered only when the workspace
        budget sends it, from the state at that moment: most runs wait for their turn,
        and renders made while waiting would be coalesced away unseen."""
        self._cancel_render()
        if self.status_ts is None:
            return
        self._last_render = time.monotonic()
        self._rate_budget.update_progress_lazily(self.channel, self.status_ts, self._progress)

    def _progress(self) -> tuple[str, list[dict[str, Any]]]:
        snapshot = replace(
            self._snapshot,
            elapsed_s=self._elapsed(),
            spent=self._request_budget.spent(),
            answer="".join(self._answer),
            answer_streamed=self._stream.active,
        )
        rendered = render_status(snapshot)
        return rendered.text, rendered.blocks

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    async def _session_status(self, status: SessionStatus) -> None:
        self._session = status
        await set_session_status(
            self.surface, self.channel, self.thread_ts, status, title=self.run.task
        )


def _opening(run: Run, *, resuming: bool, history_note: str) -> StatusSnapshot:
    """The status of ``run`` as it opens: starting (or ``resuming``, in its own message)."""
    return StatusSnapshot(
        run_id=run.id,
        requester=run.requester,
        phase="starting",
        activity=messages.STATUS_RESUMING if resuming else messages.STATUS_STARTING,
        history_note=history_note,
    )


def _answer_stream(run: Run, surface: SlackSurface, *, answer: Callable[[], str]) -> AnswerStream:
    """The stream of ``run``'s answer in its thread, addressed to its requester, with
    its task as the title of its tool and sub-agent cards (``answer``: what counts)."""
    thread = run.thread
    return AnswerStream(
        surface,
        thread.channel,
        thread.thread_ts,
        run.requester,
        thread.team,
        run_id=run.id,
        plan_title=run.task,
        answer=answer,
    )


def _updated(
    children: tuple[ChildTask, ...], child_id: str, **changes: Any
) -> tuple[ChildTask, ...]:
    return tuple(replace(c, **changes) if c.child_id == child_id else c for c in children)
