"""The fake Slack behaves as Slack does where threadpilot relies on it.

Every test drives the fake through the real slack_sdk / slack_bolt clients, so a
passing suite means those clients accept the fake's answers and send what it expects.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import builtin_async_handlers
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.fakes.slack_api import SLACK_TIERS, FakeSlack
from tests.fakes.slack_messages import StreamState
from tests.fakes.slack_requests import (
    agent_session_stopped,
    app_mention,
    button_click,
    click_button,
    event_request,
    interaction_request,
    thread_reply,
)
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_DM_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from slack_bolt.context.ack.async_ack import AsyncAck
    from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest

    from tests.fakes.slack_api import ApiCall
    from tests.fakes.slack_requests import SignedRequest

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
CHANNEL = DEFAULT_CHANNEL
DM = DEFAULT_DM_CHANNEL
STOP_BUTTON = {
    "type": "button",
    "action_id": "stop",
    "value": "run-1",
    "text": {"type": "plain_text", "text": "Stop"},
}
CONTROLS = [{"type": "actions", "block_id": "run_controls", "elements": [STOP_BUTTON]}]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)


def _error(exc: pytest.ExceptionInfo[SlackApiError]) -> str:
    return str(exc.value.response["error"])


# -- Web API ---------------------------------------------------------------------------


async def test_post_then_update_is_visible_in_state_and_replies(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    parent = slack.seed_message(CHANNEL, "<@bot> summarise the incident")
    posted = await client.chat_postMessage(
        channel=CHANNEL, thread_ts=parent, text="Working", blocks=CONTROLS
    )
    ts = str(posted["ts"])
    await client.chat_update(channel=CHANNEL, ts=ts, text="Done", blocks=[])

    message = slack.message(CHANNEL, ts)
    assert (message.text, message.blocks, message.is_bot) == ("Done", None, True)
    assert [(r.method, r.text) for r in message.history] == [
        ("chat.postMessage", "Working"),
        ("chat.update", "Done"),
    ]
    assert message.history[0].blocks == CONTROLS
    assert [m.ts for m in slack.thread(CHANNEL, parent)] == [parent, ts]
    replies = await client.conversations_replies(channel=CHANNEL, ts=parent)
    assert [m["ts"] for m in replies["messages"]] == [parent, ts]
    assert replies["messages"][0]["reply_count"] == 1
    post = slack.calls("chat.postMessage")[0]
    assert (post.token, post.args["blocks"], post.ok) == (BOT_TOKEN, CONTROLS, True)


async def test_form_encoded_blocks_arrive_decoded(slack: FakeSlack, client: AsyncWebClient) -> None:
    data = {"channel": CHANNEL, "text": "hi", "blocks": json.dumps(CONTROLS)}
    posted = await client.api_call("chat.postMessage", data=data)

    assert slack.calls("chat.postMessage")[0].args["blocks"] == CONTROLS
    assert slack.message(CHANNEL, str(posted["ts"])).blocks == CONTROLS


async def test_update_of_an_unknown_message_is_refused_and_recorded(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    with pytest.raises(SlackApiError) as refused:
        await client.chat_update(channel=CHANNEL, ts="1.000001", text="x")

    assert _error(refused) == "message_not_found"
    [call] = slack.calls("chat.update")
    assert (call.status, call.error, call.ok) == (200, "message_not_found", False)


async def test_rate_limited_call_is_retried_after_retry_after(
    slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The handler sleeps Retry-After plus up to 1 s of random jitter; pin the jitter at
    # zero so the test takes a predictable ~1 s while the handler logic stays real.
    monkeypatch.setattr(builtin_async_handlers, "random", SimpleNamespace(random=lambda: 0.0))
    retrying = AsyncWebClient(
        token=BOT_TOKEN,
        base_url=slack.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    ts = slack.seed_message(CHANNEL, "status", user=slack.workspace.bot_user_id)
    slack.fail_next("chat.update", status=429, retry_after=1)

    await retrying.chat_update(channel=CHANNEL, ts=ts, text="progress")

    limited, retried = slack.calls("chat.update")
    assert (limited.status, limited.error, retried.status) == (429, "ratelimited", 200)
    assert retried.at - limited.at >= 1.0
    assert [r.text for r in slack.message(CHANNEL, ts).history] == ["status", "progress"]


async def test_posts_are_rate_limited_per_channel_about_one_a_second() -> None:
    # Slack: chat.postMessage allows about one message a second per channel, with short
    # bursts, and is limited when that is sustained. The fake: 60 in any 60 s per channel.
    async with FakeSlack(rate_limits=SLACK_TIERS) as slack:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        for i in range(60):
            await client.chat_postMessage(channel=CHANNEL, text=f"post {i}")
        with pytest.raises(SlackApiError) as limited:
            await client.chat_postMessage(channel=CHANNEL, text="one too many")
        await client.chat_postMessage(channel=DM, text="another channel has its own budget")

    assert _error(limited) == "ratelimited"
    assert int(limited.value.response.headers["Retry-After"]) >= 1
    assert [c.args["channel"] for c in slack.rate_limited("chat.postMessage")] == [CHANNEL]
    posted = [c for c in slack.calls("chat.postMessage") if c.ok]
    assert (len(posted), posted[-1].args["channel"]) == (61, DM)


async def test_faults_are_consumed_in_order_and_change_no_state(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.postMessage", status=500)
    slack.fail_next("chat.postMessage", error="not_allowed_token_type")

    for expected in ("fatal_error", "not_allowed_token_type"):
        with pytest.raises(SlackApiError) as failed:
            await client.chat_postMessage(channel=CHANNEL, text="hello")
        assert _error(failed) == expected
    await client.chat_postMessage(channel=CHANNEL, text="hello")

    assert [(c.status, c.error) for c in slack.calls("chat.postMessage")] == [
        (500, "fatal_error"),
        (200, "not_allowed_token_type"),
        (200, None),
    ]
    assert len(slack.messages(CHANNEL)) == 1


@pytest.mark.parametrize("landed", [False, True], ids=["not-done", "done"])
async def test_a_server_error_can_hide_a_post_that_was_done(
    slack: FakeSlack, client: AsyncWebClient, landed: bool
) -> None:
    slack.fail_next("chat.postMessage", status=500, landed=landed)

    with pytest.raises(SlackApiError) as failed:
        await client.chat_postMessage(channel=CHANNEL, text="hello")

    assert (failed.value.response.status_code, _error(failed)) == (500, "fatal_error")
    [call] = slack.calls("chat.postMessage")
    assert (call.status, call.landed) == (500, landed)
    assert [m.text for m in slack.messages(CHANNEL)] == (["hello"] if landed else [])


def test_only_a_server_error_can_hide_a_call_that_was_done(slack: FakeSlack) -> None:
    with pytest.raises(ValueError, match="5xx"):
        slack.fail_next("chat.postMessage", status=429, landed=True)


@pytest.mark.parametrize("landed", [False, True], ids=["not-done", "done"])
async def test_a_timed_out_call_is_answered_too_late(
    slack: FakeSlack, client: AsyncWebClient, landed: bool
) -> None:
    slack.time_out_next("chat.postMessage", hold_s=5.0, landed=landed)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await client.chat_postMessage(channel=CHANNEL, text="hello")

    # The client gave up first; the fake records the call once it has answered (late).
    call = await slack.wait_for_call("chat.postMessage", timeout=10.0)
    assert len(slack.calls("chat.postMessage")) == 1
    assert (call.status, call.landed) == (504, landed)
    assert [m.text for m in slack.messages(CHANNEL)] == (["hello"] if landed else [])
    await client.chat_postMessage(channel=CHANNEL, text="again")  # one fault, used up
    assert slack.calls("chat.postMessage")[-1].ok


async def test_metadata_is_stored_and_returned_only_when_asked_for(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    parent = slack.seed_message(CHANNEL, "<@bot> do it")
    metadata = {"event_type": "threadpilot_run", "event_payload": {"run_id": "run-1"}}
    posted = await client.chat_postMessage(
        channel=CHANNEL, thread_ts=parent, text="Working", metadata=metadata
    )
    ts = str(posted["ts"])
    await client.chat_update(channel=CHANNEL, ts=ts, text="Done")  # metadata left out: kept

    assert slack.message(CHANNEL, ts).metadata == metadata
    plain = await client.conversations_replies(channel=CHANNEL, ts=parent)
    assert [m.get("metadata") for m in plain["messages"]] == [None, None]
    full = await client.conversations_replies(channel=CHANNEL, ts=parent, include_all_metadata=True)
    assert [m.get("metadata") for m in full["messages"]] == [None, metadata]
    history = await client.conversations_history(channel=CHANNEL, include_all_metadata=True)
    assert [m["ts"] for m in history["messages"]] == [parent]  # replies stay in their thread
    top = await client.chat_postMessage(channel=CHANNEL, text="top", metadata=metadata)
    history = await client.conversations_history(channel=CHANNEL, include_all_metadata=True)
    assert [(m["ts"], m.get("metadata")) for m in history["messages"]] == [
        (top["ts"], metadata),  # newest first
        (parent, None),
    ]


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ("not json", "invalid_metadata_format"),
        ({"event_payload": {}}, "invalid_metadata_schema"),
        ({"event_type": "x", "event_payload": "y"}, "invalid_metadata_schema"),
    ],
)
async def test_malformed_metadata_is_refused(
    slack: FakeSlack, client: AsyncWebClient, metadata: Any, error: str
) -> None:
    with pytest.raises(SlackApiError) as refused:
        await client.api_call(
            "chat.postMessage", json={"channel": CHANNEL, "text": "x", "metadata": metadata}
        )
    assert _error(refused) == error
    assert slack.messages(CHANNEL) == []


async def test_unknown_methods_surface_as_slack_api_error(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.make_unknown("chat.startStream")

    with pytest.raises(SlackApiError) as missing:
        await client.chat_startStream(channel="D0DM", thread_ts="1.000001", markdown_text="x")
    with pytest.raises(SlackApiError) as never_existed:
        await client.api_call("threadpilot.nonsense")

    assert _error(missing) == _error(never_existed) == "unknown_method"
    assert slack.calls("threadpilot.nonsense")[0].error == "unknown_method"


async def test_stream_accumulates_then_stops_and_refuses_more(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    parent = slack.seed_message(CHANNEL, "question")
    with pytest.raises(SlackApiError) as anonymous:
        await client.chat_startStream(channel=CHANNEL, thread_ts=parent, markdown_text="x")
    assert _error(anonymous) == "missing_recipient_team_id"

    # slack_sdk's helper buffers appends and sends `chunks`, not `markdown_text`.
    stream = await client.chat_stream(
        channel=CHANNEL,
        thread_ts=parent,
        recipient_team_id=slack.workspace.team_id,
        recipient_user_id=DEFAULT_USER,
        buffer_size=1,
    )
    await stream.append(markdown_text="Hello ")
    await stream.append(markdown_text="world")
    await stream.stop(markdown_text="!", blocks=CONTROLS)

    ts = str(slack.calls("chat.startStream")[-1].response["ts"])
    message = slack.message(CHANNEL, ts)
    assert (message.text, message.stream, message.blocks) == (
        "Hello world!",
        StreamState.STOPPED,
        CONTROLS,
    )
    assert [r.method for r in message.history] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.stopStream",
    ]
    with pytest.raises(SlackApiError) as late:
        await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="more")
    assert _error(late) == "message_not_in_streaming_state"


async def test_native_stop_ends_live_streams(slack: FakeSlack, client: AsyncWebClient) -> None:
    parent = slack.seed_message(DM, "question")
    started = await client.chat_startStream(channel=DM, thread_ts=parent, markdown_text="Thinking")

    stopped = slack.state.stop_streams_by_user(DM, parent)
    event = agent_session_stopped(channel=DM, thread_ts=parent, streaming_message_ts=stopped)

    assert stopped == [started["ts"]]
    assert event["event"]["streaming_message_ts"] == stopped
    with pytest.raises(SlackApiError) as refused:
        await client.chat_appendStream(channel=DM, ts=stopped[0], markdown_text="!")
    assert _error(refused) == "stopped_by_user"


async def test_thread_side_effects_are_recorded(slack: FakeSlack, client: AsyncWebClient) -> None:
    parent = slack.seed_message(CHANNEL, "question")
    await client.reactions_add(channel=CHANNEL, timestamp=parent, name="eyes")
    await client.reactions_add(channel=CHANNEL, timestamp=parent, name="white_check_mark")
    await client.reactions_remove(channel=CHANNEL, timestamp=parent, name="eyes")
    await client.chat_postEphemeral(channel=CHANNEL, user=DEFAULT_USER, text="Not your run")
    await client.api_call(
        "agents.sessions.setStatus",
        json={"channel_id": CHANNEL, "thread_ts": parent, "status": "processing"},
    )
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts=parent, status="is thinking..."
    )
    await client.views_publish(user_id=DEFAULT_USER, view={"type": "home", "blocks": []})

    assert slack.message(CHANNEL, parent).reactions == {
        "white_check_mark": (slack.workspace.bot_user_id,)
    }
    [ephemeral] = slack.ephemerals(CHANNEL)
    assert (ephemeral.user, ephemeral.text) == (DEFAULT_USER, "Not your run")
    assert slack.state.session_status(CHANNEL, parent) == "processing"
    assert slack.state.assistant_status(CHANNEL, parent) == "is thinking..."
    home = slack.state.home_view(DEFAULT_USER)
    assert home is not None and home["type"] == "home"
    identity = await client.auth_test()
    assert (identity["user_id"], identity["team_id"]) == (
        slack.workspace.bot_user_id,
        slack.workspace.team_id,
    )


async def test_wrong_kind_of_token_is_refused(slack: FakeSlack) -> None:
    app_level = AsyncWebClient(token=APP_TOKEN, base_url=slack.api_url)

    with pytest.raises(SlackApiError) as refused:
        await app_level.chat_postMessage(channel=CHANNEL, text="hi")

    assert _error(refused) == "not_allowed_token_type"


async def test_waiting_sees_past_and_future_calls(slack: FakeSlack, client: AsyncWebClient) -> None:
    def second_update(call: ApiCall) -> bool:
        return call.args.get("text") == "second"

    async with asyncio.TaskGroup() as tasks:
        waiting = tasks.create_task(slack.wait_for_call("chat.update", second_update))
        posted = await client.chat_postMessage(channel=CHANNEL, text="first")
        for text in ("first", "second"):
            await client.chat_update(channel=CHANNEL, ts=str(posted["ts"]), text=text)

    assert waiting.result().args["text"] == "second"
    updates = await slack.wait_until(lambda fake: len(fake.calls("chat.update")) == 2)
    assert updates is True
    with pytest.raises(TimeoutError, match=r"chat\.delete"):
        await slack.wait_for_call("chat.delete", timeout=0.05)


async def test_response_url_posts_are_recorded_and_limited(slack: FakeSlack) -> None:
    url = slack.new_response_url()
    webhook = AsyncWebhookClient(url)

    statuses = [(await webhook.send(text=f"reply {n}")).status_code for n in range(6)]

    assert statuses == [200] * 5 + [404]
    posts = slack.response_url_posts(url)
    assert [p.body["text"] for p in posts][:2] == ["reply 0", "reply 1"]
    assert [p.accepted for p in posts] == [True] * 5 + [False]


async def test_a_response_url_replaces_the_message_it_was_minted_for(slack: FakeSlack) -> None:
    ts = slack.seed_message("C1", "the status", user=slack.workspace.bot_user_id)
    url = slack.new_response_url("C1", ts)
    webhook = AsyncWebhookClient(url)
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "replaced"}}]

    assert (await webhook.send(text="ephemeral aside")).status_code == 200
    assert slack.message("C1", ts).text == "the status"  # a plain post is a new message
    sent = await webhook.send(text="replaced", blocks=blocks, replace_original=True)

    assert sent.status_code == 200
    message = slack.message("C1", ts)
    assert (message.text, message.blocks) == ("replaced", blocks)
    assert message.history[-1].method == "response_url"
    assert slack.calls("chat.update") == []  # not counted against chat.update


# -- Socket Mode -----------------------------------------------------------------------


async def test_socket_mode_client_connects_acks_and_reconnects(slack: FakeSlack) -> None:
    hello: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def on_message(_: AsyncBaseSocketModeClient, message: dict[str, Any], __: Any) -> None:
        if message.get("type") == "hello" and not hello.done():
            hello.set_result(message)

    async def on_request(client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))

    client = SocketModeClient(
        app_token=APP_TOKEN, web_client=AsyncWebClient(base_url=slack.api_url)
    )
    client.message_listeners.append(on_message)
    client.socket_mode_request_listeners.append(on_request)
    try:
        await client.connect()  # type: ignore[no-untyped-call]  # slack_sdk leaves it untyped
        await slack.socket.wait_connected()
        click = button_click(action_id="stop", value="run-1", message_ts="1.000001")
        envelope_id = await slack.socket.send_envelope("interactive", click)
        ack = await slack.socket.wait_for_ack(envelope_id)

        assert (ack.envelope_id, ack.connection) == (envelope_id, 1)
        assert ack.latency >= 0
        greeting = await asyncio.wait_for(hello, timeout=5)
        assert greeting["connection_info"] == {"app_id": slack.workspace.app_id}
        assert slack.calls("apps.connections.open")[0].token == APP_TOKEN

        await slack.socket.disconnect_all()
        await slack.socket.wait_connected()
        assert slack.socket.connections_opened == 2
        assert len(slack.calls("apps.connections.open")) == 2
    finally:
        await client.close()  # type: ignore[no-untyped-call]


async def test_bolt_socket_mode_app_acks_a_click_and_calls_the_api(slack: FakeSlack) -> None:
    app = AsyncApp(
        client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url),
        signing_secret=SIGNING_SECRET,
    )

    @app.action("stop")
    async def on_stop(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        container = body["container"]
        await client.chat_update(
            channel=container["channel_id"], ts=container["message_ts"], text="Stopping..."
        )

    status = await app.client.chat_postMessage(channel=CHANNEL, text="Working", blocks=CONTROLS)
    handler = AsyncSocketModeHandler(app, APP_TOKEN)
    try:
        await handler.connect_async()  # type: ignore[no-untyped-call]  # untyped in slack_bolt
        await slack.socket.wait_connected()
        click = click_button(slack.message(CHANNEL, str(status["ts"])), "stop")
        ack = await slack.socket.wait_for_ack(
            await slack.socket.send_envelope("interactive", click)
        )
        update = await slack.wait_for_call("chat.update")
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]

    assert ack.payload in (None, {})
    assert update.args["ts"] == status["ts"]
    assert slack.message(CHANNEL, str(status["ts"])).text == "Stopping..."


# -- Inbound requests ------------------------------------------------------------------


def test_signed_requests_verify_and_forgeries_do_not() -> None:
    verifier = SignatureVerifier(SIGNING_SECRET)
    envelope = app_mention("summarise", thread_ts="1.000001")
    good = event_request(envelope, SIGNING_SECRET, retry_num=1)
    stale = event_request(envelope, SIGNING_SECRET, stale=True)
    forged = event_request(envelope, SIGNING_SECRET, forged=True)

    stamp, signature = good.headers["X-Slack-Request-Timestamp"], good.headers["X-Slack-Signature"]
    assert verifier.is_valid(good.body, stamp, signature)
    assert not verifier.is_valid_request(stale.body, stale.headers)
    assert not verifier.is_valid_request(forged.body, forged.headers)
    assert (good.headers["X-Slack-Retry-Num"], good.headers["X-Slack-Retry-Reason"]) == (
        "1",
        "http_timeout",
    )
    assert json.loads(good.body) == envelope


def test_interaction_request_is_a_form_encoded_payload() -> None:
    click = button_click(action_id="abort", value="run-7", message_ts="1.000002")
    request = interaction_request(click, SIGNING_SECRET)

    assert SignatureVerifier(SIGNING_SECRET).is_valid_request(request.body, request.headers)
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert json.loads(parse_qs(request.text)["payload"][0]) == click


def test_event_envelopes_have_slack_shape_and_unique_ids() -> None:
    first, second = thread_reply("more", thread_ts="1.000001"), app_mention("go")

    assert first["event_id"] != second["event_id"]
    assert {"token", "team_id", "api_app_id", "event", "type", "event_time", "authorizations"} <= (
        first.keys()
    )
    assert (first["type"], first["event"]["channel_type"]) == ("event_callback", "channel")
    assert first["event"]["thread_ts"] == "1.000001"
    assert second["event"]["text"].startswith("<@")


async def test_bolt_http_dispatch_accepts_signed_and_rejects_forged(slack: FakeSlack) -> None:
    app = AsyncApp(
        client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url),
        signing_secret=SIGNING_SECRET,
    )

    @app.action("stop")
    async def on_stop(ack: AsyncAck) -> None:
        await ack()

    click = button_click(action_id="stop", value="run-1", message_ts="1.000001")
    good = interaction_request(click, SIGNING_SECRET)
    forged = interaction_request(click, SIGNING_SECRET, forged=True)

    accepted = await app.async_dispatch(_bolt_request(good))
    rejected = await app.async_dispatch(_bolt_request(forged))

    assert (accepted.status, rejected.status) == (200, 401)


def _bolt_request(signed: SignedRequest) -> AsyncBoltRequest:
    headers: dict[str, str | Sequence[str]] = dict(signed.headers)
    return AsyncBoltRequest(body=signed.text, headers=headers)
