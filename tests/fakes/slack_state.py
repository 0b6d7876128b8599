"""The fake workspace's memory and the Web API methods that read or change it.

`SlackState.call(method, args)` answers as Slack would with HTTP 200: it returns the
`ok: true` body or raises `Refused(error)` for an `ok: false` one. It knows nothing of
HTTP, tokens or faults (that is `slack_api.py`). Tests read state through frozen
snapshots (`Message`, `Ephemeral`), so they cannot change the fake by accident.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import time
from typing import TYPE_CHECKING

from bot.views import block_limits as limits
from bot.views.blocks import units
from tests.fakes.slack_messages import (
    Ephemeral,
    Message,
    Refused,
    StoredMessage,
    StreamState,
    is_markdown_chunk,
    message_blocks,
    message_metadata,
    message_text,
    optional_arg,
    required_arg,
)
from tests.fakes.slack_workspace import DEFAULT_USER, TS_CLOCK, Json, Workspace, next_ts, ts_key

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_STREAM_MARKDOWN = 12_000
MAX_PAGE = 1000
"""conversations.* give at most this many messages a page, whatever `limit` asks."""
MAX_VIEW_BYTES = limits.VIEW_BYTES
MAX_VIEW_BLOCKS = limits.VIEW_BLOCKS
MODAL_TITLE = 24
"""A modal's title and its buttons' labels (Slack's `views.open` reference)."""
TRIGGER_LIFE_S = 3
SESSION_STATUSES = frozenset({"processing", "active", "suspended", "closed"})
STREAM_TTL_S = 300.0
"""Slack ends a stream about 5 minutes after it starts."""
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
TASK_DISPLAY_MODES = frozenset({"timeline", "plan"})


class SlackState:
    """Channels, threads, reactions, streams, views and statuses of one fake workspace."""

    def __init__(self, workspace: Workspace, *, stream_ttl_s: float = STREAM_TTL_S) -> None:
        self.workspace = workspace
        self.stream_ttl_s = stream_ttl_s
        """How long a stream takes appends; later, `message_not_in_streaming_state`."""
        self._messages: dict[str, dict[str, StoredMessage]] = {}
        self._ephemerals: dict[str, list[Ephemeral]] = {}
        self._views: dict[str, Json] = {}
        self._modals: list[Json] = []
        self.home_tab_enabled = True
        """False: the app's Home tab is off (manifest ``features.app_home``), and
        `views.publish` of a home view answers `not_enabled`, as Slack does."""
        self._people: dict[str, Json] = {}
        self._private_channels: set[str] = set()
        self._session_status: dict[tuple[str, str], str] = {}
        self._assistant_status: dict[tuple[str, str], str] = {}
        self._handlers: dict[str, Callable[[Json], Json]] = {
            "auth.test": self._auth_test,
            "users.info": self._users_info,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.delete": self._delete,
            "chat.postEphemeral": self._post_ephemeral,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "conversations.replies": self._replies,
            "conversations.history": self._history,
            "conversations.info": self._conversation_info,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "agents.sessions.setStatus": self._session_set_status,
            "assistant.threads.setStatus": self._assistant_set_status,
            "views.publish": self._views_publish,
            "views.open": self._views_open,
        }

    def handles(self, method: str) -> bool:
        return method in self._handlers

    def call(self, method: str, args: Json) -> Json:
        """Apply one Web API call; raises `Refused` for an `ok: false` answer."""
        return {"ok": True, **self._handlers[method](args)}

    # -- people, for tests -------------------------------------------------------------

    def add_person(
        self,
        user_id: str,
        *,
        team_id: str | None = None,
        restricted: bool = False,
        ultra_restricted: bool = False,
        enterprise_id: str | None = None,
        stranger: bool | None = None,
        admin: bool = False,
        owner: bool = False,
    ) -> None:
        """Someone `users.info` describes: of another team (`team_id`: Slack Connect, with
        `is_stranger` unless `stranger` says otherwise), or a guest (`restricted`:
        multi-channel, `ultra_restricted`: single-channel); on Enterprise Grid, of the org
        `enterprise_id`; a workspace `admin` or `owner`. Everyone else is a full member
        of this workspace."""
        if stranger is None:
            stranger = team_id not in (None, self.workspace.team_id) and enterprise_id is None
        person: Json = {
            "team_id": team_id or self.workspace.team_id,
            "is_restricted": restricted,
            "is_ultra_restricted": ultra_restricted,
            "is_stranger": stranger,
            "is_admin": admin,
            "is_owner": owner,
        }
        if enterprise_id is not None:
            person["enterprise_user"] = {"id": user_id, "enterprise_id": enterprise_id}
        self._people[user_id] = person

    def make_private(self, channel: str) -> None:
        """`channel` (a `C...` id) is a private channel; others are public, except DMs
        (`D...`) and group DMs (`G...`)."""
        self._private_channels.add(channel)

    # -- reading, for tests ------------------------------------------------------------

    def seed_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = DEFAULT_USER,
        ts: str | None = None,
        thread_ts: str | None = None,
        blocks: list[Json] | None = None,
        metadata: Json | None = None,
        app: Json | None = None,
    ) -> str:
        """Store a message that arrived before the test (a person's, or with `user` the
        bot's and `metadata`, one the app posted earlier; with `app`, another app's or a
        webhook's: its fields, e.g. `bot_id`, `username`, `subtype`); returns its ts."""
        if ts is None:
            ts = next_ts()
        else:
            TS_CLOCK.observe(ts)
        stored = self._store(channel, ts, text, blocks, thread_ts, user=user, method="seed")
        stored.metadata = message_metadata({"metadata": metadata})
        stored.app = copy.deepcopy(app)
        return ts

    def message(self, channel: str, ts: str) -> Message:
        """The message at `ts` (deleted ones too); `KeyError` if it never existed."""
        return self._messages[channel][ts].snapshot()

    def messages(self, channel: str) -> list[Message]:
        """Every live message in `channel` (thread replies included), in ts order."""
        live = [stored for stored in self._messages.get(channel, {}).values() if not stored.deleted]
        return [stored.snapshot() for stored in sorted(live, key=lambda s: ts_key(s.ts))]

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The thread's live messages, parent first, in ts order."""
        return [stored.snapshot() for stored in self._thread(channel, thread_ts)]

    def ephemerals(self, channel: str) -> list[Ephemeral]:
        return list(self._ephemerals.get(channel, []))

    def home_view(self, user_id: str) -> Json | None:
        """The last view `views.publish` showed on `user_id`'s App Home."""
        view = self._views.get(user_id)
        return copy.deepcopy(view) if view is not None else None

    def modals(self) -> list[Json]:
        """Every view `views.open` opened, in order."""
        return copy.deepcopy(self._modals)

    def session_status(self, channel: str, thread_ts: str) -> str | None:
        return self._session_status.get((channel, thread_ts))

    def assistant_status(self, channel: str, thread_ts: str) -> str | None:
        return self._assistant_status.get((channel, thread_ts))

    def stop_streams_by_user(self, channel: str, thread_ts: str) -> list[str]:
        """Press Slack's native stop button: end the thread's live streams.

        Returns their timestamps, which is what `agent_session_stopped` carries in
        `streaming_message_ts`. Like Slack, it leaves the session status alone.
        """
        stopped = []
        for stored in self._thread(channel, thread_ts):
            if stored.stream is StreamState.STREAMING:
                stored.stream = StreamState.STOPPED_BY_USER
                stored.revise("native stop", stored.text, stored.blocks)
                stopped.append(stored.ts)
        return stopped

    # -- internals ---------------------------------------------------------------------

    def _store(
        self,
        channel: str,
        ts: str,
        text: str,
        blocks: list[Json] | None,
        thread_ts: str | None,
        *,
        user: str,
        method: str,
    ) -> StoredMessage:
        stored = StoredMessage(
            channel=channel,
            ts=ts,
            user=user,
            is_bot=user == self.workspace.bot_user_id,
            text="",
            blocks=None,
            thread_ts=thread_ts if thread_ts != ts else None,
        )
        stored.revise(method, text, blocks)
        self._messages.setdefault(channel, {})[ts] = stored
        return stored

    def _find(self, args: Json, ts_key_name: str = "ts") -> StoredMessage:
        channel = required_arg(args, "channel", "channel_not_found")
        ts = required_arg(args, ts_key_name, "message_not_found")
        stored = self._messages.get(channel, {}).get(ts)
        if stored is None or stored.deleted:
            raise Refused("message_not_found")
        return stored

    def _thread(self, channel: str, thread_ts: str) -> list[StoredMessage]:
        members = [
            stored
            for stored in self._messages.get(channel, {}).values()
            if not stored.deleted and thread_ts in (stored.ts, stored.thread_ts)
        ]
        return sorted(members, key=lambda stored: ts_key(stored.ts))

    def _to_api(self, stored: StoredMessage, *, with_metadata: bool = False) -> Json:
        """A message as Slack's API returns it (conversations.*, chat.* answers).

        Its metadata only when asked for (`include_all_metadata`), as Slack does.
        """
        body: Json = {"type": "message", "ts": stored.ts, "text": stored.text}
        body["team"] = self.workspace.team_id
        body["user"] = stored.user
        if stored.is_bot:
            body |= {"bot_id": self.workspace.bot_id, "app_id": self.workspace.app_id}
        if stored.app is not None:
            body |= copy.deepcopy(stored.app)
        if stored.blocks:
            body["blocks"] = copy.deepcopy(stored.blocks)
        if stored.thread_ts is not None:
            body["thread_ts"] = stored.thread_ts
            parent = self._messages[stored.channel].get(stored.thread_ts)
            if parent is not None:
                body["parent_user_id"] = parent.user
        else:
            replies = len(self._thread(stored.channel, stored.ts)) - 1
            if replies > 0:
                body |= {"thread_ts": stored.ts, "reply_count": replies}
        if stored.reactions:
            body["reactions"] = [
                {"name": name, "users": list(users), "count": len(users)}
                for name, users in stored.reactions.items()
            ]
        if with_metadata and stored.metadata is not None:
            body["metadata"] = copy.deepcopy(stored.metadata)
        return body

    # -- method handlers ---------------------------------------------------------------

    def _auth_test(self, args: Json) -> Json:
        ws = self.workspace
        return {
            "url": f"https://{ws.team_domain}.slack.com/",
            "team": ws.team_name,
            "user": ws.bot_name,
            "team_id": ws.team_id,
            "user_id": ws.bot_user_id,
            "bot_id": ws.bot_id,
            "app_id": ws.app_id,
            "enterprise_id": ws.enterprise_id,
            "is_enterprise_install": ws.enterprise_install,
        }

    def _users_info(self, args: Json) -> Json:
        user_id = required_arg(args, "user", "user_not_found")
        is_bot = user_id == self.workspace.bot_user_id
        name = self.workspace.bot_name if is_bot else user_id.lower()
        profile = {"real_name": name, "display_name": name}
        user: Json = {
            "id": user_id,
            "team_id": self.workspace.team_id,
            "name": name,
            "real_name": name,
            "deleted": False,
            "is_bot": is_bot,
            "is_admin": False,
            "is_owner": False,
            "is_restricted": False,
            "is_ultra_restricted": False,
            "tz": "Etc/UTC",
            "profile": profile,
        }
        if self.workspace.enterprise_id is not None:
            user["enterprise_user"] = {"id": user_id, "enterprise_id": self.workspace.enterprise_id}
        return {"user": user | self._people.get(user_id, {})}

    def _conversation_info(self, args: Json) -> Json:
        channel = required_arg(args, "channel", "channel_not_found")
        im, mpim = channel.startswith("D"), channel.startswith("G")
        private = mpim or channel in self._private_channels
        return {
            "channel": {
                "id": channel,
                "is_channel": not (im or mpim),
                "is_group": False,
                "is_im": im,
                "is_mpim": mpim,
                "is_private": private,
                "is_ext_shared": False,
            }
        }

    def _post_message(self, args: Json) -> Json:
        channel = required_arg(args, "channel", "channel_not_found")
        text, blocks = message_text(args), message_blocks(args)
        if not text and not blocks:
            raise Refused("no_text")
        thread_ts = optional_arg(args, "thread_ts")
        metadata = message_metadata(args)
        stored = self._store(
            channel,
            next_ts(),
            text,
            blocks,
            thread_ts,
            user=self.workspace.bot_user_id,
            method="chat.postMessage",
        )
        stored.metadata = metadata
        return {"channel": channel, "ts": stored.ts, "message": self._to_api(stored)}

    def _update(self, args: Json) -> Json:
        stored = self._find(args)
        # Like Slack: a field left out keeps its value; an empty blocks list removes them.
        text = message_text(args) if "text" in args else stored.text
        blocks = (message_blocks(args) or None) if "blocks" in args else stored.blocks
        if "metadata" in args:  # left out, the message keeps the metadata it has
            stored.metadata = message_metadata(args)
        stored.revise("chat.update", text, blocks)
        return {
            "channel": stored.channel,
            "ts": stored.ts,
            "text": stored.text,
            "message": self._to_api(stored),
        }

    def respond(self, channel: str, ts: str, body: Json) -> None:
        """A post to the `response_url` of a click on the message at `channel`/`ts`:
        `replace_original` gives it the post's text and blocks (its metadata stays),
        `delete_original` deletes it; any other post is a new message, only recorded."""
        if body.get("delete_original") is True:
            self._find({"channel": channel, "ts": ts}).deleted = True
        elif body.get("replace_original") is True:
            stored = self._find({"channel": channel, "ts": ts})
            text = message_text(body) if "text" in body else stored.text
            blocks = (message_blocks(body) or None) if "blocks" in body else stored.blocks
            stored.revise("response_url", text, blocks)

    def _delete(self, args: Json) -> Json:
        stored = self._find(args)
        stored.deleted = True
        return {"channel": stored.channel, "ts": stored.ts}

    def _post_ephemeral(self, args: Json) -> Json:
        channel = required_arg(args, "channel", "channel_not_found")
        user = required_arg(args, "user", "user_not_in_channel")
        text, blocks = message_text(args), message_blocks(args)
        if not text and not blocks:
            raise Refused("no_text")
        message_ts = next_ts()
        ephemeral = Ephemeral(
            channel,
            user,
            text,
            blocks,
            optional_arg(args, "thread_ts"),
            message_ts,
            time.monotonic(),
        )
        self._ephemerals.setdefault(channel, []).append(ephemeral)
        return {"message_ts": message_ts}

    def _reactions_add(self, args: Json) -> Json:
        stored = self._find(args, "timestamp")
        users = stored.reactions.setdefault(required_arg(args, "name", "invalid_name"), [])
        if self.workspace.bot_user_id in users:
            raise Refused("already_reacted")
        users.append(self.workspace.bot_user_id)
        return {}

    def _reactions_remove(self, args: Json) -> Json:
        stored = self._find(args, "timestamp")
        name = required_arg(args, "name", "invalid_name")
        users = stored.reactions.get(name, [])
        if self.workspace.bot_user_id not in users:
            raise Refused("no_reaction")
        users.remove(self.workspace.bot_user_id)
        if not users:
            del stored.reactions[name]
        return {}

    def _replies(self, args: Json) -> Json:
        channel = required_arg(args, "channel", "channel_not_found")
        ts = required_arg(args, "ts", "thread_not_found")
        anchor = self._messages.get(channel, {}).get(ts)
        if anchor is None or anchor.deleted:
            raise Refused("thread_not_found")
        thread = self._thread(channel, anchor.thread_ts or anchor.ts)
        return self._page(thread, args)

    def _history(self, args: Json) -> Json:
        """A channel's messages, newest first; thread replies only as their parent."""
        channel = required_arg(args, "channel", "channel_not_found")
        top = [
            stored
            for stored in self._messages.get(channel, {}).values()
            if not stored.deleted and stored.thread_ts is None
        ]
        return self._page(sorted(top, key=lambda stored: ts_key(stored.ts), reverse=True), args)

    def _page(self, found: list[StoredMessage], args: Json) -> Json:
        """One page of a conversations.* answer (`cursor`, `limit`, `include_all_metadata`).

        Like Slack's, the cursor is opaque (base64 of `next_ts:<ts>`, the next page's
        first message), the last page's `next_cursor` is "", and `limit` is capped."""
        start = _cursor_start(found, str(args.get("cursor") or ""))
        limit = min(int(args.get("limit") or MAX_PAGE), MAX_PAGE)
        # slack_sdk sends booleans as "1"/"0" in query strings.
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        page = found[start : start + limit]
        more = start + limit < len(found)
        cursor = base64.b64encode(f"next_ts:{found[start + limit].ts}".encode()) if more else b""
        return {
            "messages": [self._to_api(stored, with_metadata=with_metadata) for stored in page],
            "has_more": more,
            "response_metadata": {"next_cursor": cursor.decode()},
        }

    def _start_stream(self, args: Json) -> Json:
        channel = required_arg(args, "channel", "channel_not_found")
        thread_ts = required_arg(args, "thread_ts", "invalid_arguments")
        if not channel.startswith("D"):
            # Streams outside DMs must name who they are for (Slack's docs).
            for key in ("recipient_team_id", "recipient_user_id"):
                required_arg(args, key, f"missing_{key}")
        mode = args.get("task_display_mode", "timeline")
        if mode not in TASK_DISPLAY_MODES:
            raise Refused("invalid_arguments")
        text, chunks = _stream_delta(args)
        stored = self._store(
            channel,
            next_ts(),
            text,
            None,
            thread_ts,
            user=self.workspace.bot_user_id,
            method="chat.startStream",
        )
        stored.stream = StreamState.STREAMING
        stored.stream_started = time.monotonic()
        stored.chunks.extend(chunks)
        return {"channel": channel, "ts": stored.ts}

    def _append_stream(self, args: Json) -> Json:
        stored = self._streaming(args)
        text, chunks = _stream_delta(args)
        stored.chunks.extend(chunks)
        stored.revise("chat.appendStream", stored.text + text, stored.blocks)
        return {"channel": stored.channel, "ts": stored.ts}

    def _stop_stream(self, args: Json) -> Json:
        stored = self._streaming(args)
        text, chunks = _stream_delta(args)
        blocks = message_blocks(args) if "blocks" in args else stored.blocks
        if "metadata" in args:
            stored.metadata = message_metadata(args)
        stored.stream = StreamState.STOPPED
        stored.chunks.extend(chunks)
        stored.revise("chat.stopStream", stored.text + text, blocks)
        return {"channel": stored.channel, "ts": stored.ts, "message": self._to_api(stored)}

    def _streaming(self, args: Json) -> StoredMessage:
        stored = self._find(args)
        if stored.stream is StreamState.STOPPED_BY_USER:
            raise Refused("stopped_by_user")
        started = stored.stream_started
        if stored.stream is StreamState.STREAMING and started is not None:
            if time.monotonic() - started >= self.stream_ttl_s:
                stored.stream = StreamState.EXPIRED  # the message stays as it was
        if stored.stream is not StreamState.STREAMING:
            raise Refused("message_not_in_streaming_state")
        return stored

    def _session_set_status(self, args: Json) -> Json:
        # threadpilot only uses thread sessions, which need both keys; a `channel`
        # (instead of `channel_id`) is a bug the fake should surface.
        channel = required_arg(args, "channel_id", "invalid_arguments")
        thread_ts = required_arg(args, "thread_ts", "invalid_arguments")
        status = required_arg(args, "status", "invalid_arguments")
        if status not in SESSION_STATUSES:
            raise Refused("invalid_arguments")
        self._session_status[(channel, thread_ts)] = status
        return {"status": status}

    def _assistant_set_status(self, args: Json) -> Json:
        channel = required_arg(args, "channel_id", "channel_not_found")
        thread_ts = required_arg(args, "thread_ts", "invalid_arguments")
        self._assistant_status[(channel, thread_ts)] = str(args.get("status", ""))
        return {}

    def _views_publish(self, args: Json) -> Json:
        """Slack's documented answers: `invalid_arguments` for a view that is not a home
        view with at most 100 blocks, `invalid_blocks` for blocks that break Block Kit's
        limits, `view_too_large` above 250 kB, `not_enabled` when the Home tab is off,
        `hash_conflict` for a stale `hash`."""
        user_id = required_arg(args, "user_id", "invalid_arguments")
        view = args.get("view")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise Refused("invalid_arguments")
        blocks = view.get("blocks")
        if not isinstance(blocks, list) or len(blocks) > MAX_VIEW_BLOCKS:
            raise Refused("invalid_arguments")
        if limits.problems(blocks, max_blocks=MAX_VIEW_BLOCKS):
            raise Refused("invalid_blocks")
        if len(json.dumps(view).encode()) > MAX_VIEW_BYTES:
            raise Refused("view_too_large")
        if not self.home_tab_enabled:
            raise Refused("not_enabled")
        previous = self._views.get(user_id)
        if args.get("hash") and previous is not None and args["hash"] != previous["hash"]:
            raise Refused("hash_conflict")
        stored = {**copy.deepcopy(view), "id": f"V{next_ts().replace('.', '')}"}
        stored["hash"] = stored["id"].lower()
        self._views[user_id] = stored
        return {"view": copy.deepcopy(stored)}

    def _views_open(self, args: Json) -> Json:
        """Slack's documented answers: `invalid_trigger_id` without a trigger, and
        `expired_trigger_id` for one more than 3 s old (tests/fakes/slack_requests.py
        makes a click's trigger from its time, in whole seconds, so 4 s here);
        `invalid_arguments` for a view that is not a modal with a title (and a close
        button, if any) of at most 24 characters and at most 100 blocks;
        `invalid_blocks` and `view_too_large` as for `views.publish`."""
        trigger = required_arg(args, "trigger_id", "invalid_trigger_id")
        made, _, _ = trigger.partition(".")
        if not made.isdigit():
            raise Refused("invalid_trigger_id")
        if time.time() - int(made) > TRIGGER_LIFE_S + 1:
            raise Refused("expired_trigger_id")
        view = args.get("view")
        if not isinstance(view, dict) or view.get("type") != "modal":
            raise Refused("invalid_arguments")
        for key in ("title", "close"):
            text = view.get(key)
            if text is None and key == "close":
                continue
            if not _plain_text(text, MODAL_TITLE):
                raise Refused("invalid_arguments")
        blocks = view.get("blocks")
        if not isinstance(blocks, list) or len(blocks) > MAX_VIEW_BLOCKS:
            raise Refused("invalid_arguments")
        if limits.problems(blocks, max_blocks=MAX_VIEW_BLOCKS):
            raise Refused("invalid_blocks")
        if len(json.dumps(view).encode()) > MAX_VIEW_BYTES:
            raise Refused("view_too_large")
        stored = {**copy.deepcopy(view), "id": f"V{next_ts().replace('.', '')}"}
        self._modals.append(stored)
        return {"view": copy.deepcopy(stored)}


