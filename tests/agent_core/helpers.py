"""Test helpers: an event recorder to wait on, and request inspection for llmock, for
every model API's request shape."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from agent_core.models.api import ModelAPI

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Approvals
    from agent_core.run.agent import Agent
    from agent_core.run.config import AgentConfig
    from agent_core.run.loop import Run
    from agent_core.stores.memory import MemoryStore
    from agent_core.tools.toolbox import Tool
    from agent_core.values.events import RunEvent

WAIT_S = 10.0

FIRST_TEXT_CHUNK = {
    ModelAPI.OPENAI_CHAT: 1,  # the assistant role's chunk
    ModelAPI.OPENAI_RESPONSES: 4,  # created, in_progress, output_item.added, content_part
    ModelAPI.ANTHROPIC: 3,  # message_start, content_block_start, ping
}
"""The index of llmock's first text event in a streamed answer, per API: a stream fault
``after_chunks=FIRST_TEXT_CHUNK[api] + n`` comes after ``n`` pieces of text."""


def base_url_for(llm: LLMock, api: ModelAPI) -> str:
    """Where llmock serves ``api`` (the adapter appends the API's own path)."""
    return llm.base_url("anthropic" if api is ModelAPI.ANTHROPIC else "openai")


class AgentFactory(Protocol):
    def __call__(
        self,
        tools: Sequence[Tool] = (),
        config: AgentConfig | None = None,
        store: MemoryStore | None = None,
        idle_timeout_s: float = 10.0,
        approvals: Approvals | None = None,
    ) -> Agent: ...


class EventLog:
    """Records a run's events; ``await log.first(Type)`` waits for one without sleeping."""

    def __init__(self, run: Run) -> None:
        self.events: list[RunEvent] = []
        self._changed = asyncio.Event()
        run.events.add_listener(self._record)

    def _record(self, event: RunEvent) -> None:
        self.events.append(event)
        self._changed.set()

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    async def first(self, kind: type[Any], where: Callable[[Any], bool] = lambda e: True) -> Any:
        async with asyncio.timeout(WAIT_S):
            while True:
                for event in self.events:
                    if isinstance(event, kind) and where(event):
                        return event
                self._changed.clear()
                await self._changed.wait()


def offered_tools(record: RequestRecord) -> list[str]:
    body: dict[str, Any] = record.body or {}
    return [t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools", [])]


def system_messages(record: RequestRecord) -> list[str]:
    """The request's system messages (Anthropic's: the blocks of its system prompt)."""
    body: dict[str, Any] = record.body or {}
    if "system" in body:
        return [block["text"] for block in body["system"]]
    turns = body.get("messages", body.get("input", []))
    return [m["content"] for m in turns if m.get("role") == "system"]


def tool_results(record: RequestRecord) -> list[str]:
    """The tool results the request sends back, in order, whatever the API's shape."""
    body: dict[str, Any] = record.body or {}
    if "input" in body:  # Responses
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    results: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") == "tool":  # Chat Completions
            results.append(message["content"])
        elif isinstance(message.get("content"), list):  # Anthropic's user turns
            results.extend(
                b["content"] for b in message["content"] if b.get("type") == "tool_result"
            )
    return results
