"""The approval gate: a person says yes before a risky tool call runs.

An admin marks MCP tools in ``MCP_CONFIG`` (:class:`ApprovalRule`, per server and per
tool); a call to a marked tool is held by the run's :class:`ApprovalGate` until a person
decides through the :class:`~agent_core.ports.Approvals` port (Slack buttons, the
terminal's y/N). The gate is the one place that decides what the model reads:

- approved: the call runs as usual (the server never sees a call before this);
- denied: ``error: <tool>: denied by <who>``;
- nobody decided within ``APPROVAL_TIMEOUT``, or before the request's time budget ran
  out (whichever came first): denied as expired;
- a Stop while waiting: cancelled, not run, even if an approval was stored meanwhile
  that had not reached the call yet; the run goes on to its final turn;
- an Abort while waiting: cancelled, and the cancellation goes on (the run ends);
- a shutdown while waiting, or an abort because another worker took the run over: the
  request stays ``requested``, for the resumed run (or, if none, the app closes it).
- the request could not be asked for (the database failed): not run; the model reads a
  plain sentence (it may repeat it in the thread), the log has the detail.

The other calls of the same step are not held: each call waits on its own.

States (:class:`ApprovalStatus`)::

    requested ──► approved | denied | expired | cancelled   (terminal; first one wins)
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import structlog

from agent_core.process.tracing import approval_wait
from agent_core.values.approvals import (
    DEFAULT_APPROVAL_TIMEOUT_S,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalStatus,
)
from agent_core.values.clock import utcnow
from agent_core.values.events import ApprovalDecided, ApprovalRequested
from agent_core.values.stop import StopReason, StopSource

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent_core.ports import Approvals
    from agent_core.values.chat import ToolCall
    from agent_core.values.events import EventHub
    from agent_core.values.records import ThreadKey
    from agent_core.values.stop import RunControl

__all__ = ["ApprovalGate"]

_SETTLE_S = 2.0
"""How long an aborted wait may take to record that it was cancelled before the
cancellation goes on regardless (the row then stays ``requested``; a later click on
it is answered as after the run ended)."""

log = structlog.get_logger("agent_core.run.approval_gate")


class ApprovalGate:
    """Holds one run's calls that need approval until a person decides (built per run)."""

    def __init__(
        self,
        approvals: Approvals,
        *,
        run_id: str,
        requester: str,
        thread: ThreadKey,
        control: RunControl,
        events: EventHub,
        timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S,
        time_left: Callable[[], float | None] = lambda: None,
    ) -> None:
        """``time_left``: seconds until the request's time budget runs out (None without
        one, :meth:`agent_core.values.budget.Budget.time_left`): a wait ends at that or at
        ``timeout_s``, whichever comes first."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        self._approvals = approvals
        self._run_id = run_id
        self._requester = requester
        self._thread = thread
        self._control = control
        self._events = events
        self._timeout_s = timeout_s
        self._time_left = time_left
        self._log = log.bind(run_id=run_id)

    async def clear(self, call: ToolCall) -> str | None:
        """None when ``call`` may run; otherwise the error the model reads instead."""
        if self._control.reason is StopReason.STOP:
            return _refusal(call, ApprovalDecision(ApprovalStatus.CANCELLED))
        request = ApprovalRequest(
            id=uuid.uuid4().hex,
            run_id=self._run_id,
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            requester=self._requester,
            thread=self._thread,
            requested_at=utcnow(),
        )
        self._log.info("approval.requested", approval_id=request.id, tool=call.name)
        self._events.emit(ApprovalRequested(self._run_id, request))
        try:
            with approval_wait(request) as wait:
                decision = await self._wait(request)
                wait.decided(decision)
        except Exception as exc:  # the call is not run: the model reads why, the run goes on
            # The detail (a host, a DSN) is the operator's; the model may repeat its text.
            self._log.exception(
                "approval.failed", approval_id=request.id, tool=call.name, error=str(exc)
            )
            return f"error: {call.name}: not run: {_NOT_ASKED}"
        self._log.info(
            "approval.decided",
            approval_id=request.id,
            tool=call.name,
            status=decision.status.value,
            decided_by=decision.decided_by,
        )
        self._events.emit(ApprovalDecided(self._run_id, request, decision))
        return None if decision.approved else _refusal(call, decision)

    def _deadline_s(self) -> float:
        """How long a wait may last: ``APPROVAL_TIMEOUT``, or less if the request's time
        budget runs out first (the wait holds a live run's place meanwhile)."""
        left = self._time_left()
        return self._timeout_s if left is None else min(self._timeout_s, left)

    async def _wait(self, request: ApprovalRequest) -> ApprovalDecision:
        approvals = self._approvals
        asking = asyncio.create_task(approvals.ask(request), name=f"approval:{request.id}")
        stopped = asyncio.create_task(self._stop_requested(), name=f"approval-stop:{request.id}")
        try:
            async with asyncio.timeout(self._deadline_s()):
                await asyncio.wait({asking, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            return await self._settle(asking, request, ApprovalStatus.EXPIRED)
        except asyncio.CancelledError:
            # Abort: the request is cancelled (bounded), then the cancellation goes on.
            # Shutdown: it stays requested, for the resumed run to wait on. An abort
            # because another worker took the run over (its lease ran out) leaves it to
            # that worker too: resumed there, the run waits on the same request.
            await _drain(asking)
            if self._control.reason is StopReason.ABORT and not self._taken_over():
                try:
                    async with asyncio.timeout(_SETTLE_S):
                        await asyncio.shield(approvals.settle(request, ApprovalStatus.CANCELLED))
                except Exception as exc:  # the abort goes on whatever the record does
                    self._log.warning("approval.cancel_unrecorded", error=repr(exc))
            raise
        finally:
            await _drain(stopped)
        if asking.done():
            return asking.result()
        # A Stop while the call waited: it is not run, whatever the row says. An approval
        # stored meanwhile that had not reached the call (its wake-up still on the way)
        # came too late; the approval message says so (the desk shows it).
        decision = await self._settle(asking, request, ApprovalStatus.CANCELLED)
        if decision.approved:
            return ApprovalDecision(ApprovalStatus.CANCELLED, decision.decided_by)
        return decision

    def _taken_over(self) -> bool:
        request = self._control.request
        return request is not None and request.source is StopSource.LEASE

    async def _stop_requested(self) -> None:
        """Returns on a Stop. An Abort or a shutdown cancels the run's task instead, so
        this then waits for ever (and is cancelled with the wait)."""
        if (await self._control.wait_requested()).reason is not StopReason.STOP:
            await asyncio.get_running_loop().create_future()

    async def _settle(
        self,
        asking: asyncio.Task[ApprovalDecision],
        request: ApprovalRequest,
        status: ApprovalStatus,
    ) -> ApprovalDecision:
        """End the wait with ``status`` unless a person's decision got there first."""
        await _drain(asking)
        return await self._approvals.settle(request, status)


async def _drain(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` if it still runs and wait for it to unwind (its result is not
    needed). ``asyncio.wait`` raises nothing of the task's; a cancellation of the caller
    goes on as usual."""
    if not task.done():
        task.cancel()
        await asyncio.wait([task])


_NOT_ASKED = (
    "its approval could not be asked for (the app could not record the request); try again later"
)
"""What the model reads when the request could not be asked for: no error text, which may
name a host or a DSN, and which the model may repeat in the thread."""


def _refusal(call: ToolCall, decision: ApprovalDecision) -> str:
    match decision.status:
        case ApprovalStatus.DENIED:
            return f"error: {call.name}: denied by {decision.decided_by or 'a person'}"
        case ApprovalStatus.EXPIRED:
            return f"error: {call.name}: denied: nobody approved it in time (the request expired)"
        case _ if decision.decided_by is not None:  # approved, but the Stop came first
            return (
                f"error: {call.name}: not run: the run was stopped before it could run "
                f"(approved by {decision.decided_by}, too late)"
            )
        case _:
            return f"error: {call.name}: not run: the run was stopped before anyone approved it"
