"""The door of ``POST /slack/events``: only what Slack signed, in the shape Slack sends it,
reaches Bolt and the handlers.

Checks, in order, on the raw bytes before anything parses them:

1. **Signature** (401): ``X-Slack-Request-Timestamp`` within five minutes of now and
   ``X-Slack-Signature`` the HMAC-SHA256 of ``v0:<timestamp>:<body>`` with the signing
   secret, over the body's exact bytes. (slack_sdk's ``SignatureVerifier`` computes the
   same thing but decodes the body as UTF-8 first, and raises on anything else.)
   Headers that are missing or not in Slack's format are refused before any hashing.
2. **Encoding** (400): UTF-8; JSON (``application/json``) for Events API envelopes, a
   form with one ``payload=<JSON>`` field for interactivity, as Slack sends them; the
   JSON must be an object. A slash command is a form of its own fields, without
   ``payload`` (``command``, ``text``, ``team_id``, ``user_id``...), each given once.
3. **Shape** (400): the fields the handlers index without looking (``team_id`` and the
   ``event`` object of an event callback with its ``channel``/``user``/``ts``, a click's
   ``user.id`` and ``actions``, a command's ``command``/``team_id``/``user_id``) are there
   and are of the right type.

A refusal is one log line (``slack_request.refused``, no traceback) and changes nothing.
Bolt still verifies the signature itself: the guard is the first check, not the only one.

:func:`on_bolt_error` is the Bolt app's global error handler, for what gets past all this
(a well-formed payload a listener did not expect, a database that failed mid-listener):
one log line naming the error and where it was raised, and no 500.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import structlog
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from agent_core import StorageError
from bot.installs.lookup import UnknownInstallation

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["Refusal", "SlackRequestGuard", "on_bolt_error", "raised_at"]

log = structlog.get_logger("bot.process.http_guard")

MAX_CLOCK_SKEW_S = 5 * 60
"""Slack's own rule: a request more than five minutes old (or ahead) is a replay."""

_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_FORWARDED = ("content-type", "x-slack-request-timestamp", "x-slack-signature")
"""The only headers Bolt gets (plus Slack's retry headers): in particular not Bolt's own
``x-slack-bolt-lazy-*``, which would change how it runs listeners."""
_RETRY_HEADERS = ("x-slack-retry-num", "x-slack-retry-reason")

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
ENVELOPES = frozenset({"event_callback", "url_verification", "app_rate_limited"})
"""The Events API's JSON bodies; everything else Slack posts is a form ``payload``."""

