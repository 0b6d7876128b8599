"""Malformed and mis-signed requests to ``POST /slack/events`` (issue 7, class 7).

Whatever arrives, the answer is a 4xx, never a 5xx; the log gets one line for it and no
traceback; nothing reaches the handlers, Slack or the database. A hypothesis fuzzer sends
over a thousand hostile bodies to the real app over HTTP; targeted tests cover a signed
click without ``user`` against a live run, and listeners that crash on a payload they
did not expect.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.client
import io
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
import structlog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent_core.process.logs import configure_logging
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, SECRET, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.system.workers import until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_workspace import Json

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
FUZZ_EXAMPLES = 1_000


# -- what the fuzzer sends ---------------------------------------------------------------

SIGNINGS = (
    "valid",  # a correct signature: the body itself is what is wrong
    "forged",  # signed with another secret
    "stale",  # ten minutes old
    "future",  # ten minutes ahead
    "no_signature",
    "no_timestamp",
    "garbled_timestamp",
    "garbled_signature",
    "other_body",  # a valid signature of a different body
)


@dataclass(frozen=True)
class Hostile:
    """One request: a body, its content type, and how (or whether) it is signed.

    The signature is made when the request is sent, so that "valid" is not stale.
    """

    body: bytes
    content_type: str | None
    signing: str = "valid"
    garble: str = ""

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": self.content_type} if self.content_type else {}
        match self.signing:
            case "valid":
                return headers | sign(self.body)
            case "forged":
                return headers | sign(self.body, secret=f"{SECRET}-forged")
            case "stale" | "future":
                skew = slack_requests.STALE_BY_SECONDS * (-1 if self.signing == "stale" else 1)
                return headers | sign(self.body, skew=skew)
            case "no_signature":
                return headers | {"X-Slack-Request-Timestamp": sign(self.body)[TIMESTAMP]}
            case "no_timestamp":
                return headers | {"X-Slack-Signature": sign(self.body)[SIGNATURE]}
            case "garbled_timestamp":
                return headers | sign(self.body) | {TIMESTAMP: self.garble}
            case "garbled_signature":
                return headers | sign(self.body) | {SIGNATURE: self.garble}
            case "other_body":
                return headers | sign(self.body + b" ")
        raise AssertionError(self.signing)


TIMESTAMP = "X-Slack-Request-Timestamp"
SIGNATURE = "X-Slack-Signature"


def sign(body: bytes, *, secret: str = SECRET, skew: int = 0) -> dict[str, str]:
    """Slack's signature headers for ``body``, as Slack computes them: over the raw bytes
    (``slack_requests.signed_request`` takes UTF-8 bodies only, as slack_sdk does)."""
    timestamp = str(int(time.time()) + skew)
    message = b"v0:" + timestamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return {TIMESTAMP: timestamp, SIGNATURE: f"v0={digest}"}


def _valid_payloads() -> list[tuple[Json, str]]:
    """Well-formed payloads as Slack sends them, with how each travels (JSON or form)."""
    status_ts = "1700000000.000100"
    click = slack_requests.button_click(
        action_id=ACTION_STOP, value="run-fuzz", message_ts=status_ts, thread_ts=status_ts
    )
    return [
        (slack_requests.app_mention("<@U0TPBOT0001> fuzz me"), JSON),
        (slack_requests.dm_message("fuzz me in a DM"), JSON),
        (slack_requests.thread_reply("and more", thread_ts=status_ts), JSON),
        (slack_requests.agent_session_stopped(channel=DEFAULT_CHANNEL, thread_ts=status_ts), JSON),
        (click, FORM),
    ]


VALID = _valid_payloads()

REQUIRED_PATHS: dict[str, list[tuple[Any, ...]]] = {
    "event_callback": [
        ("type",),
        ("team_id",),
        ("event_id",),
        ("event",),
        ("event", "type"),
        ("event", "channel"),
    ],
    "block_actions": [
        ("type",),
        ("user",),
        ("user", "id"),
        ("actions",),
        ("actions", 0),
        ("actions", 0, "action_id"),
    ],
}
"""Fields the handlers index directly: removing one or giving it the wrong type makes
the payload malformed."""

WRONG_TYPES: list[Any] = [None, 0, 1.5, True, [], {}, ["x"], {"id": None}]


def encode(payload: Any, how: str) -> bytes:
    text = json.dumps(payload)
    return text.encode() if how == JSON else urlencode({"payload": text}).encode()


def _broken(payload: Json, path: tuple[Any, ...], replacement: Any, delete: bool) -> Json:
    broken: Json = json.loads(json.dumps(payload))
    parent: Any = broken
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return broken


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=80,
)
content_types = st.sampled_from(
    [JSON, FORM, None, "text/plain", "multipart/form-data; boundary=x", f"{JSON}; charset=utf-8"]
)


@st.composite
def random_bytes(draw: st.DrawFn) -> Hostile:
    signing = draw(st.sampled_from(["valid", "forged", "no_signature"]))
    return Hostile(draw(st.binary(max_size=300)), draw(content_types), signing)


@st.composite
def bad_utf8(draw: st.DrawFn) -> Hostile:
    payload, how = draw(st.sampled_from(VALID))
    body = encode(payload, how)
    at = draw(st.integers(0, len(body)))
    junk = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82", b"\x80"]))
    return Hostile(body[:at] + junk + body[at:], how)


@st.composite
def not_an_object(draw: st.DrawFn) -> Hostile:
    value = draw(json_values.filter(lambda v: not isinstance(v, dict)))
    return Hostile(encode(value, draw(st.sampled_from([JSON, FORM]))), draw(content_types))


@st.composite
def junk_form(draw: st.DrawFn) -> Hostile:
    payload, _ = draw(st.sampled_from(VALID))
    fields = draw(
        st.sampled_from(
            [
                [("payload", draw(st.text(max_size=60)))],  # not JSON (or by chance, a scalar)
                [("payload", json.dumps(payload)), ("payload", json.dumps(payload))],
                [("command", "/threadpilot"), ("text", draw(st.text(max_size=20)))],
                # Trailing junk (never only whitespace, which JSON would allow).
                [("payload", json.dumps(payload) + draw(st.text("x}]0,", min_size=1)))],
            ]
        )
    )
    return Hostile(urlencode(fields).encode(), FORM)


@st.composite
def wrong_shape(draw: st.DrawFn) -> Hostile:
    payload, how = draw(st.sampled_from(VALID))
    path = draw(st.sampled_from(REQUIRED_PATHS[payload["type"]]))
    broken = _broken(payload, path, draw(st.sampled_from(WRONG_TYPES)), draw(st.booleans()))
    # An event envelope sent as a form, or a click sent as JSON, is also not what Slack does.
    if draw(st.booleans()) and len(path) == 1 and path[0] == "type":
        return Hostile(
            encode(payload, FORM if how == JSON else JSON), FORM if how == JSON else JSON
        )
    return Hostile(encode(broken, how), how)


def draw_bad_signing(draw: st.DrawFn) -> tuple[str, str]:
    """One of the ways a request can be mis-signed, and the garbled header if any."""
    signing = draw(st.sampled_from([s for s in SIGNINGS if s != "valid"]))
    garble = ""
    if signing == "garbled_timestamp":
        garble = draw(st.sampled_from(["", "abc", "1e9", "-1", "9" * 5000, " 1"]) | header_text)
    elif signing == "garbled_signature":
        near_misses = ["", "v0=", "v1=" + "0" * 64, "v0=" + "Ab" * 32]
        garble = draw(st.sampled_from(near_misses) | header_text)
    return signing, garble


@st.composite
def mis_signed(draw: st.DrawFn) -> Hostile:
    """A well-formed payload that Slack did not sign (or not now, or not this body)."""
    payload, how = draw(st.sampled_from(VALID))
    return Hostile(encode(payload, how), how, *draw_bad_signing(draw))


@st.composite
def hostile_requests(draw: st.DrawFn) -> Hostile:
    hostile: Hostile = draw(
        st.one_of(
            mis_signed(), wrong_shape(), random_bytes(), bad_utf8(), not_an_object(), junk_form()
        )
    )
    if hostile.signing == "valid" and draw(st.integers(0, 3)) == 0:
        # A quarter of the malformed bodies come mis-signed too: the signature is what
        # is checked first, so those get 401.
        signing, garble = draw_bad_signing(draw)
        return replace(hostile, signing=signing, garble=garble)
    return hostile


def post(port: int, hostile: Hostile) -> int:
    """Send ``hostile`` as it is (no client-side clean-up); the HTTP status."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/slack/events", body=hostile.body, headers=hostile.headers())
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


