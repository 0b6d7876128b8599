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

from agent_core.stores.memory import MemoryStore
from agent_core.values.approvals import ApprovalDecision, ApprovalRequest, ApprovalStatus
from agent_core.values.chat import ModelRequest, ModelResponse, ToolCall, Usage
from agent_core.values.errors import RetryableModelError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agent_core.ports import TextSink

__all__ = ["HandApprovals", "MemoryStore", "ScriptedChatModel", "ScriptedTurn"]


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


class HandApprovals:
    """An :class:`~agent_core.ports.Approvals` decided by hand: a test (or a bench) waits
    for a request with :meth:`next_request` and answers it with :meth:`decide`. The first
    answer wins, as in a store's compare-and-set."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []
        self.decisions: dict[str, ApprovalDecision] = {}
        self._waiting: dict[str, asyncio.Future[ApprovalDecision]] = {}
        self._changed = asyncio.Event()

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        if request.id in self.decisions:
            return self.decisions[request.id]
        future = self._waiting.setdefault(request.id, asyncio.get_running_loop().create_future())
        if request not in self.requests:
            self.requests.append(request)
        self._changed.set()
        return await asyncio.shield(future)

    async def settle(self, request: ApprovalRequest, status: ApprovalStatus) -> ApprovalDecision:
        return self.decide(request.id, status)

    def decide(
        self, request_id: str, status: ApprovalStatus, by: str | None = None
    ) -> ApprovalDecision:
        """Decide ``request_id``; a second decision changes nothing and returns the first."""
        if request_id in self.decisions:
            return self.decisions[request_id]
        decision = ApprovalDecision(status, by)
        self.decisions[request_id] = decision
        future = self._waiting.get(request_id)
        if future is not None and not future.done():
            future.set_result(decision)
        self._changed.set()
        return decision

    def pending(self) -> list[ApprovalRequest]:
        return [r for r in self.requests if r.id not in self.decisions]

    async def next_request(self, count: int = 1, timeout_s: float = 10.0) -> ApprovalRequest:
        """The ``count``-th request (1-based), once it has been asked."""
        async with asyncio.timeout(timeout_s):
            while len(self.requests) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.requests[count - 1]
