"""`FakeSlack`: a local stand-in for Slack's Web API, Socket Mode and response URLs.

Real clients talk to it over HTTP on 127.0.0.1: point `AsyncWebClient(base_url=
slack.api_url)` (or a Bolt app built on such a client) at it. This module owns the
HTTP side: decoding requests as Slack does, tokens, scripted faults (refusals, 429s,
5xx and timeouts, each either "not done" or "done, but answered with the failure"),
recording every call and waiting on recordings. What each method does to the workspace lives in
`slack_state.py`; the WebSocket side in `slack_socket.py`.

Rate limits are enforced when asked for (`FakeSlack(rate_limits=SLACK_TIERS)`, or a
table of one's own): a method called more often than its limit in any 60 seconds is
answered 429 `ratelimited` with `Retry-After`, as Slack does. Slack lets short bursts
past its tiers ("Tier 4: 100+ per minute"); the fake does not, which is what a test of a
budget wants. `chat.postMessage` is limited per channel (Slack: about one a second,
short bursts allowed, limited when sustained): 60 in any 60 seconds in one channel.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self, TypeVar

from aiohttp import web

from bot.views import block_limits as limits
from tests.fakes.slack_messages import Refused
from tests.fakes.slack_oauth import FakeOAuth
from tests.fakes.slack_socket import FakeSocketMode
from tests.fakes.slack_state import STREAM_TTL_S, SlackState
from tests.fakes.slack_workspace import DEFAULT_USER, DEFAULT_WORKSPACE, Json, Workspace
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import TracebackType

    from tests.fakes.slack_messages import Ephemeral, Message

_T = TypeVar("_T")

# Arguments whose value is JSON; form-encoded requests carry them as JSON strings.
JSON_ARGS = frozenset({"blocks", "attachments", "chunks", "metadata", "view", "loading_messages"})
# Slack's body for server errors it does answer in JSON.
SERVER_ERRORS = {
    500: "fatal_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "request_timeout",
}
TIMEOUT_STATUS = 504
"""What a timed-out call is answered, once `hold_s` is over (its client has given up)."""
# Slack documents at most 5 posts to one response_url.
RESPONSE_URL_USES = 5

# Slack's rate tiers, in calls per minute per method (workspace and app): Tier 2 20+,
# Tier 3 50+, Tier 4 100+. chat.postMessage is counted per channel (PER_CHANNEL), about
# one a second.
TIER_2, TIER_3, TIER_4 = 20, 50, 100
PER_CHANNEL = frozenset({"chat.postMessage"})
SLACK_TIERS: dict[str, int] = {
    "chat.postMessage": 60,
    "chat.update": TIER_3,
    "chat.delete": TIER_3,
    "chat.postEphemeral": TIER_4,
    "chat.startStream": TIER_2,
    "chat.appendStream": TIER_4,
    "chat.stopStream": TIER_2,
    "reactions.add": TIER_3,
    "reactions.remove": TIER_2,
    "views.publish": TIER_4,
    "views.open": TIER_4,
    "agents.sessions.setStatus": TIER_3,
    "assistant.threads.setStatus": TIER_3,
    "conversations.replies": TIER_3,
    "conversations.info": TIER_3,
    "users.info": TIER_4,
    "auth.test": TIER_4,
}
RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class ApiCall:
    """One Web API request as the fake saw it, and the answer it got."""

    method: str
    args: Json
    token: str | None
    at: float
    """`time.monotonic()` when the request arrived."""
    status: int
    error: str | None
    http_verb: str
    response: Json
    """The JSON body the fake answered with (e.g. `response["ts"]` of a post)."""
    landed: bool = True
    """False if the call changed nothing: refused, or a fault that was not done."""

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


@dataclass(frozen=True)
class Fault:
    """A scripted failure for the next call of a method.

    `landed`: the call is done first, then answered with the failure (Slack posted the
    message but the answer was a 500, or came too late). `hold_s`: the answer waits that
    long, so a client with a shorter timeout gives up (a timeout, as the client sees it).
    """

    status: int
    error: str
    retry_after: int | None
    landed: bool = False
    hold_s: float = 0.0
    only: Callable[[Json], bool] | None = None
    """If set, the fault waits for a call whose arguments it accepts; others pass."""


@dataclass(frozen=True)
class ResponseUrlPost:
    """A post an app made to a `response_url` minted by `FakeSlack.new_response_url()`."""

    hook_id: str
    body: Json
    at: float
    accepted: bool


class FakeSlack:
    """Slack's Web API, Socket Mode and response URLs on one local aiohttp server."""

    def __init__(
        self,
        workspace: Workspace = DEFAULT_WORKSPACE,
        *,
        rate_limits: Mapping[str, int] | None = None,
        stream_ttl_s: float = STREAM_TTL_S,
        oauth: FakeOAuth | None = None,
    ) -> None:
        """`stream_ttl_s`: how long a stream takes appends (Slack: about 5 minutes); then
        appends and stops answer `message_not_in_streaming_state`."""
        self.workspace = workspace
        self.oauth = oauth or FakeOAuth()
        """Installs by OAuth, the tokens they hand out, rotation and revocation."""
        self._rate_limits = dict(rate_limits or {})
        self._recent: dict[tuple[str, str], deque[float]] = {}
        """Per rate-limited (method, channel), when its admitted calls arrived (the last
        minute); the channel is "" except for the methods limited per channel."""
        self.state = SlackState(workspace, stream_ttl_s=stream_ttl_s)
        self._changes = Changes()
        self.socket = FakeSocketMode(workspace, self._changes)
        self._calls: list[ApiCall] = []
        self._faults: dict[str, deque[Fault]] = {}
        self._unknown: set[str] = set()
        self._hooks: dict[str, list[ResponseUrlPost]] = {}
        self._hook_messages: dict[str, tuple[str, str]] = {}
        """The message each `response_url` was minted for (a button's message)."""
        self._closing = asyncio.Event()  # ends held (timed-out) answers at close
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/response_url/{hook_id}", self._response_url)
        app.router.add_get("/oauth/v2/authorize", self.oauth.authorize)
        app.router.add_get("/socket", self.socket.handle)
        # A short shutdown timeout: a client left connected must not stall teardown.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        if self._runner is None:
            return
        self._closing.set()
        await self.socket.disconnect_all()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeSlack is not started")
        return f"http://127.0.0.1:{self._port}/"

    @property
    def api_url(self) -> str:
        """The `base_url` for slack_sdk clients: `http://127.0.0.1:PORT/api/`."""
        return f"{self.url}api/"

    # -- scripting ---------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        status: int = 200,
        error: str | None = None,
        retry_after: int = 1,
        times: int = 1,
        landed: bool = False,
        only: Callable[[Json], bool] | None = None,
    ) -> None:
        """Make the next `times` calls of `method` fail; faults queue up in FIFO order.
        With `only`, the next `times` calls whose arguments it accepts (others pass).

        `status=429` answers like Slack's rate limiter (`Retry-After`, `ratelimited`),
        `status>=500` a server error, and the default `status=200` with `error` an
        `ok: false` answer such as `not_allowed_token_type`. With `landed=True` (5xx
        only) the call is done, then answered with the error: Slack acted, the client
        cannot know it.
        """
        if status == 200 and error is None:
            raise ValueError("fail_next with status 200 needs an error")
        if landed and status < 500:
            raise ValueError("only a server error (5xx) can hide a call that was done")
        if status == 429:
            error = error or "ratelimited"
        error = error or SERVER_ERRORS.get(status, "internal_error")
        fault = Fault(
            status, error, retry_after if status == 429 else None, landed=landed, only=only
        )
        self._faults.setdefault(method, deque()).extend([fault] * times)

    def time_out_next(
        self, method: str, *, hold_s: float, landed: bool = False, times: int = 1
    ) -> None:
        """Hold the answer to the next `times` calls of `method` for `hold_s` seconds
        (then answer 504), so a client with a shorter timeout gives up. With
        `landed=True` the call is done at once: only its answer is late. Queued with the
        `fail_next` faults, in FIFO order."""
        error = SERVER_ERRORS[TIMEOUT_STATUS]
        fault = Fault(TIMEOUT_STATUS, error, None, landed=landed, hold_s=hold_s)
        self._faults.setdefault(method, deque()).extend([fault] * times)

    def make_unknown(self, method: str) -> None:
        """From now on `method` answers `unknown_method` (a workspace without it)."""
        self._unknown.add(method)

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
        """Store a message that arrived before the test (a person's by default; the
        app's own with `user=workspace.bot_user_id` and its `metadata`; another app's
        or a webhook's with `app`, its fields); returns its ts."""
        return self.state.seed_message(
            channel,
            text,
            user=user,
            ts=ts,
            thread_ts=thread_ts,
            blocks=blocks,
            metadata=metadata,
            app=app,
        )

    def new_response_url(self, channel: str | None = None, ts: str | None = None) -> str:
        """A `response_url` for an interaction payload; posts to it are recorded. Minted
        for the message at `channel`/`ts` (the one a button was pressed on), a post with
        `replace_original` replaces that message's text and blocks, as in Slack."""
        hook_id = str(len(self._hooks) + 1)
        self._hooks[hook_id] = []
        if channel is not None and ts is not None:
            self._hook_messages[hook_id] = (channel, ts)
        return f"{self.url}response_url/{hook_id}"

    # -- reading -----------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[ApiCall]:
        return [call for call in self._calls if method is None or call.method == method]

    def message(self, channel: str, ts: str) -> Message:
        return self.state.message(channel, ts)

    def messages(self, channel: str) -> list[Message]:
        return self.state.messages(channel)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        return self.state.thread(channel, thread_ts)

    def ephemerals(self, channel: str) -> list[Ephemeral]:
        return self.state.ephemerals(channel)

    def response_url_posts(self, url: str | None = None) -> list[ResponseUrlPost]:
        hook_ids = [url.rstrip("/").rsplit("/", 1)[-1]] if url else list(self._hooks)
        return [post for hook_id in hook_ids for post in self._hooks.get(hook_id, [])]

    # -- waiting -----------------------------------------------------------------------

    async def wait_for_call(
        self,
        method: str,
        predicate: Callable[[ApiCall], bool] | None = None,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> ApiCall:
        """The first call of `method` matching `predicate`, recorded before or later."""

        def first_match() -> ApiCall | None:
            matches = (c for c in self._calls if c.method == method)
            return next((c for c in matches if predicate is None or predicate(c)), None)

        return await self._changes.until(
            first_match,
            timeout=timeout,
            describe=lambda: f"no matching {method} call; calls: {self._summary()}",
        )

    async def wait_until(
        self,
        predicate: Callable[[FakeSlack], _T],
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> _T:
        """Wait until `predicate(self)` is truthy; returns its value.

        Re-checked whenever the fake records something: an API call, a Socket Mode
        connection, ack or disconnect, or a response_url post.
        """
        return await self._changes.until(
            lambda: predicate(self),
            timeout=timeout,
            describe=lambda: f"predicate still false; calls: {self._summary()}",
        )

    def _summary(self) -> str:
        def one(c: ApiCall) -> str:
            hidden = " (done)" if c.error and c.landed else ""
            return f"{c.method}->{c.error or 'ok'}{hidden}"

        return ", ".join(one(c) for c in self._calls) or "none"

    # -- HTTP handlers -----------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        method = request.match_info["method"]
        fault: Fault | None = None
        try:
            args, token = await _read_args(request)
            fault = self._next_fault(method, args) or self._over_limit(method, args, arrived)
            landed = False
            if fault is None or fault.landed:
                status, body, headers = self._answer(method, args, token)
                landed = bool(body.get("ok"))
            if fault is not None:
                status, body, headers = _fault_answer(fault)
        except Refused as refused:
            args, token, landed = {}, None, False
            status, body, headers = 200, {"ok": False, "error": refused.error}, {}
        error = None if body.get("ok") else str(body.get("error"))
        call = ApiCall(method, args, token, arrived, status, error, request.method, body, landed)
        self._calls.append(call)
        # Record before answering: once the client's call returns, tests can see it.
        self._changes.notify()
        if fault is not None and fault.hold_s:
            # Slack being slow, not a test waiting: the client times out meanwhile.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(fault.hold_s):
                    await self._closing.wait()
        return web.json_response(body, status=status, headers=headers)

    def _over_limit(self, method: str, args: Json, now: float) -> Fault | None:
        """A 429 if `method` (in this channel, for PER_CHANNEL methods) already had its
        limit of calls in the last 60 seconds."""
        limit = self._rate_limits.get(method)
        if limit is None or method in self._unknown:
            return None
        channel = str(args.get("channel", "")) if method in PER_CHANNEL else ""
        recent = self._recent.setdefault((method, channel), deque())
        while recent and recent[0] <= now - RATE_WINDOW_S:
            recent.popleft()
        if len(recent) >= limit:
            retry_after = max(1, math.ceil(recent[0] + RATE_WINDOW_S - now))
            return Fault(429, "ratelimited", retry_after)
        recent.append(now)
        return None

    def rate_limited(self, method: str | None = None) -> list[ApiCall]:
        """The calls answered 429 (by the rate limits or by `fail_next`)."""
        return [call for call in self.calls(method) if call.status == 429]

    def _next_fault(self, method: str, args: Json) -> Fault | None:
        """The fault scripted for this call, if any (a missing method never consumes one)."""
        queued = self._faults.get(method)
        if method in self._unknown or not queued:
            return None
        only = queued[0].only
        return queued.popleft() if only is None or only(args) else None

    def _answer(
        self, method: str, args: Json, token: str | None
    ) -> tuple[int, Json, dict[str, str]]:
        unknown = {"ok": False, "error": "unknown_method", "req_method": method}
        if method in self._unknown or not self._implements(method):
            return 200, unknown, {}
        try:
            if method == "oauth.v2.access":  # the client's id and secret, not a token
                return 200, self.oauth.access(args), {}
            _check_token(method, token)
            assert token is not None
            self.oauth.check(method, token)
            if method == "auth.revoke":
                return 200, self.oauth.revoke_token(token), {}
            if method == "auth.test" and (ours := self.oauth.auth_test(token)) is not None:
                return 200, ours, {}
            if method == "apps.connections.open":
                ws_base = self.url.replace("http://", "ws://", 1)
                return 200, {"ok": True, "url": self.socket.issue_url(ws_base)}, {}
            acting = self.oauth.acting_as(token, self.workspace.team_id)
            if acting is None:
                return 200, self.state.call(method, args), {}
            # An installation's token: the call is that installation's bot user's.
            self.state.workspace = acting
            try:
                return 200, self.state.call(method, args), {}
            finally:
                self.state.workspace = self.workspace
        except Refused as refused:
            return 200, {"ok": False, "error": refused.error}, {}

    def _implements(self, method: str) -> bool:
        return method in _OWN_METHODS or self.state.handles(method)

    async def _response_url(self, request: web.Request) -> web.Response:
        hook_id = request.match_info["hook_id"]
        posts = self._hooks.get(hook_id)
        if posts is None:
            raise web.HTTPNotFound(text="no_such_url")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            raise web.HTTPBadRequest(text="invalid_payload") from None
        accepted = len(posts) < RESPONSE_URL_USES
        error = None if accepted else "used_url"
        if accepted and isinstance(body, dict) and limits.problems(body.get("blocks") or []):
            accepted, error = False, "invalid_blocks"
        message = self._hook_messages.get(hook_id)
        if accepted and message is not None and isinstance(body, dict):
            try:
                self.state.respond(*message, body)
            except Refused as refused:
                accepted, error = False, refused.error
        posts.append(ResponseUrlPost(hook_id, body, time.monotonic(), accepted))
        self._changes.notify()
        if error is not None:
            status = 404 if error == "used_url" else 400
            return web.json_response({"ok": False, "error": error}, status=status)
        return web.json_response({"ok": True})


_OWN_METHODS = frozenset({"apps.connections.open", "oauth.v2.access", "auth.revoke"})
"""Methods the fake answers itself, not through the workspace's state."""


def _fault_answer(fault: Fault) -> tuple[int, Json, dict[str, str]]:
    headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
    return fault.status, {"ok": False, "error": fault.error}, headers


async def _read_args(request: web.Request) -> tuple[Json, str | None]:
    """Merge query, form and JSON arguments, as Slack accepts all three."""
    args: Json = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise Refused("invalid_json") from exc
            args.update(body if isinstance(body, dict) else {})
        else:
            form = await request.post()
            for key, value in form.items():
                args[key] = value if isinstance(value, str) else getattr(value, "filename", "")
    for key in JSON_ARGS & args.keys():
        # slack_sdk sends `blocks` & co. as JSON strings when it form-encodes a call.
        if isinstance(args[key], str) and args[key][:1] in ("[", "{"):
            try:
                args[key] = json.loads(args[key])
            except json.JSONDecodeError as exc:
                raise Refused(f"invalid_{key}_format") from exc
    token = args.pop("token", None)
    authorization = request.headers.get("Authorization", "")
    if authorization.startswith("Bearer "):
        token = authorization.removeprefix("Bearer ")
    elif authorization.startswith("Basic "):  # oauth.v2.access: the client's id and secret
        user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
        args.setdefault("client_id", user)
        args.setdefault("client_secret", password)
    return args, token if isinstance(token, str) and token else None


def _check_token(method: str, token: str | None) -> None:
    """App-level (`xapp-`) tokens open sockets; everything else needs a bot/user token."""
    if token is None:
        raise Refused("not_authed")
    app_level = token.startswith("xapp-")
    if app_level != (method == "apps.connections.open"):
        raise Refused("not_allowed_token_type")
    if not app_level and not token.startswith(("xoxb-", "xoxp-")):
        raise Refused("invalid_auth")
