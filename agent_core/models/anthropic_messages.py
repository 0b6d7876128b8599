"""The Anthropic Messages API adapter of :class:`agent_core.ports.ChatModel`
(``MODEL_API=anthropic``).

One call is one streamed ``POST {base_url}/v1/messages`` (``ANTHROPIC_BASE_URL``, the
``x-api-key`` header), sent and read by :class:`agent_core.models.http_exchange.ModelEndpoint`, as
the Chat Completions adapter is, and for the same reason: measured, the ``anthropic``
SDK's stream costs 4 times the CPU per streamed event (:mod:`agent_core.models.http_exchange` has
the figures).

The conversation (the core's chat messages) becomes the API's shape: every system
message is a text block of the top-level ``system`` prompt, in order (the API has no
system turn; our own instructions, the final turn's included, stay instructions rather
than becoming a user's words); an assistant message becomes its thinking blocks (when this API wrote
them, signatures included), its text and one ``tool_use`` block per tool call; tool
results become ``tool_result`` blocks of the next user turn, and consecutive user-side
messages share one turn, tool results first, as the API requires.

The stream's events map onto the core's turn: ``text_delta`` is text; a ``tool_use``
block and its ``input_json_delta`` pieces are a tool call; ``thinking`` and
``redacted_thinking`` blocks are kept whole to travel with the conversation; usage comes
from ``message_start`` (the prompt) and ``message_delta`` (the answer), the stop reason
from ``message_delta``; ``message_stop`` ends the answer. An ``error`` event
(``overloaded_error``, ``api_error``...) raises the ModelError it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from agent_core.models.http_exchange import (
    MAX_ARGUMENT_CHARS,
    HttpModel,
    arguments_too_long,
    event_object,
    refused,
)
from agent_core.values.chat import ModelRequest, ModelResponse, Reasoning, ToolCall, Usage
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    ModelError,
    RateLimited,
    RetryableModelError,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from agent_core.models.http_exchange import Refusal
    from agent_core.models.sse import ServerSentEvent
    from agent_core.ports import TextSink
    from agent_core.values.chat import ChatMessage

__all__ = ["AnthropicModel"]

API = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
_RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


class AnthropicModel(HttpModel):
    """Streams messages from the Anthropic API (or a server that speaks it).

    ``base_url`` defaults to ``ANTHROPIC_BASE_URL`` from the environment, then to
    Anthropic's; ``max_output_tokens`` caps each reply (``MODEL_MAX_OUTPUT_TOKENS``; the
    API requires a cap, :data:`DEFAULT_MAX_TOKENS` without one).
    """

    api = API

    path = "/v1/messages"
    base_setting = "ANTHROPIC_BASE_URL"
    default_base_url = DEFAULT_BASE_URL

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": VERSION}

    def refusal(self) -> Refusal:
        return _refused

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        system, messages = conversation(request.messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in request.tools
            ]
            if request.tool_choice:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        turn = _Turn(on_text)
        await self.endpoint.stream(body, turn)
        return turn.response()


def conversation(
    messages: Sequence[ChatMessage],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The system prompt (one text block per system message) and the messages of the
    Messages API (see the module doc)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            if text := _text(message.get("content")):
                system.append({"type": "text", "text": text})
        elif role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:
                turns.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id") or "",
                "content": _text(message.get("content")) or "(empty)",
            }
            _user_side(turns, block)
        elif text := _text(message.get("content")):
            _user_side(turns, {"type": "text", "text": text})
    return system, turns


def _assistant_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = list(Reasoning.items_for(message, API))
    if text := _text(message.get("content")):
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "",
                "name": function.get("name") or "",
                "input": _arguments(function.get("arguments")),
            }
        )
    return blocks


def _user_side(turns: list[dict[str, Any]], block: dict[str, Any]) -> None:
    """Add ``block`` to the user turn at the end, or start one."""
    if turns and turns[-1]["role"] == "user":
        turns[-1]["content"].append(block)
    else:
        turns.append({"role": "user", "content": [block]})


def _arguments(raw: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as the object the API wants (``{}`` if they are not)."""
    try:
        parsed = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def _tool_choice(choice: str) -> dict[str, Any]:
    """``auto``, ``required`` (any tool) and ``none``; any other word names the one tool."""
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    return {"type": "tool", "name": choice}


@dataclass
class _Block:
    """One content block as it streams: a tool call's pieces, or a thinking block."""

    kind: str
    start: dict[str, Any]
    pieces: list[str] = field(default_factory=list)
    size: int = 0
    signature: str = ""


