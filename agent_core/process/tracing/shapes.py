"""How the run's values become what a span carries: its ERROR status and ``error.type``,
W3C ``traceparent`` text and links, and (when content is captured) messages as JSON in
the conventions' shape, redacted."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agent_core.values.ended import EndedBecause
from agent_core.values.redact import redact

if TYPE_CHECKING:
    from collections.abc import Sequence

    from opentelemetry.trace import Link, Span

    from agent_core.values.chat import ChatMessage, ModelResponse

__all__ = [
    "ERRORS",
    "error_type",
    "fail",
    "input_json",
    "links_to",
    "output_json",
    "traceparent_of",
]

ERRORS = frozenset({EndedBecause.ERROR, EndedBecause.WORKER_LOST, EndedBecause.RATE_LIMIT})
"""Endings that set the root span's status to ERROR; every other ending leaves it unset."""


def fail(span: Span, error_type: str, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, redact(description)[:400]))


def error_type(error: Exception) -> str:
    """The conventions' ``error.type``: the HTTP status when there was one, else the class."""
    status = getattr(error, "status", None)
    return str(status) if isinstance(status, int) else type(error).__name__


def traceparent_of(span: Span) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def links_to(traceparents: Sequence[str]) -> list[Link]:
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    found = []
    for value in traceparents:
        parts = value.split("-")
        if len(parts) != 4:
            continue
        try:
            trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
        except ValueError:
            continue
        context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
        if context.is_valid:
            found.append(Link(context))
    return found


def text_of(message: ChatMessage) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content, default=str) if content is not None else ""


def input_json(messages: Sequence[ChatMessage]) -> str:
    shaped = [
        {"role": m.get("role", ""), "parts": [{"type": "text", "content": text_of(m)}]}
        for m in messages
    ]
    return redact(json.dumps(shaped, ensure_ascii=False))


def output_json(response: ModelResponse) -> str:
    parts: list[dict[str, Any]] = []
    if response.text:
        parts.append({"type": "text", "content": response.text})
    parts.extend(
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
        for c in response.tool_calls
    )
    shaped = [{"role": "assistant", "parts": parts, "finish_reason": response.finish_reason}]
    return redact(json.dumps(shaped, ensure_ascii=False))
