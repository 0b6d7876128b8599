"""Messages as the fake stores them, the frozen snapshots tests read, and the checks
Slack applies to message arguments (`text`, `blocks`, `metadata`, required ids).

`Refused` is how a method says Slack would answer HTTP 200 with `ok: false`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from bot.views import block_limits as limits

if TYPE_CHECKING:
    from tests.fakes.slack_workspace import Json

# Slack's documented limits (bot/views/block_limits.py): text is truncated, blocks that break
# Block Kit's limits (too many, a section too long, a button label too long...) are refused.
MAX_TEXT = limits.MESSAGE_TEXT
MAX_MESSAGE_BLOCKS = limits.MESSAGE_BLOCKS
MAX_MARKDOWN = limits.MARKDOWN_TEXT
"""A `markdown` block's text, at most (more is `invalid_blocks`)."""
MAX_BLOCKS_TEXT = 12_000
"""All the text a message's blocks carry (texts and titles), at most: Slack answers
`msg_blocks_too_long` around here (slackapi/bolt-js#2509, #2867)."""


class Refused(Exception):
    """Slack's answer is HTTP 200 with `{"ok": false, "error": error}`."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class StreamState(StrEnum):
    """Where a `chat.startStream` message is; plain messages have none."""

    STREAMING = "streaming"
    STOPPED = "stopped"
    # Slack's native stop button (agent sessions) ended it, not the app.
    STOPPED_BY_USER = "stopped_by_user"
    # Slack ended it: streams live about 5 minutes (`SlackState.stream_ttl_s`).
    EXPIRED = "expired"


@dataclass(frozen=True)
class Revision:
    """One version of a message: the post, and then each change to it."""

    method: str
    text: str
    blocks: list[Json] | None
    at: float


@dataclass(frozen=True)
class Message:
    """A snapshot of a stored message. `history[0]` is the post; `updates` the rest."""

    channel: str
    ts: str
    thread_ts: str | None
    user: str
    is_bot: bool
    text: str
    blocks: list[Json] | None
    reactions: dict[str, tuple[str, ...]]
    history: tuple[Revision, ...]
    chunks: tuple[Json, ...]
    stream: StreamState | None
    deleted: bool
    metadata: Json | None = None
    """Message metadata (`event_type`, `event_payload`), as the app attached it."""

    @property
    def updates(self) -> tuple[Revision, ...]:
        return self.history[1:]


@dataclass(frozen=True)
class Ephemeral:
    """A `chat.postEphemeral` message: seen by `user` only, never stored in the channel."""

    channel: str
    user: str
    text: str
    blocks: list[Json] | None
    thread_ts: str | None
    message_ts: str
    at: float


@dataclass
class StoredMessage:
    channel: str
    ts: str
    user: str
    is_bot: bool
    text: str
    blocks: list[Json] | None
    thread_ts: str | None
    history: list[Revision] = field(default_factory=list)
    reactions: dict[str, list[str]] = field(default_factory=dict)
    chunks: list[Json] = field(default_factory=list)
    stream: StreamState | None = None
    stream_started: float | None = None
    """`time.monotonic()` of its `chat.startStream`."""
    deleted: bool = False
    metadata: Json | None = None
    app: Json | None = None
    """Another app's post: its fields as Slack gives them (`bot_id`, `username`...)."""

    def revise(self, method: str, text: str, blocks: list[Json] | None) -> None:
        self.text, self.blocks = text, blocks
        self.history.append(Revision(method, text, copy.deepcopy(blocks), time.monotonic()))

    def snapshot(self) -> Message:
        return Message(
            channel=self.channel,
            ts=self.ts,
            thread_ts=self.thread_ts,
            user=self.user,
            is_bot=self.is_bot,
            text=self.text,
            blocks=copy.deepcopy(self.blocks),
            reactions={name: tuple(users) for name, users in self.reactions.items()},
            history=tuple(self.history),
            chunks=tuple(copy.deepcopy(self.chunks)),
            stream=self.stream,
            deleted=self.deleted,
            metadata=copy.deepcopy(self.metadata),
        )


def required_arg(args: Json, key: str, error: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise Refused(error)
    return value


def optional_arg(args: Json, key: str) -> str | None:
    value = args.get(key)
    return value if isinstance(value, str) and value else None


def message_text(args: Json) -> str:
    # Slack truncates long text rather than refusing it.
    return str(args.get("text") or "")[:MAX_TEXT]


def message_blocks(args: Json) -> list[Json] | None:
    blocks: Any = args.get("blocks")
    if blocks is None:
        return None
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise Refused("invalid_blocks_format")
    if limits.problems(blocks, max_blocks=MAX_MESSAGE_BLOCKS):
        raise Refused("invalid_blocks")
    markdown = [str(b.get("text", "")) for b in blocks if b.get("type") == "markdown"]
    if any(len(text) > MAX_MARKDOWN for text in markdown):
        raise Refused("invalid_blocks")
    if sum(len(text) for text in _block_texts(blocks)) > MAX_BLOCKS_TEXT:
        raise Refused("msg_blocks_too_long")
    return copy.deepcopy(blocks)


def _block_texts(node: object) -> list[str]:
    """Every text and title string in blocks, however deep."""
    if isinstance(node, list):
        return [text for item in node for text in _block_texts(item)]
    if not isinstance(node, dict):
        return []
    found = [v for k, v in node.items() if k in ("text", "title") and isinstance(v, str)]
    return found + [text for v in node.values() for text in _block_texts(v)]


def message_metadata(args: Json) -> Json | None:
    """The `metadata` argument: an object with a string `event_type` and an object
    `event_payload` (Slack's documented shape), or absent."""
    metadata: Any = args.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise Refused("invalid_metadata_format")
    event_type, payload = metadata.get("event_type"), metadata.get("event_payload")
    if not isinstance(event_type, str) or not event_type or not isinstance(payload, dict):
        raise Refused("invalid_metadata_schema")
    return {"event_type": event_type, "event_payload": copy.deepcopy(payload)}


def is_markdown_chunk(chunk: object) -> bool:
    return isinstance(chunk, dict) and chunk.get("type") == "markdown_text"
