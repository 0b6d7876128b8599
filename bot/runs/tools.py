"""Tools the Slack app adds to its agent's own: ``slack_read_thread``.

``slack_read_thread`` reads the thread of the run calling it (``conversations.replies``,
through the workspace's :class:`~bot.slack_api.rate_budget.SlackRateBudget`, like every Web
API call),
so the agent can work with what people wrote there, including what they wrote after the
run started. It takes no arguments, and what it can cost is bounded: the thread is read
as a new run's history is (:func:`bot.inbound.thread_history.read_replies`: to its end, at most
:data:`~bot.inbound.thread_history.MAX_PAGES` pages), and the model gets the newest messages, cut
as that history is (:func:`bot.inbound.thread_history.history_from`: a number of messages and of
characters), newest last. Only this app's own posts read as its own; people and other
apps are named, and each message's later lines are indented, so no text in the thread
can pass for another message. A sub-agent reads its parent's thread. The run's own
status message (found by its metadata) is left out: its progress lines are noise to the
model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core import Tool, ToolError, current_run, tool
from bot import messages
from bot.config.settings import HistoryLimit
from bot.errors import BudgetNotRunning, SlackError
from bot.inbound.thread_history import (
    HISTORY_MESSAGES,
    MAX_PAGES,
    PAGE_SIZE,
    history_from,
    read_replies,
)
from bot.views.status import RUN_EVENT_TYPE

if TYPE_CHECKING:
    from agent_core import Run
    from bot.access.trust import TrustGate
    from bot.slack_api.identity import AppIdentity
    from bot.slack_api.surface import Workspaces

__all__ = ["SLACK_READ_THREAD", "slack_read_thread"]

SLACK_READ_THREAD = "slack_read_thread"


def slack_read_thread(workspaces: Workspaces, me: AppIdentity, trust: TrustGate) -> Tool:
    """The ``slack_read_thread`` tool of this app (its own posts read as the assistant's;
    those of people ``trust`` would refuse labelled untrusted)."""

    @tool(name=SLACK_READ_THREAD)
    async def read_thread() -> str:
        """Read the Slack thread you are working in: what people (and you) wrote there,
        including replies sent while you work, oldest first."""
        run = current_run()
        own = _root(run).id

        def wanted(message: dict[str, Any]) -> bool:
            return bool(message.get("text")) and _run_of(message) != own

        try:
            surface = await workspaces.get(run.thread.team)
            replies = await read_replies(
                surface.budget,
                run.thread,
                keep=HISTORY_MESSAGES,
                wanted=wanted,
                with_metadata=True,
                allowance=surface.history,
            )
        except SlackError as exc:
            raise ToolError(f"Slack would not give the thread ({exc.error})") from exc
        except BudgetNotRunning as exc:
            raise ToolError("threadpilot is shutting down") from exc
        if replies.withheld:
            return messages.HISTORY_NOT_READ_TOOL
        untrusted = await trust.untrusted(replies.newest, workspace=run.thread.team)
        history = history_from(replies.newest, surface.me or me, exclude_ts="", untrusted=untrusted)
        lines = [_line(m["role"], str(m["content"])) for m in history]
        limited = surface.history.limit is HistoryLimit.DISTRIBUTED
        heading = _heading(len(lines), replies.read, replies.complete, limited=limited)
        return heading + "\n".join(lines)

    return read_thread


def _root(run: Run) -> Run:
    while run.parent is not None:
        run = run.parent
    return run


def _run_of(message: dict[str, Any]) -> str | None:
    """The run id a status message of ours carries in its metadata."""
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != RUN_EVENT_TYPE:
        return None
    payload = metadata.get("event_payload") or {}
    return None if payload.get("part") else payload.get("run_id")


def _line(role: str, content: str) -> str:
    # Others' messages already read "<@U…>: text", "[untrusted, …: <@U…>]: text" or
    # "[app: name]: text" (history_from).
    # A message's later lines are indented: only a message's first line starts a line.
    said = content if role == "user" else f"threadpilot (an agent run): {content}"
    return said.replace("\n", "\n    ")


def _heading(shown: int, written: int, complete: bool, *, limited: bool = False) -> str:
    """``limited``: Slack let the app read one short page (``SLACK_HISTORY_LIMIT``)."""
    if not written:
        return "The thread has no messages with text yet."
    parts = [f"The thread, oldest first: {shown} message(s)"]
    if shown < written:
        parts.append(f" (the newest; {written - shown} earlier one(s) left out to fit)")
    if not complete and limited:
        parts.append(f". {messages.THREAD_READ_IN_PART_LIMITED}")
    elif not complete:
        parts.append(
            f". It has more than {MAX_PAGES * PAGE_SIZE:,} replies and only the first "
            f"{MAX_PAGES * PAGE_SIZE:,} were read; these are the newest of those"
        )
    return "".join(parts) + ":\n"
