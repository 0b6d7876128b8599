"""The OpenAI Chat Completions adapter of :class:`agent_core.ports.ChatModel`.

Works with any OpenAI-compatible endpoint (``OPENAI_BASE_URL``). One call is one streamed
turn: text deltas go to the caller as they arrive, tool-call fragments are reassembled,
and usage is read from the final chunk.

The SDK's own retries are off (``max_retries=0``): the loop retries, because only the loop
can make a retry wait interruptible by Stop. Every failure leaves here as a
:class:`agent_core.errors.ModelError`.

Closing: the stream is entered with ``async with``, so whatever ends the call (the last
chunk, an error, an idle timeout or an Abort's cancellation) closes the HTTP response
before the exception propagates. The server sees the connection go at that moment.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import openai

from agent_core.errors import (
    ContextOverflow,
    FatalModelError,
    ModelError,
    RateLimited,
    RetryableModelError,
)
from agent_core.outcomes import Usage
from agent_core.ports import ModelRequest, ModelResponse, TextSink, ToolCall

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

__all__ = ["OpenAIChatModel"]

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


class OpenAIChatModel:
    """Streams chat completions from an OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        idle_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.model = model
        self.idle_timeout_s = idle_timeout_s
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            # The read timeout is a backstop; the idle timeout below is the real limit.
            timeout=openai.Timeout(idle_timeout_s * 2, connect=connect_timeout_s),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = [t.to_openai() for t in request.tools]
            if request.tool_choice:
                kwargs["tool_choice"] = request.tool_choice
        try:
            stream = await self._client.chat.completions.create(**kwargs)
        except openai.APIError as exc:
            raise _translate(exc) from exc
        turn = _Turn()
        async with stream:
            try:
                async for chunk in _idle_limited(stream, self.idle_timeout_s):
                    turn.absorb(chunk, on_text)
            except openai.APIError as exc:
                raise _translate(exc) from exc
            except (ValueError, UnicodeDecodeError) as exc:
                # A chunk that is not JSON: the stream is corrupt, the answer unusable.
                raise RetryableModelError(
                    f"the model stream sent a malformed chunk: {exc}"
                ) from exc
        return turn.response()


async def _idle_limited(stream: AsyncIterator[Any], idle_s: float) -> AsyncIterator[Any]:
    """Yield chunks, failing if the stream is silent for longer than ``idle_s``."""
    iterator = aiter(stream)
    while True:
        try:
            async with asyncio.timeout(idle_s):
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError as exc:
            raise RetryableModelError(f"the model stream stalled: no data for {idle_s:g}s") from exc
        yield chunk


@dataclass
class _Turn:
    """Accumulates one streamed turn."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def absorb(self, chunk: Any, on_text: TextSink) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
                on_text(delta.content)
            for fragment in (delta.tool_calls if delta is not None else None) or ():
                call = self.calls.setdefault(fragment.index, {"id": "", "name": "", "args": ""})
                if fragment.id:
                    call["id"] = fragment.id
                if fragment.function is not None:
                    call["name"] += fragment.function.name or ""
                    call["args"] += fragment.function.arguments or ""
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def response(self) -> ModelResponse:
        if self.finish_reason is None:
            # The nasty failure: a stream that ends cleanly but early. Never accept it.
            raise RetryableModelError("the model stream ended without a finish reason")
        calls = tuple(
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["args"])
            for i, c in sorted(self.calls.items())
        )
        return ModelResponse("".join(self.text), calls, self.finish_reason, self.usage)


def _translate(exc: openai.APIError) -> ModelError:
    """Map an SDK error to the core's taxonomy: retryable, context, or fatal."""
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return RetryableModelError(f"could not reach the model endpoint: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _error_message(exc)
        code = _error_code(exc)
        if status == 429:
            return RateLimited(message, retry_after=retry_after_s(exc.response.headers), code=code)
        if status >= 500 or status in _RETRYABLE_STATUS:
            return RetryableModelError(message, status=status, code=code)
        if _is_context_overflow(exc):
            return ContextOverflow(message, status=status, code=code)
        return FatalModelError(message, status=status, code=code)
    return RetryableModelError(f"the model endpoint failed: {exc}")


def _error_message(exc: openai.APIStatusError) -> str:
    return f"model endpoint answered HTTP {exc.status_code}: {exc.message}"


def _error_code(exc: openai.APIStatusError) -> str | None:
    """The provider's error code (``body.code`` or ``body.error.code``), if any."""
    body = exc.body if isinstance(exc.body, dict) else {}
    nested = body.get("error")
    code = body.get("code") or (nested.get("code") if isinstance(nested, dict) else None)
    return str(code) if code else None


def _is_context_overflow(exc: openai.APIStatusError) -> bool:
    code = _error_code(exc)
    return code == "context_length_exceeded" or "context length" in str(exc.message).lower()


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())
