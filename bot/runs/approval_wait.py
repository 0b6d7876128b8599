"""A run's status while its calls wait for approval: the activity line says so, and the
thread's agent session is ``suspended`` until every held call is decided, then
``processing`` again (docs/tools.md, Approvals).

One per :class:`bot.runs.session.RunSession`, fed from the run's events (synchronous), so
the session-status calls it makes are its own tasks, chained in order; the session waits
for the last one (:meth:`WaitingForApproval.settle`) before it writes its own ending.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bot import messages
from bot.runs.agent_session import SessionStatus

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["WaitingForApproval"]

_SETTLE_S = 6.0
"""A session-status call is bounded (5 s) by itself: this is only a backstop."""


class WaitingForApproval:
    """Which of a run's calls wait for approval, and the agent-session status that follows."""

    def __init__(self, set_status: Callable[[SessionStatus], Awaitable[None]]) -> None:
        self._set_status = set_status
        self._waiting: dict[str, str] = {}
        """Approval ids of the calls waiting, and their tools."""
        self._task: asyncio.Task[None] | None = None

    @property
    def activity(self) -> str | None:
        """What the status says while a call waits (it wins over the step's other calls'
        progress: the run cannot go on without a person); None when none waits."""
        if not self._waiting:
            return None
        return messages.activity_awaiting_approval(next(iter(self._waiting.values())))

    def requested(self, request_id: str, tool: str) -> str:
        """A call waits: the activity to show."""
        if not self._waiting:
            self._set(SessionStatus.SUSPENDED)
        self._waiting[request_id] = tool
        return messages.activity_awaiting_approval(tool)

    def decided(self, request_id: str, tool: str, *, approved: bool) -> str:
        """A waiting call was decided: the activity to show."""
        if self._waiting.pop(request_id, None) is not None and not self._waiting:
            self._set(SessionStatus.PROCESSING)
        if self.activity is not None:
            return self.activity
        return messages.activity_tool(tool) if approved else messages.ACTIVITY_WAITING_FOR_MODEL

    async def settle(self) -> None:
        """Wait for the last status call (the session's ending goes after it)."""
        task, self._task = self._task, None
        if task is not None:
            await asyncio.wait([task], timeout=_SETTLE_S)

    def _set(self, status: SessionStatus) -> None:
        previous = self._task

        async def call() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            await self._set_status(status)

        self._task = asyncio.create_task(call(), name=f"agent-session:{status.value}")
