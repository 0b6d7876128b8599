"""Tools the Slack app adds to its agent's own: ``slack_read_thread``.

``slack_read_thread`` reads the thread of the run calling it (``conversations.replies``,
through the workspace's :class:`~bot.slack_budget.SlackBudget`, like every Web API call),
so the agent can work with what people wrote there, including what they wrote after the
run started. It takes no arguments, and what it can cost is bounded: at most
:data:`MAX_PAGES` pages of :data:`PAGE_SIZE` replies are read, and the model gets the
newest of them, cut as a new run's thread history is (:func:`bot.handlers.mentions.
history_from`: a number of messages and of characters), newest last. A sub-agent reads
its parent's thread. The run's own status message (found by its metadata) is left out:
its progress lines are noise to the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core import Tool, ToolError, current_run, tool
from bot.errors import BudgetNotRunning, SlackError
from bot.thread_history import history_from
from bot.views.status import RUN_EVENT_TYPE

if TYPE_CHECKING:
    from agent_core import Run, ThreadKey
    from bot.slack_budget import SlackBudget
    from bot.surface import Workspaces

__all__ = ["MAX_PAGES", "PAGE_SIZE", "SLACK_READ_THREAD", "slack_read_thread"]

SLACK_READ_THREAD = "slack_read_thread"
PAGE_SIZE = 200
MAX_PAGES = 5
"""A thread longer than this many pages (1,000 replies) is read up to there, and the
model is told."""


def slack_read_thread(workspaces: Workspaces, bot_user_id: str) -> Tool:
    """The ``slack_read_thread`` tool of this app (its bot user reads as the assistant)."""

    @tool(name=SLACK_READ_THREAD)
    async def read_thread() -> str:
        """Read the Slack thread you are working in: what people (and you) wrote there,
        including replies sent while you work, oldest first."""
        run = current_run()
        thread = run.thread
        try:
            surface = await workspaces.get(thread.team)
            replies, complete = await _replies(surface.budget, thread)
        except SlackError as exc:
            raise ToolError(f"Slack would not give the thread ({exc.error})") from exc
        except BudgetNotRunning as exc:
            raise ToolError("threadpilot is shutting down") from exc
        own = _root(run).id
        written = [m for m in replies if m.get("text") and _run_of(m) != own]
        history = history_from(written, bot_user_id, exclude_ts="")
        lines = [_line(m["role"], str(m["content"])) for m in history]
        return _heading(len(lines), len(written), complete) + "\n".join(lines)

    return read_thread


async def _replies(budget: SlackBudget, thread: ThreadKey) -> tuple[list[dict[str, Any]], bool]:
    """The thread's messages, oldest first, and whether that is all of them."""
    found: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(MAX_PAGES):
        page = await budget.call(
            "conversations.replies",
            channel=thread.channel,
            ts=thread.thread_ts,
            include_all_metadata=True,
            limit=PAGE_SIZE,
            **({"cursor": cursor} if cursor else {}),
        )
        found += page.get("messages", [])
        cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
        if not cursor:
            return found, True
    return found, False


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
    # People's messages already read "<@U…>: text" (history_from).
    return content if role == "user" else f"threadpilot (an agent run): {content}"


def _heading(shown: int, written: int, complete: bool) -> str:
    if not written:
        return "The thread has no messages with text yet."
    parts = [f"The thread, oldest first: {shown} message(s)"]
    if shown < written:
        parts.append(f" (the newest; {written - shown} earlier one(s) left out to fit)")
    if not complete:
        parts.append(
            f". It has more than {MAX_PAGES * PAGE_SIZE:,} replies and only the first "
            f"{MAX_PAGES * PAGE_SIZE:,} were read"
        )
    return "".join(parts) + ":\n"
