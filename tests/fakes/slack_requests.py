"""Builders for what Slack sends *to* the app: Events API envelopes, `block_actions`
payloads (from messages, ephemeral messages and App Home views), slash commands, and the
signed HTTP requests that carry them.

Shapes follow Slack's documentation. Builders return plain JSON-ready
dicts, so one payload can be delivered over Socket Mode
(`slack.socket.send_envelope("events_api", app_mention(...))`) or over HTTP
(`event_request(app_mention(...), secret)` gives the body and headers to POST).
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

from tests.fakes.slack_workspace import (
    DEFAULT_CHANNEL,
    DEFAULT_DM_CHANNEL,
    DEFAULT_GROUP_DM_CHANNEL,
    DEFAULT_USER,
    DEFAULT_USERNAME,
    DEFAULT_WORKSPACE,
    Json,
    Workspace,
    next_ts,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from tests.fakes.slack_messages import Message

# Slack rejects requests whose timestamp is more than 5 minutes off; "stale" is 10.
STALE_BY_SECONDS = 10 * 60
NO_RESPONSE_URL = "http://127.0.0.1:9/response_url"
"""A click's `response_url` when the test gave none: loopback, port 9 (discard), where
nothing listens, so an app's answer fails at once and never leaves the machine."""


class SignedRequest(NamedTuple):
    """A body and the headers Slack would send with it (signature included)."""

    body: bytes
    headers: dict[str, str]

    @property
    def text(self) -> str:
        """The body as text, which is what `AsyncBoltRequest(body=...)` takes."""
        return self.body.decode()


# -- Events API ------------------------------------------------------------------------


