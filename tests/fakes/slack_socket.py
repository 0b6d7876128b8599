"""Socket Mode on the fake server: the WebSocket that `apps.connections.open` points to.

Slack's side of the protocol: greet each connection with `hello`, push envelopes
(`events_api`, `interactive`, `slash_commands`) and collect the client's acks
(`{"envelope_id", "payload"?}`). Slack picks a random open connection per envelope;
the fake goes round-robin in connection order so tests are reproducible while still
spreading envelopes over every connection.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from aiohttp import WSCloseCode, WSMsgType, web

if TYPE_CHECKING:
    from tests.fakes.slack_workspace import Json, Workspace
    from tests.fakes.waiting import Changes

EnvelopeType = Literal["events_api", "interactive", "slash_commands"]


@dataclass(frozen=True)
class SentEnvelope:
    """An envelope the fake pushed to connection number `connection`."""

    envelope_id: str
    type: EnvelopeType
    payload: Json
    connection: int
    at: float


@dataclass(frozen=True)
class Ack:
    """A client's acknowledgement of an envelope, with both ends' monotonic times."""

    envelope_id: str
    payload: Json | None
    connection: int
    sent_at: float
    at: float

    @property
    def latency(self) -> float:
        """Seconds from the envelope leaving the fake to its ack arriving (click→ack)."""
        return self.at - self.sent_at


class FakeSocketMode:
    """The Socket Mode endpoint of a `FakeSlack`; reach it as `slack.socket`."""

    def __init__(self, workspace: Workspace, changes: Changes) -> None:
        self._workspace = workspace
        self._changes = changes
        self._tickets: set[str] = set()
        self._open: dict[int, web.WebSocketResponse] = {}
        self._opened = 0
        self._turn = 0
        self._sent: dict[str, SentEnvelope] = {}
        self._acks: list[Ack] = []
        self.stray: list[Json | str] = []
        """Messages from clients that were not acks of an envelope the fake sent."""

    # -- reading -----------------------------------------------------------------------

    @property
    def connected(self) -> int:
        """How many client connections are open now."""
        return len(self._open)

    @property
    def connections_opened(self) -> int:
        """How many connections were ever accepted (grows on every reconnect)."""
        return self._opened

    @property
    def envelopes(self) -> list[SentEnvelope]:
        return list(self._sent.values())

    @property
    def acks(self) -> list[Ack]:
        return list(self._acks)

    # -- driving -----------------------------------------------------------------------

    async def wait_connected(self, count: int = 1, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        await self._changes.until(
            lambda: self.connected >= count,
            timeout=timeout,
            describe=lambda: f"{self.connected} Socket Mode connection(s) open, wanted {count}",
        )

    async def send_envelope(
        self,
        type_: EnvelopeType,
        payload: Json,
        *,
        accepts_response_payload: bool = False,
        retry_attempt: int = 0,
        retry_reason: str = "",
        envelope_id: str | None = None,
    ) -> str:
        """Push one envelope to the next open connection; returns its `envelope_id`."""
        if not self._open:
            raise RuntimeError("no Socket Mode client is connected; await wait_connected()")
        ids = sorted(self._open)
        connection = ids[self._turn % len(ids)]
        self._turn += 1
        envelope_id = envelope_id or str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "type": type_,
            "payload": payload,
            "accepts_response_payload": accepts_response_payload,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
        sent = SentEnvelope(envelope_id, type_, payload, connection, time.monotonic())
        self._sent[envelope_id] = sent
        await self._open[connection].send_str(json.dumps(envelope))
        return envelope_id

    async def wait_for_ack(self, envelope_id: str, timeout: float = 5.0) -> Ack:  # noqa: ASYNC109
        def first_ack() -> Ack | None:
            return next((ack for ack in self._acks if ack.envelope_id == envelope_id), None)

        return await self._changes.until(
            first_ack,
            timeout=timeout,
            describe=lambda: f"no ack for envelope {envelope_id}; acks: {self._acks}",
        )

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Warn every client, as Slack does before it recycles a connection."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-1"}}
        for socket in list(self._open.values()):
            await socket.send_str(json.dumps(message))

    async def disconnect_all(self) -> None:
        """Close every client connection from the server side (clients should reconnect)."""
        sockets = list(self._open.values())
        self._open.clear()
        self._changes.notify()
        for socket in sockets:
            await socket.close(code=WSCloseCode.GOING_AWAY, message=b"fake slack disconnect")

    # -- server side -------------------------------------------------------------------

    def issue_url(self, ws_base: str) -> str:
        """A fresh connection URL, as `apps.connections.open` returns it."""
        ticket = str(uuid.uuid4())
        self._tickets.add(ticket)
        return f"{ws_base}socket?ticket={ticket}&app_id={self._workspace.app_id}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("ticket") not in self._tickets:
            raise web.HTTPUnauthorized(text="unknown Socket Mode ticket")
        # autoping answers the SDK's keep-alive pings, as Slack's server does; the short
        # close timeout keeps teardown quick when a client never answers our close.
        socket = web.WebSocketResponse(autoping=True, timeout=1.0)
        await socket.prepare(request)
        self._opened += 1
        connection = self._opened
        await socket.send_str(json.dumps(self._hello(len(self._open) + 1)))
        self._open[connection] = socket
        self._changes.notify()
        try:
            async for message in socket:
                if message.type is WSMsgType.TEXT:
                    self._receive(connection, message.data)
        finally:
            self._open.pop(connection, None)
            self._changes.notify()
        return socket

    def _hello(self, num_connections: int) -> Json:
        return {
            "type": "hello",
            "num_connections": num_connections,
            "debug_info": {
                "host": "applink-1",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": self._workspace.app_id},
        }

    def _receive(self, connection: int, data: str) -> None:
        arrived = time.monotonic()
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            self.stray.append(data)
            return
        sent = self._sent.get(message.get("envelope_id", "")) if isinstance(message, dict) else None
        if sent is None:
            self.stray.append(message)
        else:
            payload = message.get("payload")
            self._acks.append(Ack(sent.envelope_id, payload, connection, sent.at, arrived))
        self._changes.notify()