# Per event type the handlers read: fields that must be strings, and those that must be
# strings when present. A person's message also names its ``user`` (below); a bot's
# post or a message subtype (edit, deletion...) may not, and the handlers skip those.
_MESSAGE_FIELDS = ("user", "text", "thread_ts", "subtype", "bot_id", "channel_type")
_EVENT_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "app_mention": (("channel", "ts"), _MESSAGE_FIELDS),
    "message": (("channel", "ts"), _MESSAGE_FIELDS),
    "agent_session_stopped": (("channel", "thread_ts"), ("user",)),
    "app_home_opened": (("user",), ("tab", "channel")),
}
# A slash command's form: the fields the handler reads (Slack sends more; they may be
# added to, so others are let through).
_COMMAND_REQUIRED = ("command", "text", "team_id", "user_id", "channel_id", "response_url")
_FROM_A_PERSON = frozenset({"app_mention", "message"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request does not reach Bolt: the HTTP status and a short reason."""

    status: int
    reason: str


class SlackRequestGuard:
    """Turns a raw HTTP request into a Bolt request, or into a :class:`Refusal`."""

    def __init__(self, signing_secret: str) -> None:
        self._secret = signing_secret.encode()

    def admit(self, body: bytes, headers: Mapping[str, str]) -> AsyncBoltRequest | Refusal:
        """Check ``body`` (the exact bytes received) and ``headers`` (any case)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        refusal = self._signature(body, lowered)
        if refusal is not None:
            return refusal
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return Refusal(400, "the body is not UTF-8")
        content_type = lowered.get("content-type", "").split(";")[0].strip().lower()
        if content_type == FORM and _is_command(text):
            problem = _command_problem(text)
        else:
            payload = _parse(text, content_type)
            if isinstance(payload, Refusal):
                return payload
            problem = _shape_problem(payload, form=content_type == FORM)
        if problem is not None:
            return Refusal(400, problem)
        forwarded: dict[str, str | Sequence[str]] = {
            name: lowered[name] for name in (*_FORWARDED, *_RETRY_HEADERS) if name in lowered
        }
        try:
            # Bolt parses the text again and reads ids out of it: the same text and
            # content type, so it sees the payload checked above.
            return AsyncBoltRequest(body=text, headers=forwarded)
        except Exception as exc:  # anything Bolt's own parsing trips on is bad input
            return Refusal(400, f"Bolt could not read it ({type(exc).__name__})")

    def _signature(self, body: bytes, headers: Mapping[str, str]) -> Refusal | None:
        timestamp = headers.get("x-slack-request-timestamp")
        signature = headers.get("x-slack-signature")
        if timestamp is None or signature is None:
            return Refusal(401, "no Slack signature headers")
        if not _TIMESTAMP.fullmatch(timestamp) or not _SIGNATURE.fullmatch(signature):
            return Refusal(401, "malformed Slack signature headers")
        if abs(time.time() - int(timestamp)) > MAX_CLOCK_SKEW_S:
            return Refusal(401, "stale request timestamp")
        signed = b"v0:" + timestamp.encode() + b":" + body
        expected = "v0=" + hmac.new(self._secret, signed, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            return Refusal(401, "invalid signature")
        return None


def _parse(text: str, content_type: str) -> Any:
    """The JSON Slack sent, read as Bolt will read it; or a :class:`Refusal`."""
    if content_type == JSON:
        raw = text
    elif content_type == FORM:
        if text.startswith("{"):
            return Refusal(400, "a form body that is JSON")  # Bolt would read it as JSON
        try:
            fields = parse_qs(text, keep_blank_values=True, max_num_fields=20)
        except ValueError:
            return Refusal(400, "too many form fields")
        payloads = fields.get("payload", [])
        if len(payloads) != 1:
            return Refusal(400, "a form without exactly one payload field")
        raw = payloads[0]
    else:
        return Refusal(400, f"unsupported content type {content_type[:40]!r}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return Refusal(400, "invalid JSON")


def _is_command(text: str) -> bool:
    """A form without a ``payload`` field: what Slack posts for a slash command. (A body
    that cannot be read as a form is left to :func:`_parse` to refuse.)"""
    if text.startswith("{"):
        return False
    try:
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return False
    return "payload" not in fields


def _command_problem(text: str) -> str | None:
    """What is wrong with a slash command's form, or None."""
    try:
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return "too many form fields"
    if "command" not in fields:
        return "a form without a payload or a command field"
    for name, values in fields.items():
        if len(values) != 1:
            return f"the slash command's {name[:40]!r} field is given {len(values)} times"
    missing = [name for name in _COMMAND_REQUIRED if name not in fields]
    if missing:
        return f"the slash command has no {missing[0]}"
    if not fields["command"][0].startswith("/"):
        return "the slash command's command does not start with /"
    for name in ("team_id", "user_id", "channel_id", "response_url"):
        if not fields[name][0]:
            return f"the slash command's {name} is empty"
    return None


def _shape_problem(payload: Any, *, form: bool) -> str | None:
    """What is wrong with the payload's shape, or None."""
    if not isinstance(payload, dict):
        return f"the payload is not a JSON object but {_json_kind(payload)}"
    kind = payload.get("type")
    if not isinstance(kind, str):
        return "the payload has no type"
    if form == (kind in ENVELOPES):
        return f"a {kind} payload sent as {'a form' if form else 'JSON'}"
    if kind == "event_callback":
        return _event_problem(payload)
    if kind == "url_verification":
        return None if isinstance(payload.get("challenge"), str) else "no challenge"
    if form:
        return _interaction_problem(payload, kind)
    return None


def _json_kind(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _event_problem(payload: dict[str, Any]) -> str | None:
    if not isinstance(payload.get("team_id"), str) or not isinstance(payload.get("event_id"), str):
        return "the event callback has no team_id or event_id"
    event = payload.get("event")
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return "the event callback has no event object with a type"
    kind = event["type"]
    required, optional = _EVENT_FIELDS.get(kind, ((), ()))
    if kind in _FROM_A_PERSON and "bot_id" not in event and "subtype" not in event:
        required = (*required, "user")
    return _fields_problem(event, f"{kind} event", required, optional)


def _interaction_problem(payload: dict[str, Any], kind: str) -> str | None:
    user = payload.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        return f"the {kind} payload has no user.id"
    for name in ("team", "channel", "container", "message", "view"):
        value = payload.get(name)
        if value is not None and not isinstance(value, dict):
            return f"the {kind} payload's {name} is not an object"
    if kind != "block_actions":
        return None
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions:
        return "the block_actions payload has no actions"
    for action in actions:
        if not isinstance(action, dict):
            return "the block_actions payload has an action that is not an object"
        problem = _fields_problem(action, "action", ("action_id",), ("value", "action_ts"))
        if problem is not None:
            return problem
    return None


def _fields_problem(
    obj: dict[str, Any], what: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> str | None:
    for name in required:
        if not isinstance(obj.get(name), str):
            return f"the {what} has no {name}"
    for name in optional:
        if name in obj and not isinstance(obj[name], str):
            return f"the {what}'s {name} is not a string"
    return None


# -- after the guard: Bolt's global error handler -----------------------------------------


async def on_bolt_error(
    error: Exception, request: AsyncBoltRequest, response: BoltResponse | None
) -> BoltResponse | None:
    """One log line for a middleware or listener that raised, or a request no listener
    takes; the answer is never a 500.

    Before the ack, a database failure answers 503 (Slack retries events later, and the
    retry gets a real answer); anything else answers 400: a payload this app cannot
    handle, which a retry would not change. After the ack the answer has been sent.
    """
    body = request.body if isinstance(request.body, dict) else {}
    what = _describe(body)
    if isinstance(error, BoltUnhandledRequestError):
        log.info("slack_request.unhandled", **what)
        return None  # Bolt's own 404
    if isinstance(error, UnknownInstallation):
        # Nothing is done for a workspace the app is not installed in; answered, so
        # Slack does not deliver it again.
        log.warning(
            "installation.unknown_team", team=error.team_id, enterprise=error.enterprise_id, **what
        )
        return BoltResponse(status=200, body="") if response is not None else None
    log.error(
        "slack_request.failed",
        error=f"{type(error).__name__}: {error}",
        where=raised_at(error),
        acked=response is None,
        **what,
    )
    if response is None:
        return None
    return BoltResponse(status=503 if isinstance(error, StorageError) else 400, body="")


def _describe(body: dict[str, Any]) -> dict[str, Any]:
    """The type of a payload (and of its event, or its first action) for a log line."""
    described: dict[str, Any] = {"type": body.get("type")}
    event = body.get("event")
    if isinstance(event, dict):
        described["event_type"] = event.get("type")
    actions = body.get("actions")
    if isinstance(actions, list) and actions and isinstance(actions[0], dict):
        described["action_id"] = actions[0].get("action_id")
    return described


def raised_at(error: BaseException) -> str:
    """``file:line in function`` where ``error`` was raised: enough to find it, in one line."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "unknown"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"