@dataclass
class _Turn:
    """Accumulates one streamed message from its events."""

    on_text: TextSink
    text: list[str] = field(default_factory=list)
    blocks: dict[int, _Block] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ended: bool = False

    def take(self, event: ServerSentEvent) -> bool:
        data = event_object(event.data)
        kind = data.get("type")
        if kind == "content_block_delta":
            self._delta(data.get("index") or 0, data.get("delta") or {})
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") != "text":
                self.blocks[data.get("index") or 0] = _Block(block.get("type") or "", block)
        elif kind == "message_start":
            usage = (data.get("message") or {}).get("usage") or {}
            self.prompt_tokens = _prompt_tokens(usage)
            self.cached_tokens = _cached_tokens(usage)
            self.completion_tokens = usage.get("output_tokens") or 0
        elif kind == "message_delta":
            self._message_delta(data)
        elif kind == "message_stop":
            self.ended = True
            return True
        elif kind == "error":
            raise _stream_error(data.get("error") or {})
        return False

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if text:
                self.text.append(text)
                self.on_text(text)
            return
        block = self.blocks.get(index)
        if block is None:
            return
        if kind == "signature_delta":
            block.signature += delta.get("signature") or ""
            return
        piece = delta.get("partial_json") if kind == "input_json_delta" else delta.get("thinking")
        if isinstance(piece, str) and piece:
            block.size += len(piece)
            if block.size > MAX_ARGUMENT_CHARS:
                raise arguments_too_long(str(block.start.get("name") or block.kind))
            block.pieces.append(piece)

    def _message_delta(self, data: dict[str, Any]) -> None:
        reason = (data.get("delta") or {}).get("stop_reason")
        if reason:
            self.finish_reason = _STOP_REASONS.get(reason, reason)
        usage = data.get("usage") or {}
        if usage.get("output_tokens") is not None:
            self.completion_tokens = usage["output_tokens"]
        if usage.get("input_tokens") is not None:
            self.prompt_tokens = _prompt_tokens(usage)
            self.cached_tokens = _cached_tokens(usage)

    def response(self) -> ModelResponse:
        if not self.ended or self.finish_reason is None:
            # The nasty failure: a stream that ends cleanly but early. Never accept it.
            raise RetryableModelError("the model stream ended without a finish reason")
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        for index, block in sorted(self.blocks.items()):
            if block.kind == "tool_use":
                arguments = "".join(block.pieces) or "{}"
                calls.append(
                    ToolCall(
                        block.start.get("id") or f"call_{index}",
                        block.start.get("name") or "",
                        arguments,
                    )
                )
            elif block.kind == "thinking":
                thinking = "".join(block.pieces)
                reasoning.append(
                    {"type": "thinking", "thinking": thinking, "signature": block.signature}
                )
            elif block.kind == "redacted_thinking":
                reasoning.append(block.start)
        usage = Usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens)
        kept = Reasoning(API, tuple(reasoning)) if reasoning else None
        return ModelResponse("".join(self.text), tuple(calls), self.finish_reason, usage, kept)


def _prompt_tokens(usage: Mapping[str, Any]) -> int:
    """The prompt's tokens, those read from or written to the prompt cache included."""
    return sum(
        usage.get(k) or 0
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )


def _cached_tokens(usage: Mapping[str, Any]) -> int:
    """Of the prompt's tokens, those read from the prompt cache (Anthropic does not say
    how many of the reply's were thinking)."""
    value = usage.get("cache_read_input_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _stream_error(error: Mapping[str, Any]) -> ModelError:
    """The ModelError for an ``error`` event (the API gave up mid-stream)."""
    kind = str(error.get("type") or "api_error")
    message = error.get("message") or "An error occurred during streaming"
    described = f"the model endpoint failed: {message}"
    if kind == "rate_limit_error":
        return RateLimited(described, code=kind)
    if kind in _RETRYABLE_TYPES:
        return RetryableModelError(described, code=kind)
    if "prompt is too long" in str(message).lower():
        return ContextOverflow(described, code=kind)
    return FatalModelError(described, code=kind)


def _refused(status: int, headers: Mapping[str, str], text: str) -> ModelError:
    """:func:`agent_core.models.http_exchange.refused`, with Anthropic's error ``type`` as the code
    when the answer gives no ``code`` (``{"type": "error", "error": {"type", "message"}}``)."""
    error = refused(status, headers, text)
    if error.code is None:
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError:
            return error
        nested = body.get("error") if isinstance(body, dict) else None
        if isinstance(nested, dict) and isinstance(nested.get("type"), str):
            error.code = nested["type"]
    return error
