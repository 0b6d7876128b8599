"""Drives the real Slack app as Slack does: signed HTTP posts (or Socket Mode envelopes)
in, Web API calls out to the local fake Slack, model calls to llmock.

Everything a test waits for is a condition re-checked on each recorded Slack call
(``FakeSlack.wait_until``), never a sleep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmock.scenarios import Reply, StreamFault, ToolCall

from bot.views.status import ACTION_ABORT, ACTION_STOP
from tests.fakes import slack_requests
from tests.fakes.slack_blocks import blocks_text
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    import aiohttp

    from bot.process.app import ThreadpilotApp
    from bot.runs.run_life import LiveRun
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

SECRET = "test-signing-secret"
WAIT_S = 15.0
LONG_TEXT = " ".join(f"word{i}" for i in range(60))
SHORT_TEXT = "Let me check the time for you, one moment."
"""Long enough to stall mid-stream, short enough for few appends (see stalled_answer)."""


def stalled_answer(
    seconds: float = 30.0, *, with_tool: bool = True, text: str = LONG_TEXT
) -> tuple[Reply, StreamFault]:
    """A model answer that streams three chunks, then stalls for ``seconds``, then goes
    on (to a ``current_time`` tool call, unless ``with_tool`` is False).

    A short ``text`` keeps the streamed appends within the workspace's burst, so the
    run's terminal write is not held up behind them.
    """
    calls = (ToolCall("current_time", {}),) if with_tool else ()
    return (
        Reply(text=text, tool_calls=calls),
        StreamFault("stall", after_chunks=3, stall_seconds=seconds),
    )


def buttons(message: Message) -> list[str]:
    """The action ids of the buttons a message shows now."""
    return buttons_in(message.blocks)


def buttons_in(blocks: list[Json] | None) -> list[str]:
    """The action ids of the buttons in ``blocks`` (a message's, or a call's argument)."""
    found: list[str] = []
    for block in blocks or []:
        for element in [*block.get("elements", []), block.get("accessory")]:
            if isinstance(element, dict) and element.get("type") == "button":
                found.append(str(element["action_id"]))
    return found


def block_text(message: Message) -> str:
    """All the text a person sees in a message's blocks, joined."""
    return blocks_text(message.blocks)


def run_id_of(message: Message) -> str:
    """The run id a status message carries in its buttons' ``value``."""
    for block in message.blocks or []:
        for element in block.get("elements", []):
            if isinstance(element, dict) and element.get("type") == "button":
                return str(element["value"])
    raise LookupError(f"message {message.ts} has no buttons: {message.blocks}")


def is_final(message: Message) -> bool:
    """The run's terminal message: its report, and no Stop or Abort any more (it may carry
    other controls: feedback, or Resume now / Don't resume while a resume is scheduled)."""
    live_controls = {ACTION_STOP, ACTION_ABORT} & set(buttons(message))
    return not live_controls and "Evidence" in block_text(message)