def _plain_text(value: object, most: int) -> bool:
    """A `plain_text` object of 1 to `most` characters."""
    if not isinstance(value, dict) or value.get("type") != "plain_text":
        return False
    text = value.get("text")
    return isinstance(text, str) and 0 < units(text) <= most


def _cursor_start(found: list[StoredMessage], cursor: str) -> int:
    """Where the page a cursor names begins in `found`; `invalid_cursor` if nowhere."""
    if not cursor:
        return 0
    try:
        ts = base64.b64decode(cursor, validate=True).decode().removeprefix("next_ts:")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise Refused("invalid_cursor") from exc
    for index, stored in enumerate(found):
        if stored.ts == ts:
            return index
    raise Refused("invalid_cursor")


def _stream_delta(args: Json) -> tuple[str, list[Json]]:
    """The markdown a stream call adds (`markdown_text` and markdown chunks) and its chunks.

    slack_sdk's `chat_stream()` helper sends `chunks`; direct calls send `markdown_text`.
    Each chunk must have one of the documented shapes (`_check_chunk`).
    """
    chunks = args.get("chunks") or []
    if not isinstance(chunks, list) or not all(isinstance(chunk, dict) for chunk in chunks):
        raise Refused("invalid_chunks")
    for chunk in chunks:
        _check_chunk(chunk)
    pieces = [str(args.get("markdown_text") or "")]
    pieces += [str(chunk.get("text", "")) for chunk in chunks if is_markdown_chunk(chunk)]
    if any(len(piece) > MAX_STREAM_MARKDOWN for piece in pieces):
        raise Refused("msg_too_long")
    return "".join(pieces), copy.deepcopy(chunks)


def _check_chunk(chunk: Json) -> None:
    """Slack's chunk shapes: `markdown_text` (`text`), `task_update` (`id`, `title`,
    `status` of TASK_STATUSES; `details`, `output` text, `sources` a list) and
    `plan_update` (`title`). Anything else is `invalid_chunks`."""
    kind = chunk.get("type")

    def text(key: str, *, required: bool = True) -> None:
        value = chunk.get(key)
        if value is None and not required:
            return
        if not isinstance(value, str) or (required and not value):
            raise Refused("invalid_chunks")

    if kind == "markdown_text":
        text("text")
    elif kind == "plan_update":
        text("title")
    elif kind == "task_update":
        text("id")
        text("title")
        if chunk.get("status") not in TASK_STATUSES:
            raise Refused("invalid_chunks")
        text("details", required=False)
        text("output", required=False)
        if not isinstance(chunk.get("sources", []), list):
            raise Refused("invalid_chunks")
    else:
        raise Refused("invalid_chunks")
