"""Fakes for anyone building on the core: a scripted chat model and the memory store.

:class:`ScriptedChatModel` answers from a script, streaming text word by word. A scripted
turn can ``hold`` until the test releases it, which keeps a stream "in flight" for as
long as a test needs, and it honours cancellation exactly like the real adapter: the
pending turn is abandoned and :attr:`ScriptedChatModel.closed` counts it.

For end-to-end tests prefer a real OpenAI-compatible server on loopback (the test suite
uses llmock); this fake is for unit tests and benchmarks that need no network.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_core.chat import ModelRequest, ModelResponse, ToolCall, Usage
from agent_core.errors import RetryableModelError
from agent_core.stores.memory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agent_core.ports import TextSink

__all__ = ["MemoryStore", "ScriptedChatModel", "ScriptedTurn"]


@dataclass
class ScriptedTurn:
    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    hold: asyncio.Event | None = None
    """If set, the turn streams its first word, then waits for this event."""
    fail: str | None = None
    """If set, the turn fails with a retryable error carrying this message."""


@dataclass
class ScriptedChatModel:
    """A :class:`~agent_core.ports.ChatModel` that plays :class:`ScriptedTurn` in order.

    When the script runs out it answers ``default_text``.
    """

    script: list[ScriptedTurn] = field(default_factory=list)
    default_text: str = "Done."
    requests: list[ModelRequest] = field(default_factory=list)
    closed: int = 0
    """Turns abandoned mid-stream by cancellation (an Abort or shutdown)."""

    def add(self, *turns: ScriptedTurn) -> ScriptedChatModel:
        self.script.extend(turns)
        return self

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        self.requests.append(request)
        turn = self.script.pop(0) if self.script else ScriptedTurn(self.default_text)
        if turn.fail is not None:
            raise RetryableModelError(turn.fail)
        words = _words(turn.text)
        try:
            for index, word in enumerate(words):
                on_text(word)
                if index == 0 and turn.hold is not None:
                    await turn.hold.wait()
            if not words and turn.hold is not None:
                await turn.hold.wait()
        except asyncio.CancelledError:
            self.closed += 1
            raise
        calls = tuple(
            ToolCall(id=f"call_{len(self.requests)}_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(turn.tool_calls)
        )
        finish = "tool_calls" if calls else "stop"
        usage = Usage(
            sum(len(str(m.get("content") or "")) for m in request.messages) // 4, len(words)
        )
        return ModelResponse(turn.text, calls, finish, usage)


def _words(text: str) -> list[str]:
    parts: Iterable[str] = text.split(" ")
    words = [p + " " for p in parts]
    if words:
        words[-1] = words[-1][:-1]
    return [w for w in words if w]
