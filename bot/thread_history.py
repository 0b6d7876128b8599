"""A Slack thread as the chat history a run starts from (docs/architecture.md, The path
of a mention): the app's own posts as the assistant's turns, people's messages as user
turns ("<@U…>: text"), at most ``HISTORY_MESSAGES`` messages and ``HISTORY_CHARS``
characters, newest last.

The message that asked for the run is its task, not its history, and is left out: by its
``ts`` when the caller has it (the mention being handled), else as the requester's latest
message saying the task (a run taken from the queue after its accepting worker went
away, which had not read the thread yet).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import structlog

from bot.errors import SlackError

if TYPE_CHECKING:
    from agent_core import ChatMessage, ThreadKey
    from bot.surface import SlackSurface

__all__ = ["HISTORY_CHARS", "HISTORY_MESSAGES", "history_from", "read_thread", "task_of"]

log = structlog.get_logger("bot.thread_history")

HISTORY_MESSAGES = 50
HISTORY_CHARS = 20_000


def task_of(text: str, bot_user_id: str) -> str:
    """The task a message asks for: its text without its mentions of the app ("Hello"
    when that leaves nothing)."""
    return _without_mentions(text, bot_user_id) or "Hello"


def _without_mentions(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()


async def read_thread(
    surface: SlackSurface,
    thread: ThreadKey,
    bot_user_id: str,
    *,
    requester: str,
    task: str,
    asked_ts: str | None = None,
) -> list[ChatMessage]:
    """The thread's history for a run asked for by ``requester`` with ``task`` (in the
    message ``asked_ts``, if known). Empty if Slack cannot give it: the run goes on
    without it."""
    try:
        reply = await surface.budget.call(
            "conversations.replies", channel=thread.channel, ts=thread.thread_ts, limit=200
        )
    except SlackError as exc:
        log.warning("thread.history_unavailable", error=exc.error)
        return []
    written: list[dict[str, Any]] = list(reply.get("messages", []))
    if asked_ts is None:
        asked_ts = _asking_ts(written, bot_user_id, requester, task)
    return history_from(written, bot_user_id, exclude_ts=asked_ts or "")


def _asking_ts(
    written: list[dict[str, Any]], bot_user_id: str, requester: str, task: str
) -> str | None:
    for message in reversed(written):
        said = task_of(str(message.get("text") or ""), bot_user_id)
        if message.get("user") == requester and said == task:
            return str(message.get("ts"))
    return None


def history_from(
    slack_messages: list[dict[str, Any]], bot_user_id: str, *, exclude_ts: str
) -> list[ChatMessage]:
    """The thread as a chat history: our posts as the assistant, people as users."""
    history: list[ChatMessage] = []
    for message in slack_messages[-HISTORY_MESSAGES:]:
        if message.get("ts") == exclude_ts or not message.get("text"):
            continue
        text = _without_mentions(str(message["text"]), bot_user_id)
        if message.get("bot_id") or message.get("user") == bot_user_id:
            history.append({"role": "assistant", "content": text})
        else:
            history.append({"role": "user", "content": f"<@{message.get('user')}>: {text}"})
    while sum(len(str(m["content"])) for m in history) > HISTORY_CHARS and len(history) > 1:
        history.pop(0)
    return history
