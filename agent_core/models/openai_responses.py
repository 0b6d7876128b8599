"""The OpenAI Responses API adapter of :class:`agent_core.ports.ChatModel`
(``MODEL_API=openai-responses``).

One call is one streamed ``POST {base_url}/responses`` (``OPENAI_BASE_URL``, bearer key),
sent and read by :class:`agent_core.models.http_exchange.ModelEndpoint`, as the Chat Completions
adapter is, and for the same reason: measured, the ``openai`` SDK's Responses stream
costs 5 times the CPU per streamed event (:mod:`agent_core.models.http_exchange` has the figures).

The conversation (the core's chat messages) becomes ``input`` items: system and user
messages as messages of their role, an assistant message as its reasoning items (when
this API wrote them), its text and one ``function_call`` per tool call, a tool result as
a ``function_call_output``. Requests are not stored at OpenAI (``store: false``), so
reasoning travels in the conversation: it is asked for encrypted
(``reasoning.encrypted_content``) and sent back as it came. A model without reasoning
refuses that request (HTTP 400, "Encrypted content is not supported with this model"):
the adapter then asks again at once without it, and no longer asks for it. That is not
a retry of a failure (nothing was answered, nothing waits), so it stays here rather than
in the loop.

The stream's events map onto the core's turn: ``response.output_text.delta`` and
``response.refusal.delta`` are text; ``response.output_item.added`` starts a function
call, ``response.function_call_arguments.delta`` grows its arguments and
``response.output_item.done`` gives the finished item (reasoning items kept whole);
``response.completed`` / ``response.incomplete`` end the answer with its usage;
``response.failed`` and ``error`` raise the ModelError their code stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_core.models.http_exchange import (
    MAX_ARGUMENT_CHARS,
    HttpModel,
    arguments_too_long,
    event_object,
)
from agent_core.values.chat import (
    ModelRequest,
    ModelResponse,
    Reasoning,
    ToolCall,
    Usage,
    detail_tokens,
)
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    ModelError,
    RateLimited,
    RetryableModelError,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core.models.sse import ServerSentEvent
    from agent_core.ports import TextSink
    from agent_core.values.chat import ChatMessage, ToolSpec

__all__ = ["OpenAIResponsesModel"]

API = "openai-responses"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
_RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "overloaded"})


class OpenAIResponsesModel(HttpModel):
    """Streams responses from the OpenAI Responses API (or a server that speaks it).

    ``max_output_tokens`` caps each reply (None: the endpoint's own cap).
    """

    api = API

    path = "/responses"
    base_setting = "OPENAI_BASE_URL"
    default_base_url = DEFAULT_BASE_URL
    encrypted_reasoning = True
    """Whether reasoning is asked for encrypted (until the model refuses it)."""

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        body: dict[str, Any] = {
            "model": self.model,
            "input": input_items(request.messages),
            "stream": True,
            "store": False,
        }
        if self.max_output_tokens is not None:
            body["max_output_tokens"] = self.max_output_tokens
        if self.encrypted_reasoning:
            body["include"] = [ENCRYPTED_REASONING]
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
            if request.tool_choice:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        turn = _Turn(on_text)
        try:
            await self.endpoint.stream(body, turn)
        except FatalModelError as exc:
            if "include" not in body or not _no_encrypted_reasoning(exc):
                raise
            self.encrypted_reasoning = False  # this model has none: ask without, from now on
            del body["include"]
            turn = _Turn(on_text)
            await self.endpoint.stream(body, turn)
        return turn.response()


def _no_encrypted_reasoning(error: FatalModelError) -> bool:
    """The model refused the request for asking for encrypted reasoning."""
    text = str(error).lower()
    return error.status == 400 and ("encrypted content" in text or ENCRYPTED_REASONING in text)


def input_items(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation as the Responses API's ``input`` (see the module doc)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id") or "",
                    "output": _text(message.get("content")),
                }
            )
        elif role == "assistant":
            items.extend(Reasoning.items_for(message, API))
            if text := _text(message.get("content")):
                items.append({"role": "assistant", "content": text})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id") or "",
                        "name": function.get("name") or "",
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        else:
            items.append({"role": role or "user", "content": _text(message.get("content"))})
    return items


def _text(content: Any) -> str:
    """A message's content as text (chat content may be a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
        "strict": False,
    }


