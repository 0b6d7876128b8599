"""Drives the real Slack app as Slack does: signed HTTP posts (or Socket Mode envelopes)
in, Web API calls out to the local fake Slack, model calls to llmock.

Everything a test waits for is a condition re-checked on each recorded Slack call
(``FakeSlack.wait_until``), never a sleep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.views.status import ACTION_ABORT, ACTION_STOP
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    import aiohttp

    from bot.app import ThreadpilotApp
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

SECRET = "test-signing-secret"
WAIT_S = 15.0


def buttons(message: Message) -> list[str]:
    """The action ids of the buttons a message shows now."""
    found: list[str] = []
    for block in message.blocks or []:
        for element in [*block.get("elements", []), block.get("accessory")]:
            if isinstance(element, dict) and element.get("type") == "button":
                found.append(str(element["action_id"]))
    return found


def block_text(message: Message) -> str:
    """All the text a person sees in a message's blocks, joined."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text") and "text" in node:
                parts.append(str(node["text"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(message.blocks or [])
    return "\n".join(parts)


def is_final(message: Message) -> bool:
    return not buttons(message) and "Evidence" in block_text(message)


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
        response = await self.post(slack_requests.event_request(envelope, SECRET, **options))
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
        payload = slack_requests.click_button(current, action_id, user=user)
        response = await self.post(slack_requests.interaction_request(payload, SECRET))
        return response.status

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

    def ephemerals_for(self, user: str, channel: str) -> list[str]:
        return [e.text for e in self.slack.ephemerals(channel) if e.user == user]


__all__ = ["ACTION_ABORT", "ACTION_STOP", "SECRET", "Bot", "block_text", "buttons", "is_final"]
