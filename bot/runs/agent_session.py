"""A thread's agent session (``agents.sessions.setStatus``): its status values and the call.

Slack shows a native stop button while a thread's session is ``processing``, and nothing
moves the status but the app: a session left ``processing`` lingers for about an hour. So
every way a run ends moves it on: the run's own close (:class:`bot.runs.session.RunSession`),
its teardown after a failure, and the reconciler ending a run whose worker went away.
Slack accepts exactly the four :class:`SessionStatus` values; anything else is refused
with ``invalid_arguments`` (which would switch the feature off for the workspace).
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import TYPE_CHECKING

import structlog

from bot.errors import BudgetNotRunning

if TYPE_CHECKING:
    from bot.slack_api.surface import SlackSurface

__all__ = ["SESSION_CALL_TIMEOUT_S", "TITLE_LIMIT", "SessionStatus", "set_session_status"]

log = structlog.get_logger("bot.runs.agent_session")

TITLE_LIMIT = 200
"""Slack's limit on a session's title (characters)."""
SESSION_CALL_TIMEOUT_S = 5.0
"""An optional surface never holds up a run's ending for long."""


class SessionStatus(StrEnum):
    """The values ``agents.sessions.setStatus`` accepts."""

    ACTIVE = "active"
    """Waiting for the person (the run asked a question)."""
    PROCESSING = "processing"
    """A run is working: Slack shows its stop button."""
    SUSPENDED = "suspended"
    CLOSED = "closed"
    """Nothing runs in the thread."""


async def set_session_status(
    surface: SlackSurface, channel: str, thread_ts: str, status: SessionStatus, *, title: str
) -> bool:
    """Set the thread's session status; False (logged) if Slack did not take it, or the
    workspace has no agent sessions. Bounded by :data:`SESSION_CALL_TIMEOUT_S`."""
    try:
        async with asyncio.timeout(SESSION_CALL_TIMEOUT_S):
            reply = await surface.optional_call(
                surface.agent_sessions,
                "agents.sessions.setStatus",
                channel_id=channel,
                thread_ts=thread_ts,
                status=status.value,
                title=title[:TITLE_LIMIT],
            )
    except (TimeoutError, BudgetNotRunning) as exc:
        log.warning(
            "agent_session.status_not_set", status=status.value, thread=thread_ts, error=repr(exc)
        )
        return False
    return reply is not None
