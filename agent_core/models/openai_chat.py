"""The OpenAI Chat Completions adapter of :class:`agent_core.ports.ChatModel`
(``MODEL_API=openai-chat``).

Works with any OpenAI-compatible endpoint (``OPENAI_BASE_URL``): OpenAI, Azure OpenAI's
``/openai/v1`` endpoint, a local server (vLLM, Ollama, llama.cpp). One call is one
streamed turn: text deltas go to the caller as they arrive, tool-call fragments are
reassembled, and usage is read from the final chunk.

The request is ours: ``POST {base_url}/chat/completions`` (bearer key, JSON body,
``stream: true`` with usage), sent and read by
:class:`agent_core.models.http_exchange.ModelEndpoint`
(pooled connections, paced reads, the idle and reply limits, hanging up at once). Each
chunk is parsed with ``orjson.loads`` into plain dicts. The OpenAI SDK cost more CPU per
streamed chunk than everything else a chunk does: first its typed chunk objects, then,
once those were gone, the layers between its HTTP client and the socket.

Nothing retries here: the loop does, because only the loop can make a retry wait
interruptible by Stop. Every failure leaves here as a :class:`agent_core.values.errors.ModelError`
(the mapping is in :func:`agent_core.models.http_exchange.refused` for answers with an error status,
and in :class:`agent_core.models.http_exchange.ModelEndpoint` for what happens on the wire).

The conversation is already in this API's shape (the core keeps it so); reasoning that
another API's adapter stored with an assistant message (its ``reasoning`` key) is left
out of the request: this API has no place for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_core.models.http_exchange import (
    MAX_ARGUMENT_CHARS,
    READS_PER_S,
    HttpModel,
    arguments_too_long,
    event_object,
)
from agent_core.values.chat import ModelRequest, ModelResponse, ToolCall, Usage, detail_tokens
from agent_core.values.errors import RetryableModelError

if TYPE_CHECKING:
    from agent_core.models.sse import ServerSentEvent
    from agent_core.ports import TextSink
    from agent_core.values.chat import ChatMessage

__all__ = ["READS_PER_S", "OpenAIChatModel"]

API = "openai-chat"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIChatModel(HttpModel):
    """Streams chat completions from an OpenAI-compatible endpoint.

    ``base_url`` defaults to ``OPENAI_BASE_URL`` from the environment, then to OpenAI's.
    ``reads_per_s`` paces the reads of many open streams (0: every piece is read as it
    arrives, however many are open); ``reply_timeout_s`` bounds one reply however busy
    its stream keeps (see :mod:`agent_core.models.http_exchange`); ``max_output_tokens`` caps each
    reply (``max_completion_tokens``; None: the endpoint's own cap).
    """

    api = API

    path = "/chat/completions"
    base_setting = "OPENAI_BASE_URL"
    default_base_url = DEFAULT_BASE_URL

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_sendable(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.max_output_tokens is not None:
            body["max_completion_tokens"] = self.max_output_tokens
        if request.tools:
            body["tools"] = [t.to_openai() for t in request.tools]
            if request.tool_choice:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        turn = _Turn(on_text)
        await self.endpoint.stream(body, turn)
        return turn.response()


def _sendable(message: ChatMessage) -> ChatMessage:
    """The message without what only another API can use (see the module doc)."""
    if "reasoning" not in message:
        return message
    return {k: v for k, v in message.items() if k != "reasoning"}


def _tool_choice(choice: str) -> str | dict[str, Any]:
    """``auto``, ``required`` and ``none`` as they are; any other word names the one tool."""
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _chunk(data: bytes) -> dict[str, Any]:
    """One event's JSON, or the ModelError it stands for."""
    chunk = event_object(data)
    error = chunk.get("error")
    if error:
        # The provider gave up mid-stream (it can no longer change the HTTP status).
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = "An error occurred during streaming"
        raise RetryableModelError(f"the model endpoint failed: {message}")
    return chunk


@dataclass
class _Call:
    """One tool call as its fragments arrive (the arguments kept as pieces: joined once)."""

    id: str = ""
    name: str = ""
    args: list[str] = field(default_factory=list)
    size: int = 0


@dataclass
class _Turn:
    """Accumulates one streamed turn from its chunks (the JSON objects, as dicts)."""

    on_text: TextSink
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def take(self, event: ServerSentEvent) -> bool:
        if event.data[:6] == b"[DONE]":
            return True
        self.absorb(_chunk(event.data))
        return False

    def absorb(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage(
                usage.get("prompt_tokens") or 0,
                usage.get("completion_tokens") or 0,
                detail_tokens(usage, "prompt_tokens_details", "cached_tokens"),
                detail_tokens(usage, "completion_tokens_details", "reasoning_tokens"),
            )
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            if delta:
                # A refusal is the model's answer too: the person reads it as its text.
                content = delta.get("content") or delta.get("refusal")
                if content:
                    self.text.append(content)
                    self.on_text(content)
                fragments = delta.get("tool_calls")
                if fragments:
                    self._absorb_calls(fragments)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason

    def _absorb_calls(self, fragments: list[dict[str, Any]]) -> None:
        for fragment in fragments:
            call = self.calls.get(fragment.get("index") or 0)
            if call is None:
                call = self.calls[fragment.get("index") or 0] = _Call()
            if fragment.get("id"):
                call.id = fragment["id"]
            function = fragment.get("function")
            if function:
                call.name += function.get("name") or ""
                piece = function.get("arguments")
                if piece:
                    call.size += len(piece)
                    if call.size > MAX_ARGUMENT_CHARS:
                        raise arguments_too_long(call.name)
                    call.args.append(piece)

    def response(self) -> ModelResponse:
        if self.finish_reason is None:
            # The nasty failure: a stream that ends cleanly but early. Never accept it.
            raise RetryableModelError("the model stream ended without a finish reason")
        calls = tuple(
            ToolCall(id=c.id or f"call_{i}", name=c.name, arguments="".join(c.args))
            for i, c in sorted(self.calls.items())
        )
        return ModelResponse("".join(self.text), calls, self.finish_reason, self.usage)