def event_callback(
    event: Json,
    *,
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
    event_time: int | None = None,
) -> Json:
    """Wrap `event` in the `event_callback` envelope; `event_id` is unique unless given."""
    if event_time is None:
        event_time = int(float(event.get("event_ts") or time.time()))
    return {
        "token": workspace.verification_token,
        "team_id": workspace.team_id,
        "context_team_id": workspace.team_id,
        "context_enterprise_id": workspace.enterprise_id,
        "enterprise_id": workspace.enterprise_id,
        "api_app_id": workspace.app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": event_time,
        "authorizations": [
            {
                "enterprise_id": workspace.enterprise_id,
                # An org-wide install is authorised for the enterprise, not a workspace.
                "team_id": None if workspace.enterprise_install else workspace.team_id,
                "user_id": workspace.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": workspace.enterprise_install,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{uuid.uuid4().hex}",
    }


def app_mention(
    text: str,
    *,
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    ts: str | None = None,
    thread_ts: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """`@bot text` in a channel; give `thread_ts` for a mention inside a thread."""
    ts = ts or next_ts()
    event = _user_message("app_mention", text, channel, user, ts, workspace, mention=True)
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event_callback(event, workspace=workspace, event_id=event_id)


def dm_message(
    text: str,
    *,
    channel: str = DEFAULT_DM_CHANNEL,
    user: str = DEFAULT_USER,
    ts: str | None = None,
    thread_ts: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """A direct message to the app (`message` event, `channel_type: im`)."""
    ts = ts or next_ts()
    event = _user_message("message", text, channel, user, ts, workspace)
    event["channel_type"] = "im"
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event_callback(event, workspace=workspace, event_id=event_id)


def group_dm_message(
    text: str,
    *,
    channel: str = DEFAULT_GROUP_DM_CHANNEL,
    user: str = DEFAULT_USER,
    ts: str | None = None,
    thread_ts: str | None = None,
    mention: bool = False,
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """A message in a group DM the app is in (`message` event, `channel_type: mpim`);
    with `mention`, it @-mentions the app (Slack then also sends an `app_mention` for
    it: `app_mention(text, channel=..., ts=...)` with the same `ts`)."""
    ts = ts or next_ts()
    event = _user_message("message", text, channel, user, ts, workspace, mention=mention)
    event["channel_type"] = "mpim"
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event_callback(event, workspace=workspace, event_id=event_id)


def channel_message(
    text: str,
    *,
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    ts: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """A message in a channel, outside any thread, not mentioning the app (`message`
    event, `channel_type: channel`): the app is sent these, and has nothing to do."""
    ts = ts or next_ts()
    event = _user_message("message", text, channel, user, ts, workspace)
    event["channel_type"] = "channel"
    return event_callback(event, workspace=workspace, event_id=event_id)


def thread_reply(
    text: str,
    *,
    thread_ts: str,
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    parent_user_id: str = DEFAULT_USER,
    channel_type: str = "channel",
    ts: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """A reply in a channel thread (`message` event with `thread_ts`, no mention)."""
    ts = ts or next_ts()
    event = _user_message("message", text, channel, user, ts, workspace)
    event |= {"thread_ts": thread_ts, "parent_user_id": parent_user_id}
    event["channel_type"] = channel_type
    return event_callback(event, workspace=workspace, event_id=event_id)


def agent_session_stopped(
    *,
    channel: str,
    thread_ts: str,
    user: str = DEFAULT_USER,
    streaming_message_ts: Sequence[str] = (),
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """Slack's native stop button was pressed (`slack.state.stop_streams_by_user` gives
    the `streaming_message_ts` Slack would list)."""
    event = {
        "type": "agent_session_stopped",
        "channel": channel,
        "thread_ts": thread_ts,
        "user": user,
        "streaming_message_ts": list(streaming_message_ts),
        "event_ts": next_ts(),
    }
    return event_callback(event, workspace=workspace, event_id=event_id)


def app_home_opened(
    *,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_DM_CHANNEL,
    view: Json | None = None,
    tab: str = "home",
    workspace: Workspace = DEFAULT_WORKSPACE,
    event_id: str | None = None,
) -> Json:
    """The user opened the app's Home tab (`view` is present once one was published);
    `tab="messages"` is the Messages tab (an agent's chat, under `agent_view`)."""
    event: Json = {
        "type": "app_home_opened",
        "user": user,
        "channel": channel,
        "tab": tab,
        "event_ts": next_ts(),
    }
    if view is not None:
        event["view"] = view
    return event_callback(event, workspace=workspace, event_id=event_id)


def url_verification(challenge: str, *, workspace: Workspace = DEFAULT_WORKSPACE) -> Json:
    """The handshake Slack sends when a Request URL is saved (HTTP mode only)."""
    return {
        "token": workspace.verification_token,
        "challenge": challenge,
        "type": "url_verification",
    }


def _user_message(
    type_: str,
    text: str,
    channel: str,
    user: str,
    ts: str,
    workspace: Workspace,
    *,
    mention: bool = False,
) -> Json:
    elements: list[Json] = [{"type": "text", "text": f" {text}" if mention else text}]
    if mention:
        elements.insert(0, {"type": "user", "user_id": workspace.bot_user_id})
    section = {"type": "rich_text_section", "elements": elements}
    return {
        "type": type_,
        "client_msg_id": str(uuid.uuid4()),
        "text": f"<@{workspace.bot_user_id}> {text}" if mention else text,
        "user": user,
        "ts": ts,
        "blocks": [{"type": "rich_text", "block_id": uuid.uuid4().hex[:5], "elements": [section]}],
        "team": workspace.team_id,
        # The author's own team, and the team the message was sent from: another
        # organisation's in a Slack Connect channel.
        "user_team": workspace.team_id,
        "source_team": workspace.team_id,
        "channel": channel,
        "event_ts": ts,
    }


# -- Interactivity ---------------------------------------------------------------------


def button_click(
    *,
    action_id: str,
    value: str,
    message_ts: str,
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    block_id: str = "run_controls",
    button_text: str | None = None,
    thread_ts: str | None = None,
    message_text: str = "",
    message_blocks: list[Json] | None = None,
    response_url: str | None = None,
    is_ephemeral: bool = False,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """A `block_actions` payload for one button press on the message at `message_ts`.

    Ephemeral messages come without `message`, as from Slack. Pass
    `slack.new_response_url(channel, message_ts)` as `response_url` to record what the
    app posts to it (and apply `replace_original`); without one the payload names a
    loopback address nothing listens on, so an answer posted there fails at once.
    """
    container: Json = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": is_ephemeral,
    }
    if thread_ts is not None:
        container["thread_ts"] = thread_ts
    payload: Json = {
        "type": "block_actions",
        "user": {"id": user, "username": username, "name": username, "team_id": workspace.team_id},
        "api_app_id": workspace.app_id,
        "token": workspace.verification_token,
        "container": container,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        "team": {"id": workspace.team_id, "domain": workspace.team_domain},
        "enterprise": _enterprise(workspace),
        "is_enterprise_install": workspace.enterprise_install,
        "channel": {"id": channel, "name": f"channel-{channel.lower()}"},
        "state": {"values": {}},
        "response_url": response_url or f"{NO_RESPONSE_URL}/{uuid.uuid4().hex}",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": block_id,
                "text": {"type": "plain_text", "text": button_text or action_id, "emoji": True},
                "value": value,
                "action_ts": next_ts(),
            }
        ],
    }
    if not is_ephemeral:
        message: Json = {
            "type": "message",
            "user": workspace.bot_user_id,
            "bot_id": workspace.bot_id,
            "app_id": workspace.app_id,
            "text": message_text,
            "ts": message_ts,
            "team": workspace.team_id,
            "blocks": message_blocks or [],
        }
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        payload["message"] = message
    return payload


def click_button(
    message: Message,
    action_id: str,
    *,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    response_url: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """Press the button `action_id` that the app actually rendered on a stored message.

    Takes `block_id`, `value` and text from the message's blocks, so a test cannot click
    a button the app did not show; raises `LookupError` if it is not there.
    """
    for block_id, element in _buttons(message.blocks or []):
        if element.get("action_id") == action_id:
            return button_click(
                action_id=action_id,
                value=str(element.get("value", "")),
                message_ts=message.ts,
                channel=message.channel,
                user=user,
                username=username,
                block_id=block_id,
                button_text=str(element.get("text", {}).get("text", action_id)),
                thread_ts=message.thread_ts,
                message_text=message.text,
                message_blocks=message.blocks,
                response_url=response_url,
                workspace=workspace,
            )
    raise LookupError(f"no button {action_id!r} on message {message.ts}: {message.blocks}")


def choose_option(
    message: Message,
    action_id: str,
    value: str,
    *,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    response_url: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """Choose the option ``value`` of an ``overflow`` menu the app actually rendered on a
    stored message (as :func:`click_button` for a button): a ``block_actions`` payload
    whose action carries ``selected_option``. Raises `LookupError` if it is not there."""
    for block in message.blocks or []:
        menu = block.get("accessory")
        if not isinstance(menu, dict) or menu.get("type") != "overflow":
            continue
        if menu.get("action_id") != action_id:
            continue
        option = next((o for o in menu.get("options", []) if o.get("value") == value), None)
        if option is None:
            continue
        payload = button_click(
            action_id=action_id,
            value="",
            message_ts=message.ts,
            channel=message.channel,
            user=user,
            username=username,
            block_id=str(block.get("block_id", "")),
            thread_ts=message.thread_ts,
            message_text=message.text,
            message_blocks=message.blocks,
            response_url=response_url,
            workspace=workspace,
        )
        action = payload["actions"][0]
        del action["value"], action["text"]
        action["type"] = "overflow"
        action["selected_option"] = copy.deepcopy(option)
        return payload
    raise LookupError(f"no option {value!r} of {action_id!r} on message {message.ts}")


def view_submission(
    view: Json,
    values: dict[str, dict[str, str]],
    *,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """A `view_submission` payload for a modal the app opened (`slack.state.modals()`):
    `values` maps each input block's id to its action id's typed text, as Slack nests it
    under `view.state.values`."""
    state = {
        block_id: {
            action_id: {"type": "plain_text_input", "value": text}
            for action_id, text in inputs.items()
        }
        for block_id, inputs in values.items()
    }
    submitted = {
        **copy.deepcopy(view),
        "team_id": workspace.team_id,
        "state": {"values": state},
        "app_id": workspace.app_id,
        "bot_id": workspace.bot_id,
    }
    return {
        "type": "view_submission",
        "team": {"id": workspace.team_id, "domain": workspace.team_domain},
        "user": {"id": user, "username": username, "name": username, "team_id": workspace.team_id},
        "api_app_id": workspace.app_id,
        "token": workspace.verification_token,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def home_click(
    view: Json,
    action_id: str,
    *,
    value: str | None = None,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """Press a button the app published on a user's Home tab (`slack.state.home_view`):
    the first `action_id` button, or the one whose `value` is `value`.

    From a view, Slack sends the view and a `view` container, and no channel, message
    or `response_url`. Raises `LookupError` if the view has no such button.
    """
    block_id, element = _find_button(view.get("blocks") or [], action_id, value)
    return {
        "type": "block_actions",
        "user": {"id": user, "username": username, "name": username, "team_id": workspace.team_id},
        "api_app_id": workspace.app_id,
        "token": workspace.verification_token,
        "container": {"type": "view", "view_id": view.get("id", "V0TPVIEW001")},
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        "team": {"id": workspace.team_id, "domain": workspace.team_domain},
        "enterprise": _enterprise(workspace),
        "is_enterprise_install": workspace.enterprise_install,
        "view": view,
        "actions": [_pressed(block_id, element)],
    }


def ephemeral_click(
    blocks: list[Json],
    action_id: str,
    *,
    response_url: str,
    value: str | None = None,
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """Press a button in an ephemeral message the app answered with (a slash command's
    reply, given by its `blocks`): Slack sends no `message`, and a `response_url`."""
    block_id, element = _find_button(blocks, action_id, value)
    return button_click(
        action_id=action_id,
        value=str(element.get("value", "")),
        message_ts=next_ts(),
        channel=channel,
        user=user,
        block_id=block_id,
        button_text=str(element.get("text", {}).get("text", action_id)),
        response_url=response_url,
        is_ephemeral=True,
        workspace=workspace,
    )


def feedback_click(
    message: Message,
    *,
    positive: bool,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> Json:
    """Press thumbs up (`positive`) or down on the `feedback_buttons` the app rendered
    on a stored message (in a `context_actions` block); `LookupError` if there are none.

    The action is `feedback_buttons`, with the pressed button's `value` and `text`.
    """
    for block in message.blocks or []:
        for element in block.get("elements", []) if block.get("type") == "context_actions" else []:
            if element.get("type") != "feedback_buttons":
                continue
            button = element["positive_button" if positive else "negative_button"]
            payload = button_click(
                action_id=str(element.get("action_id", "")),
                value=str(button["value"]),
                message_ts=message.ts,
                channel=message.channel,
                user=user,
                username=username,
                block_id=str(block.get("block_id", "feedback")),
                thread_ts=message.thread_ts,
                message_text=message.text,
                message_blocks=message.blocks,
                workspace=workspace,
            )
            action = payload["actions"][0]
            action["type"] = "feedback_buttons"
            action["text"] = button["text"]
            return payload
    raise LookupError(f"no feedback buttons on message {message.ts}: {message.blocks}")


def _enterprise(workspace: Workspace) -> Json | None:
    """A click's ``enterprise``: the Grid org of its workspace, if any."""
    if workspace.enterprise_id is None:
        return None
    return {"id": workspace.enterprise_id, "name": f"org {workspace.enterprise_id}"}


def _find_button(blocks: list[Json], action_id: str, value: str | None) -> tuple[str, Json]:
    for block_id, element in _buttons(blocks):
        if element.get("action_id") == action_id and value in (None, element.get("value")):
            return block_id, element
    raise LookupError(f"no button {action_id!r} (value {value!r}) in {blocks}")


def _pressed(block_id: str, element: Json) -> Json:
    return {
        "type": "button",
        "action_id": element["action_id"],
        "block_id": block_id,
        "text": element.get("text", {"type": "plain_text", "text": element["action_id"]}),
        "value": str(element.get("value", "")),
        "action_ts": next_ts(),
    }


def _buttons(blocks: list[Json]) -> Iterator[tuple[str, Json]]:
    for block in blocks:
        block_id = str(block.get("block_id", ""))
        candidates: list[Any] = [*block.get("elements", []), block.get("accessory")]
        for element in candidates:
            if isinstance(element, dict) and element.get("type") == "button":
                yield block_id, element


# -- Slash commands --------------------------------------------------------------------


def slash_command(
    text: str,
    *,
    command: str = "/threadpilot",
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    username: str = DEFAULT_USERNAME,
    response_url: str | None = None,
    workspace: Workspace = DEFAULT_WORKSPACE,
) -> dict[str, str]:
    """The fields Slack posts for `command text` (all strings). Over HTTP they are the
    form itself (`command_request`), over Socket Mode the envelope's payload
    (`slack.socket.send_envelope("slash_commands", ...)`). Pass
    `slack.new_response_url()` as `response_url` to record what the app posts to it."""
    return {
        "token": workspace.verification_token,
        "team_id": workspace.team_id,
        "team_domain": workspace.team_domain,
        "channel_id": channel,
        "channel_name": f"channel-{channel.lower()}",
        "user_id": user,
        "user_name": username,
        "command": command,
        "text": text,
        "api_app_id": workspace.app_id,
        "is_enterprise_install": "false",
        "response_url": response_url
        or f"https://hooks.slack.com/commands/{workspace.team_id}/1/{uuid.uuid4().hex}",
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
    }


def command_request(
    fields: dict[str, str],
    signing_secret: str,
    *,
    timestamp: int | None = None,
    stale: bool = False,
    forged: bool = False,
) -> SignedRequest:
    """A slash command POST: its fields form-encoded, without `payload=`, signed."""
    body = urlencode(fields).encode()
    content_type = "application/x-www-form-urlencoded"
    return SignedRequest(
        body, _headers(body, content_type, signing_secret, timestamp, stale, forged)
    )


# -- Signed HTTP requests --------------------------------------------------------------


def signed_request(
    body: bytes, signing_secret: str, timestamp: int | None = None
) -> dict[str, str]:
    """The `X-Slack-Request-Timestamp` and `X-Slack-Signature` headers for `body`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(signing_secret).generate_signature(timestamp=stamp, body=body)
    assert signature is not None  # only None without a timestamp
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}


def event_request(
    envelope: Json,
    signing_secret: str,
    *,
    timestamp: int | None = None,
    stale: bool = False,
    forged: bool = False,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> SignedRequest:
    """An Events API POST to `/slack/events`; `retry_num` marks Slack's redelivery."""
    body = json.dumps(envelope).encode()
    headers = _headers(body, "application/json", signing_secret, timestamp, stale, forged)
    if retry_num is not None:
        headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": retry_reason}
    return SignedRequest(body, headers)


def interaction_request(
    payload: Json,
    signing_secret: str,
    *,
    timestamp: int | None = None,
    stale: bool = False,
    forged: bool = False,
) -> SignedRequest:
    """An interactivity POST: form-encoded `payload=<json>`, as Slack sends clicks."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    content_type = "application/x-www-form-urlencoded"
    return SignedRequest(
        body, _headers(body, content_type, signing_secret, timestamp, stale, forged)
    )


def _headers(
    body: bytes,
    content_type: str,
    signing_secret: str,
    timestamp: int | None,
    stale: bool,
    forged: bool,
) -> dict[str, str]:
    if stale:
        timestamp = int(time.time()) - STALE_BY_SECONDS
    # A forged request is signed correctly, just with a secret the app does not know.
    secret = f"{signing_secret}-forged" if forged else signing_secret
    return {"Content-Type": content_type, **signed_request(body, secret, timestamp)}