# -- the log -----------------------------------------------------------------------------


@pytest.fixture
def app_log() -> Iterator[io.StringIO]:
    """Everything the app logs (structlog and stdlib loggers), as JSON lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    yield out
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def records(out: io.StringIO) -> list[dict[str, Any]]:
    """The log's records; every line must be one JSON object (a raw traceback is not)."""
    return [json.loads(line) for line in out.getvalue().splitlines()]


def tracebacks(logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in logged if "exception" in r or "Traceback" in json.dumps(r)]


# -- the fuzzer --------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_thousand_hostile_requests_get_4xx_one_log_line_each_and_change_nothing(
    bot: Bot, app_log: io.StringIO
) -> None:
    port = bot.app.port
    assert port is not None
    calls_before = len(bot.slack.calls())
    sent: list[tuple[Hostile, int]] = []

    @settings(
        max_examples=FUZZ_EXAMPLES + 50,  # hypothesis skips repeats; at least 1,000 are sent
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(hostile=hostile_requests())
    # The shapes seen in the issue, always sent:
    @example(hostile=Hostile(b'{"type": "event_callback", "x": "\xff"}', JSON))  # not UTF-8
    @example(hostile=Hostile(b'{"type": "event_callback",', JSON))  # invalid JSON
    @example(hostile=Hostile(b"[1, 2, 3]", JSON))  # not an object
    @example(hostile=Hostile(b"[" * 50_000 + b"]" * 50_000, JSON))  # deeper than json allows
    @example(hostile=Hostile(encode(_broken(VALID[-1][0], ("user",), None, True), FORM), FORM))
    def fuzz(hostile: Hostile) -> None:
        status = post(port, hostile)
        sent.append((hostile, status))
        # 400 for what Slack signed but is malformed; 401 for everything not signed.
        assert status == (400 if hostile.signing == "valid" else 401), (status, hostile)

    await asyncio.to_thread(fuzz)

    assert len(sent) >= FUZZ_EXAMPLES
    logged = records(app_log)
    assert tracebacks(logged) == []
    assert [r for r in logged if r.get("level") in ("error", "critical")] == []
    refusals = [r for r in logged if r["event"] == "slack_request.refused"]
    assert len(refusals) == len(sent)  # one line per request...
    assert [r for r in logged if r.get("logger", "").startswith(("slack_bolt", "aiohttp"))] == []
    # ...and nothing reached the handlers: no Slack call, no run.
    assert len(bot.slack.calls()) == calls_before
    assert bot.app.ctx is not None
    assert await bot.app.ctx.store.find_runs(limit=1) == []


# -- targeted cases ----------------------------------------------------------------------


async def test_a_signed_click_without_user_on_a_live_run_gets_400_and_changes_nothing(
    bot: Bot, llm: LLMock, app_log: io.StringIO
) -> None:
    llm.add(*stalled_answer())
    _, running = await bot.mention("write a lot")
    await bot.slack.wait_for_call("chat.startStream", timeout=15)
    click = slack_requests.click_button(
        bot.slack.message(running.channel, running.ts), ACTION_ABORT
    )
    del click["user"]
    mark = len(app_log.getvalue().splitlines())

    response = await bot.post(slack_requests.interaction_request(click, SECRET))

    assert response.status == 400
    logged = records(app_log)[mark:]
    assert [(r["event"], r["status"]) for r in logged] == [("slack_request.refused", 400)]
    assert tracebacks(logged) == []
    live = bot.live_run(running)
    assert live is not None and live.run.control.reason is None  # still running, unstopped
    assert bot.slack.ephemerals(DEFAULT_CHANNEL) == []

    assert await bot.click(running, ACTION_ABORT) == 200  # a real click still works
    await bot.final(running)


async def test_url_verification_still_answers_its_challenge(bot: Bot) -> None:
    request = slack_requests.event_request(slack_requests.url_verification("c-123"), SECRET)

    async with bot.http.post(
        f"{bot.url}/slack/events", data=request.body, headers=request.headers
    ) as response:
        assert response.status == 200
        assert (await response.json())["challenge"] == "c-123"


async def test_listeners_that_crash_answer_without_500_in_one_log_line(
    make_bot: BotFactory, app_log: io.StringIO
) -> None:
    bot = await make_bot()
    bolt = bot.app.bolt
    assert bolt is not None

    async def crash(body: dict[str, Any]) -> None:
        raise KeyError("surprise")

    # Well-formed payloads this app's own listeners never see: a listener for each that
    # fails, one before its ack (a shortcut), one after (an event, acked by Bolt first).
    bolt.shortcut("crash")(crash)
    bolt.event("reaction_added")(crash)
    shortcut = {
        "type": "shortcut",
        "callback_id": "crash",
        "trigger_id": "1.2.3",
        "user": {"id": DEFAULT_USER, "team_id": bot.slack.workspace.team_id},
        "team": {"id": bot.slack.workspace.team_id},
    }
    reaction = slack_requests.event_callback(
        {"type": "reaction_added", "user": DEFAULT_USER, "reaction": "eyes", "event_ts": "1.2"}
    )
    unhandled = slack_requests.event_callback({"type": "team_join", "user": {"id": "U9"}})
    mark = len(app_log.getvalue().splitlines())

    before_ack = await bot.post(slack_requests.interaction_request(shortcut, SECRET))
    after_ack = await bot.post(slack_requests.event_request(reaction, SECRET))
    no_listener = await bot.post(slack_requests.event_request(unhandled, SECRET))

    assert (before_ack.status, after_ack.status, no_listener.status) == (400, 200, 404)

    def failures() -> list[dict[str, Any]]:
        return [r for r in records(app_log)[mark:] if r["event"] == "slack_request.failed"]

    # The event's listener runs after the ack: wait for its line, bounded.
    await until(lambda: len(failures()) == 2, what="both failures logged", timeout=5)
    logged = records(app_log)[mark:]
    assert tracebacks(logged) == []
    assert sorted((r.get("type"), r.get("acked")) for r in failures()) == [
        ("event_callback", True),
        ("shortcut", False),
    ]
    assert all("KeyError: 'surprise'" in r["error"] for r in failures())
    assert all("test_hostile_input.py" in r["where"] for r in failures())
    unhandled_lines = [r for r in logged if r["event"] == "slack_request.unhandled"]
    assert [r.get("event_type") for r in unhandled_lines] == ["team_join"]
    assert [r for r in logged if r.get("logger", "").startswith("slack_bolt")] == []
