"""What crosses the chat model's port (:class:`agent_core.ports.ChatModel`): the
messages of a conversation, the tools the model is offered, the calls it makes, and one
turn's request and reply with the tokens it used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ChatMessage",
    "ModelRequest",
    "ModelResponse",
    "Reasoning",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "detail_tokens",
]

ChatMessage = dict[str, Any]
"""One message in OpenAI chat format; plain JSON so checkpoints can store it as is."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens spent: what the prompts held and what the model wrote, and, where the
    provider says, how many of those were read from its prompt cache and how many were
    the model's reasoning (parts of the two totals, not more tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Of ``prompt_tokens``: read from the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Of ``completion_tokens``: the model's reasoning."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


def detail_tokens(usage: Mapping[str, Any], details: str, name: str) -> int:
    """``usage[details][name]`` when it is a count of tokens, else 0: the endpoint's
    reply is not trusted to have the shape its API documents."""
    found = usage.get(details)
    value = found.get(name) if isinstance(found, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model emitted it; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()
    tool_choice: str | None = None


@dataclass(frozen=True, slots=True)
class Reasoning:
    """What a reply carries that only the API it came from can read back: the Responses
    API's reasoning items, Anthropic's thinking blocks. The conversation keeps it with
    the reply's assistant message (its ``reasoning`` key, :meth:`to_message`), and the
    adapter of that API sends it again with every later request, after a resume too;
    another API's adapter leaves it out."""

    api: str
    """The ``MODEL_API`` whose adapter wrote it."""
    items: tuple[Mapping[str, Any], ...]
    """The items as that API sent them (plain JSON)."""

    def to_message(self) -> dict[str, Any]:
        return {"api": self.api, "items": [dict(i) for i in self.items]}

    @staticmethod
    def items_for(message: ChatMessage, api: str) -> list[Any]:
        """The reasoning stored with ``message`` when ``api`` wrote it, else none."""
        stored = message.get("reasoning")
        if not isinstance(stored, dict) or stored.get("api") != api:
            return []
        items = stored.get("items")
        return list(items) if isinstance(items, list) else []


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One complete model turn, assembled from the stream."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage
    """The tokens of this reply alone (its prompt and its answer)."""
    reasoning: Reasoning | None = None
