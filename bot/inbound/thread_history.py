"""A Slack thread as the chat history a run starts from (docs/architecture.md, The path
of a mention): this app's own posts as the assistant's turns, people's messages as user
turns ("<@U…>: text"), other apps' and webhooks' posts as user turns labelled with the
app's name ("[app: name]: text", never the agent's own words: only
:meth:`bot.slack_api.identity.AppIdentity.wrote` makes a post ours), and the messages of people
the trust gate would refuse (another organisation, guests:
:meth:`bot.access.trust.TrustGate.untrusted`) as user turns labelled untrusted
("[untrusted, from another organisation: <@U…>]: text"), never as a coworker's words; at
most ``HISTORY_MESSAGES`` messages and ``HISTORY_CHARS`` characters, newest last.

Slack gives a thread oldest first, a page at a time, so the newest messages are on its
last page: :func:`read_replies` follows the cursor to the end (at most ``MAX_PAGES``
pages) and keeps only the newest it was asked for. ``slack_read_thread``
(:mod:`bot.runs.tools`) reads the thread the same way.

The message that asked for the run is its task, not its history, and is left out: by its
``ts`` when the caller has it (the mention being handled), else as the requester's latest
message saying the task (a run taken from the queue after its accepting worker went
away, which had not read the thread yet).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agent_core import StorageError
from bot.access.trust import Distrust
from bot.errors import SlackError
from bot.inbound.person_messages import from_a_person
from bot.slack_api.history_allowance import Grant

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agent_core import ChatMessage, Checkpoint, RunRecord, ThreadKey
    from bot.access.trust import TrustGate
    from bot.slack_api.history_allowance import HistoryAllowance
    from bot.slack_api.identity import AppIdentity
    from bot.slack_api.rate_budget import SlackRateBudget
    from bot.slack_api.surface import SlackSurface

__all__ = [
    "HISTORY_CHARS",
    "HISTORY_MESSAGES",
    "MAX_PAGES",
    "PAGE_SIZE",
    "Replies",
    "ThreadRead",
    "history_from",
    "read_replies",
    "read_thread",
    "stored_history",
    "task_of",
]

log = structlog.get_logger("bot.inbound.thread_history")

HISTORY_MESSAGES = 50
HISTORY_CHARS = 20_000
PAGE_SIZE = 200
"""Replies asked for per ``conversations.replies`` call (Slack recommends at most 200)."""
MAX_PAGES = 10
"""A thread is read up to this many pages (2,000 replies); a longer one is read that far
and the reader is told (:attr:`Replies.complete`)."""
_APP_NAME_CHARS = 80


def task_of(text: str, bot_user_id: str) -> str:
    """The task a message asks for: its text without its mentions of the app ("Hello"
    when that leaves nothing)."""
    return _without_mentions(text, bot_user_id) or "Hello"


def _without_mentions(text: str, bot_user_id: str) -> str:
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()


@dataclass(frozen=True, slots=True)
class Replies:
    """The newest messages of a thread, oldest first, as ``conversations.replies`` gives
    them."""

    newest: list[dict[str, Any]]
    read: int
    """How many messages (of those wanted) were read to find them."""
    complete: bool
    """The thread was read to its end (else it is longer than ``MAX_PAGES`` pages, or
    than Slack's allowance let the app read)."""
    withheld: bool = False
    """Slack's allowance for reading threads was spent (``SLACK_HISTORY_LIMIT``):
    nothing was read."""


async def read_replies(
    budget: SlackRateBudget,
    thread: ThreadKey,
    *,
    keep: int,
    wanted: Callable[[dict[str, Any]], bool] = lambda message: True,
    with_metadata: bool = False,
    allowance: HistoryAllowance | None = None,
) -> Replies:
    """The newest ``keep`` messages of ``thread`` that are ``wanted``, read page by page
    to the thread's end, as far as ``allowance`` lets (never waiting for it). Raises
    :class:`~bot.errors.SlackError` if Slack will not give a page."""
    grant = allowance.take(MAX_PAGES) if allowance is not None else Grant(MAX_PAGES, None)
    if grant.pages == 0:
        log.info("thread.read_withheld", thread=str(thread), reason="SLACK_HISTORY_LIMIT")
        return Replies([], 0, complete=False, withheld=True)
    newest: deque[dict[str, Any]] = deque(maxlen=keep)
    last: tuple[int, str] | None = None
    read, cursor = 0, ""
    for _ in range(grant.pages):
        page = await budget.call(
            "conversations.replies",
            channel=thread.channel,
            ts=thread.thread_ts,
            limit=grant.page_size or PAGE_SIZE,
            **({"include_all_metadata": True} if with_metadata else {}),
            **({"cursor": cursor} if cursor else {}),
        )
        for message in page.get("messages", []):
            at = _ts_key(message.get("ts"))
            if last is not None and at <= last:
                continue  # the parent again: Slack may put it atop every page
            last = at
            if wanted(message):
                read += 1
                newest.append(message)
        cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
        if not cursor:
            return Replies(list(newest), read, complete=True)
    log.warning("thread.read_in_part", thread=str(thread), pages=grant.pages)
    return Replies(list(newest), read, complete=False)


def _ts_key(ts: object) -> tuple[int, str]:
    """Slack timestamps compare as decimals ("<seconds>.<micros>"), not as strings."""
    seconds, _, micros = str(ts).partition(".")
    return (int(seconds) if seconds.isdigit() else 0, micros.ljust(6, "0"))


@dataclass(frozen=True, slots=True)
class ThreadRead:
    """A thread as a run starts from it."""

    history: list[ChatMessage]
    people: frozenset[str] = frozenset()
    """Who wrote the messages read (people, not apps): the thread's participants."""
    withheld: bool = False
    """Slack's allowance was spent: nothing was read (:attr:`Replies.withheld`)."""


async def read_thread(
    surface: SlackSurface,
    thread: ThreadKey,
    me: AppIdentity,
    trust: TrustGate,
    *,
    requester: str,
    task: str,
    asked_ts: str | None = None,
) -> ThreadRead:
    """The thread's history for a run asked for by ``requester`` with ``task`` (in the
    message ``asked_ts``, if known). Empty if Slack cannot give it: the run goes on
    without it."""
    try:
        replies = await read_replies(
            surface.budget,
            thread,
            keep=HISTORY_MESSAGES + 1,  # and the asking message, left out below
            wanted=lambda message: bool(message.get("text")),
            allowance=surface.history,
        )
    except SlackError as exc:
        log.warning("thread.history_unavailable", error=exc.error)
        return ThreadRead([])
    if replies.withheld:
        return ThreadRead([], withheld=True)
    written = replies.newest
    if asked_ts is None:
        asked_ts = _asking_ts(written, me.user_id, requester, task)
    people = {str(m["user"]) for m in written if from_a_person(m, me.user_id)}
    untrusted = await trust.untrusted(written, workspace=thread.team)
    history = history_from(written, me, exclude_ts=asked_ts or "", untrusted=untrusted)
    return ThreadRead(history, frozenset(people))


class StoredThreads(Protocol):
    """Where what the app kept of a thread is read (the store)."""

    async def find_runs(
        self, *, thread: ThreadKey | None = None, top_level: bool | None = None, limit: int = 100
    ) -> list[RunRecord]: ...

    async def latest_checkpoint(self, run_id: str) -> Checkpoint | None: ...


async def stored_history(
    store: StoredThreads, thread: ThreadKey, *, besides: str
) -> list[ChatMessage]:
    """What the app kept of ``thread`` without asking Slack: the conversation of the
    thread's latest run but ``besides`` (the one starting: its history, its task and its
    answers), as people's and the app's turns only (no tool calls or results), at most
    ``HISTORY_MESSAGES`` and ``HISTORY_CHARS``, newest last. Empty if there was no run
    (or the database fails)."""
    try:
        runs = await store.find_runs(thread=thread, top_level=True, limit=1_000)
        earlier = [r for r in runs if r.id != besides]
        checkpoint = await store.latest_checkpoint(earlier[-1].id) if earlier else None
    except StorageError:
        log.exception("thread.stored_history_unreadable", thread=str(thread))
        return []
    if checkpoint is None:
        return []
    history: list[ChatMessage] = [
        {"role": m["role"], "content": m["content"]}
        for m in checkpoint.messages
        if m.get("role") in ("user", "assistant")
        and isinstance(m.get("content"), str)
        and m.get("content")
        and not m.get("tool_calls")
    ]
    history = history[-HISTORY_MESSAGES:]
    while sum(len(str(m["content"])) for m in history) > HISTORY_CHARS and len(history) > 1:
        history.pop(0)
    return history


def _asking_ts(
    written: list[dict[str, Any]], bot_user_id: str, requester: str, task: str
) -> str | None:
    for message in reversed(written):
        said = task_of(str(message.get("text") or ""), bot_user_id)
        if message.get("user") == requester and said == task:
            return str(message.get("ts"))
    return None


def history_from(
    slack_messages: list[dict[str, Any]],
    me: AppIdentity,
    *,
    exclude_ts: str,
    untrusted: Mapping[str, Distrust],
) -> list[ChatMessage]:
    """The thread as a chat history: our posts as the assistant, everyone else's (people,
    other apps) as users, each labelled with who wrote it; ``untrusted``'s people
    (:meth:`~bot.access.trust.TrustGate.untrusted`) labelled untrusted."""
    history: list[ChatMessage] = []
    for message in slack_messages[-HISTORY_MESSAGES - 1 :]:
        if message.get("ts") == exclude_ts or not message.get("text"):
            continue
        text = _without_mentions(str(message["text"]), me.user_id)
        if me.wrote(message):
            history.append({"role": "assistant", "content": text})
        else:
            author = _author(message, untrusted)
            history.append({"role": "user", "content": f"{author}: {text}"})
    history = history[-HISTORY_MESSAGES:]
    while sum(len(str(m["content"])) for m in history) > HISTORY_CHARS and len(history) > 1:
        history.pop(0)
    return history


_UNTRUSTED = {
    Distrust.EXTERNAL: "from another organisation",
    Distrust.GUEST: "a guest",
    Distrust.UNCHECKED: "not verified",
}


def _author(message: dict[str, Any], untrusted: Mapping[str, Distrust]) -> str:
    """Who wrote a message that is not ours: ``<@U…>`` for a person, ``[untrusted, why:
    <@U…>]`` for a person the trust gate would refuse, ``[app: name]`` for another app, a
    webhook or a workflow (by the name it posts under)."""
    if not (message.get("bot_id") or message.get("subtype") == "bot_message"):
        user = str(message.get("user"))
        why = untrusted.get(user)
        return f"<@{user}>" if why is None else f"[untrusted, {_UNTRUSTED[why]}: <@{user}>]"
    profile = message.get("bot_profile")
    name = (profile.get("name") if isinstance(profile, dict) else None) or message.get("username")
    shown = " ".join(str(name or message.get("bot_id") or "unnamed").split())
    return f"[app: {shown[:_APP_NAME_CHARS]}]"
