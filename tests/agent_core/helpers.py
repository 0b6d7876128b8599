"""Test helpers: an event recorder to wait on, and request inspection for llmock."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from llmock.journal import RequestRecord

    from agent_core.agent import Agent, AgentConfig
    from agent_core.events import RunEvent
    from agent_core.loop import Run
    from agent_core.stores.memory import MemoryStore
    from agent_core.tools import Tool

WAIT_S = 10.0


class AgentFactory(Protocol):
    def __call__(
        self,
        tools: Sequence[Tool] = (),
        config: AgentConfig | None = None,
        store: MemoryStore | None = None,
        idle_timeout_s: float = 10.0,
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
    return [t["function"]["name"] for t in body.get("tools", [])]


def system_messages(record: RequestRecord) -> list[str]:
    body: dict[str, Any] = record.body or {}
    return [m["content"] for m in body.get("messages", []) if m.get("role") == "system"]