@dataclass
class Bot:
    app: ThreadpilotApp
    slack: FakeSlack
    http: aiohttp.ClientSession
    _seeded: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.app.port}"

    async def post(self, request: slack_requests.SignedRequest) -> aiohttp.ClientResponse:
        async with self.http.post(
            f"{self.url}/slack/events", data=request.body, headers=request.headers
        ) as response:
            await response.read()
            return response

    async def event(self, envelope: Json, **options: Any) -> int:
        """Deliver an event; a user's message is first stored in the fake, as in Slack."""
        self.seed_event(envelope)
        response = await self.post(slack_requests.event_request(envelope, SECRET, **options))
        return response.status

    def seed_event(self, envelope: Json) -> None:
        """Store the message an event is about in the fake (once), as Slack has it."""
        event = envelope["event"]
        if event.get("type") in ("message", "app_mention") and event["ts"] not in self._seeded:
            self._seeded.add(event["ts"])
            self.slack.seed_message(
                event["channel"],
                event["text"],
                user=event["user"],
                ts=event["ts"],
                thread_ts=event.get("thread_ts"),
            )

    async def socket_event(self, envelope: Json) -> str:
        """Deliver an event over Socket Mode; returns the envelope id to wait for its ack."""
        self.seed_event(envelope)
        return await self.slack.socket.send_envelope("events_api", envelope)

    async def get(self, path: str) -> int:
        """GET one of the app's own endpoints (``/healthz``, ``/readyz``); the status."""
        async with self.http.get(f"{self.url}{path}") as response:
            await response.read()
            return response.status

    async def mention(self, text: str, **options: Any) -> tuple[str, Message]:
        """@mention the app; return the thread ts and the status message it posted."""
        envelope = slack_requests.app_mention(
            f"<@{self.slack.workspace.bot_user_id}> {text}", **options
        )
        assert await self.event(envelope) == 200
        event = envelope["event"]
        thread_ts = str(event.get("thread_ts") or event["ts"])
        return thread_ts, await self.status_message(event["channel"], thread_ts)

    async def status_message(self, channel: str, thread_ts: str) -> Message:
        def find(slack: FakeSlack) -> Message | None:
            for message in slack.thread(channel, thread_ts):
                if message.is_bot and (ACTION_STOP in buttons(message) or is_final(message)):
                    return message
            return None

        found = await self.slack.wait_until(find, timeout=WAIT_S)
        assert found is not None
        return found

    async def click(self, message: Message, action_id: str, *, user: str = DEFAULT_USER) -> int:
        current = self.slack.message(message.channel, message.ts)
        response_url = self.slack.new_response_url(message.channel, message.ts)
        payload = slack_requests.click_button(
            current, action_id, user=user, response_url=response_url
        )
        response = await self.post(slack_requests.interaction_request(payload, SECRET))
        return response.status

    async def choose(
        self, message: Message, action_id: str, value: str, *, user: str = DEFAULT_USER
    ) -> int:
        """Choose ``value`` in an ``overflow`` menu the current version of ``message`` shows."""
        current = self.slack.message(message.channel, message.ts)
        return await self.choose_on(current, action_id, value, user=user)

    async def choose_on(
        self, version: Message, action_id: str, value: str, *, user: str = DEFAULT_USER
    ) -> int:
        """Choose ``value`` on this exact version of a message (an older render, maybe)."""
        response_url = self.slack.new_response_url(version.channel, version.ts)
        payload = slack_requests.choose_option(
            version, action_id, value, user=user, response_url=response_url
        )
        response = await self.post(slack_requests.interaction_request(payload, SECRET))
        return response.status

    async def submit(
        self, view: Json, values: dict[str, dict[str, str]], *, user: str = DEFAULT_USER
    ) -> aiohttp.ClientResponse:
        """Submit a modal the app opened, with ``values`` typed into its inputs."""
        payload = slack_requests.view_submission(view, values, user=user)
        return await self.post(slack_requests.interaction_request(payload, SECRET))

    async def click_version(
        self, version: Message, action_id: str, *, user: str = DEFAULT_USER, **options: Any
    ) -> int:
        """Press a button on this exact version of a message, as a client still showing
        an older render would (``options``: ``forged``/``stale`` signatures)."""
        response_url = self.slack.new_response_url(version.channel, version.ts)
        payload = slack_requests.click_button(
            version, action_id, user=user, response_url=response_url
        )
        response = await self.post(slack_requests.interaction_request(payload, SECRET, **options))
        return response.status

    def live_run(self, message: Message) -> LiveRun | None:
        """The supervisor's entry for the run a status message belongs to (None once ended)."""
        assert self.app.ctx is not None
        return self.app.ctx.supervisor.get(run_id_of(message))

    async def until(self, message: Message, predicate: Any) -> Message:
        """Wait until the stored version of ``message`` satisfies ``predicate``."""

        def check(slack: FakeSlack) -> Message | None:
            current = slack.message(message.channel, message.ts)
            return current if predicate(current) else None

        found = await self.slack.wait_until(check, timeout=WAIT_S)
        assert found is not None
        return found

    async def final(self, message: Message) -> Message:
        return await self.until(message, is_final)

    async def settled(self, message: Message) -> Message:
        """The status message once its run's session is done with Slack: the terminal
        write, then ``agents.sessions.setStatus`` "closed" (the session's last call)."""
        assert message.thread_ts is not None
        await self.slack.wait_for_call(
            "agents.sessions.setStatus",
            lambda c: (
                c.args.get("thread_ts") == message.thread_ts and c.args.get("status") == "closed"
            ),
            timeout=WAIT_S,
        )
        return self.slack.message(message.channel, message.ts)

    def ephemerals_for(self, user: str, channel: str) -> list[str]:
        return [e.text for e in self.slack.ephemerals(channel) if e.user == user]

    async def ephemerals(
        self, user: str, count: int = 1, channel: str = DEFAULT_CHANNEL
    ) -> list[str]:
        """Wait until ``user`` has at least ``count`` ephemeral replies; all of them."""

        def enough(slack: FakeSlack) -> list[str] | None:
            found = self.ephemerals_for(user, channel)
            return found if len(found) >= count else None

        found = await self.slack.wait_until(enough, timeout=WAIT_S)
        assert found is not None
        return found


__all__ = [
    "ACTION_ABORT",
    "ACTION_STOP",
    "SECRET",
    "Bot",
    "block_text",
    "buttons",
    "is_final",
    "run_id_of",
    "stalled_answer",
]