def _tool_choice(choice: str) -> str | dict[str, Any]:
    """``auto``, ``required`` and ``none`` as they are; any other word names the one tool."""
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "name": choice}


@dataclass
class _Call:
    id: str
    name: str
    args: list[str] = field(default_factory=list)
    size: int = 0
    done: str | None = None
    """The arguments as the finished item gave them."""


@dataclass
class _Turn:
    """Accumulates one streamed response from its events."""

    on_text: TextSink
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def take(self, event: ServerSentEvent) -> bool:
        data = event_object(event.data)
        kind = data.get("type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = data.get("delta")
            if isinstance(delta, str) and delta:
                self.text.append(delta)
                self.on_text(delta)
        elif kind == "response.function_call_arguments.delta":
            self._grow(data)
        elif kind == "response.output_item.added":
            self._start(data)
        elif kind == "response.output_item.done":
            self._finish_item(data)
        elif kind in ("response.completed", "response.incomplete"):
            self._end(data.get("response") or {})
            return True
        elif kind == "response.failed":
            response = data.get("response") or {}
            raise _failure(response.get("error") or {})
        elif kind == "error":
            raise _failure(data)
        return False

    def _start(self, data: dict[str, Any]) -> None:
        item = data.get("item") or {}
        if item.get("type") == "function_call":
            index = data.get("output_index") or 0
            self.calls[index] = _Call(item.get("call_id") or "", item.get("name") or "")

    def _grow(self, data: dict[str, Any]) -> None:
        call = self.calls.get(data.get("output_index") or 0)
        delta = data.get("delta")
        if call is None or not isinstance(delta, str):
            return
        call.size += len(delta)
        if call.size > MAX_ARGUMENT_CHARS:
            raise arguments_too_long(call.name)
        call.args.append(delta)

    def _finish_item(self, data: dict[str, Any]) -> None:
        item = data.get("item") or {}
        kind = item.get("type")
        if kind == "reasoning":
            self.reasoning.append(item)
        elif kind == "function_call":
            index = data.get("output_index") or 0
            call = self.calls.setdefault(index, _Call("", ""))
            call.id = item.get("call_id") or call.id
            call.name = item.get("name") or call.name
            arguments = item.get("arguments")
            if isinstance(arguments, str):
                if len(arguments) > MAX_ARGUMENT_CHARS:
                    raise arguments_too_long(call.name)
                call.done = arguments

    def _end(self, response: dict[str, Any]) -> None:
        usage = response.get("usage") or {}
        self.usage = Usage(
            usage.get("input_tokens") or 0,
            usage.get("output_tokens") or 0,
            detail_tokens(usage, "input_tokens_details", "cached_tokens"),
            detail_tokens(usage, "output_tokens_details", "reasoning_tokens"),
        )
        if response.get("status") == "incomplete":
            details = response.get("incomplete_details") or {}
            self.finish_reason = (
                "content_filter" if details.get("reason") == "content_filter" else "length"
            )
        else:
            self.finish_reason = "tool_calls" if self.calls else "stop"

    def response(self) -> ModelResponse:
        if self.finish_reason is None:
            # The nasty failure: a stream that ends cleanly but early. Never accept it.
            raise RetryableModelError("the model stream ended without a finish reason")
        calls = tuple(
            ToolCall(
                id=c.id or f"call_{i}",
                name=c.name,
                arguments=c.done if c.done is not None else "".join(c.args),
            )
            for i, c in sorted(self.calls.items())
        )
        reasoning = Reasoning(API, tuple(self.reasoning)) if self.reasoning else None
        return ModelResponse("".join(self.text), calls, self.finish_reason, self.usage, reasoning)


def _failure(error: dict[str, Any]) -> ModelError:
    """The ModelError for a response that failed mid-stream, by the error's code."""
    code = error.get("code")
    message = error.get("message") or "the response failed"
    described = f"the model endpoint failed: {message}"
    code = str(code) if code else None
    if code == "context_length_exceeded":
        return ContextOverflow(described, code=code)
    if code == "rate_limit_exceeded":
        return RateLimited(described, code=code)
    if code is None or code in _RETRYABLE_CODES:
        return RetryableModelError(described, code=code)
    if code.startswith("invalid"):
        return FatalModelError(described, code=code)
    return RetryableModelError(described, code=code)
