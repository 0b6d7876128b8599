"""A run's spans: the root, a chat span per model request, a tool span per call, the
approval wait, root events, and the spans a worker that does not run a run links to it.

What a run leaves (docs/operations.md lists every attribute)::

    invoke_agent threadpilot          INTERNAL, one per run (a sub-agent's under its
    ├─ chat {model}                   CLIENT, one per model request  delegate call)
    ├─ execute_tool {name}            INTERNAL, one per tool call
    │  ├─ threadpilot.approval        the wait for a person's decision, if the call needs one
    │  └─ invoke_agent threadpilot    a sub-agent, when the tool is ``delegate``
    └─ events: stop, abort, shutdown, stop honoured, guidance delivered, retry,
       budget spent, context full

Why a run ended is ours (there is no agent-level finish reason in the conventions yet):
``threadpilot.run.ended_because``, ``threadpilot.run.exit_code`` and
``threadpilot.run.outcome``. Stop, Abort, a shutdown, a spent budget and the loop's limits
leave the status unset; a failure, a lost worker and a rate limit that ended the run set
ERROR with ``error.type``.

Spans are ended by the loop itself, in its ``finally`` (and the chat span as the
``with`` around the model call unwinds): the OpenTelemetry API records only
``Exception``, never ``CancelledError``, and an Abort cancels from another task, so
nothing is ended inside the streaming generator. Without tracing every
:class:`RunTrace` is :data:`NO_TRACE`, whose methods do nothing.

Message content is recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
asks for it, and then passed through :func:`agent_core.values.redact.redact` as logs are.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from agent_core.process.tracing.setup import AGENT_NAME, state
from agent_core.process.tracing.shapes import (
    ERRORS,
    error_type,
    fail,
    input_json,
    links_to,
    output_json,
    traceparent_of,
)
from agent_core.values.ended import EndedBecause
from agent_core.values.redact import redact

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from agent_core.values.budget import Exhaustion
    from agent_core.values.chat import ChatMessage, ModelResponse, ToolCall
    from agent_core.values.outcomes import RunResult
    from agent_core.values.records import ThreadKey
    from agent_core.values.stop import StopReason, StopRequest

__all__ = [
    "NO_TRACE",
    "ChatSpan",
    "RunTrace",
    "record_elsewhere",
    "run_trace",
    "tool_span",
]


_PROVIDERS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
"""``MODEL_API`` → ``gen_ai.provider.name``."""

tool_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "threadpilottool_span", default=None
)
"""The ``execute_tool`` span of the call running in this task: a sub-agent started by a
``delegate`` call puts its root span under it."""


def record_elsewhere(
    name: str,
    traceparent: str | None,
    attributes: Mapping[str, str | int | bool],
    *,
    ended_because: EndedBecause | None = None,
) -> None:
    """One short span of its own, linked to a run's trace (``traceparent``, from its
    row): what a worker that does not run it did to it (a Stop it took, the ending of a
    lost worker's run, ``ended_because``: ERROR as a run's root would be). Nothing when
    untraced, or the run was."""
    tracer = state.tracer
    if tracer is None or traceparent is None:
        return
    from opentelemetry import context

    span = tracer.start_span(
        name, context=context.Context(), attributes=dict(attributes), links=links_to([traceparent])
    )
    if ended_because is not None:
        span.set_attribute("threadpilot.run.ended_because", ended_because.value)
        if ended_because in ERRORS:
            fail(span, ended_because.value, ended_because.value)
    span.end()


class ChatSpan:
    """One model request's span; the no-op one is :data:`_NO_CHAT`. Used as ``with``:
    leaving on an exception records it (a cancellation ends it, not as an error)."""

    def answered(self, response: ModelResponse) -> None:
        """The request got its reply."""

    def __enter__(self) -> ChatSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NO_CHAT = ChatSpan()


class RunTrace:
    """A run's spans. This base is the no-op: every method does nothing (:data:`NO_TRACE`)."""

    active = False

    @property
    def traceparent(self) -> str | None:
        """The root span's context as a W3C ``traceparent`` (None: untraced)."""
        return None

    def start(self) -> None:
        """The run began: open its root span."""

    def chat(
        self, messages: Sequence[ChatMessage], *, turn: int, final: bool, reason: str | None
    ) -> ChatSpan:
        return _NO_CHAT

    def tool_started(self, call: ToolCall) -> None:
        """Open the call's span; sets it as this task's tool span (for a sub-agent)."""

    def tool_ended(self, call: ToolCall, ok: bool) -> None:
        """Close the call's span."""

    def stop_requested(self, request: StopRequest) -> None:
        """An event on the root: ``threadpilot.stop``, ``.abort`` or ``.shutdown``."""

    def stop_honoured(self, reason: StopReason) -> None:
        """The run acted on its stop request."""

    def guidance_delivered(self, turn: int, count: int) -> None:
        """Replies went out with the request of ``turn``."""

    def retrying(self, attempt: int, delay_s: float, error: Exception) -> None:
        """A failed model request is retried after ``delay_s``."""

    def budget_spent(self, spent: Exhaustion) -> None:
        """The request's budget ran out (the final turn follows)."""

    def context_full(self, window: int | None, tokens: int | None) -> None:
        """The conversation filled the context window (or overflowed it)."""

    def end(self, result: RunResult | None) -> None:
        """Close every span still open, then the root, with how the run ended."""


NO_TRACE = RunTrace()


def run_trace(
    *,
    run_id: str,
    thread: ThreadKey,
    model: object,
    parent: RunTrace | None,
    links: Sequence[str] = (),
) -> RunTrace:
    """The trace of a new run: :data:`NO_TRACE` unless tracing is on. ``model``: the
    run's chat model (its ``api`` and ``model`` name the provider and the model);
    ``parent``: the parent run's trace for a sub-agent; ``links``: W3C ``traceparent``
    values of traces this run continues (a resumed run links to its first one)."""
    tracer = state.tracer
    if tracer is None:
        return NO_TRACE
    return _RunTrace(
        tracer,
        run_id=run_id,
        thread=thread,
        model=model,
        parent=parent if isinstance(parent, _RunTrace) else None,
        links=links,
        capture=state.capture,
    )


class _OpenChat(ChatSpan):
    def __init__(self, owner: _RunTrace, span: Span) -> None:
        self._owner = owner
        self._span = span

    def answered(self, response: ModelResponse) -> None:
        usage = response.usage
        self._span.set_attributes(
            {
                "gen_ai.response.finish_reasons": [response.finish_reason],
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
            }
        )
        if usage.cached_tokens:
            self._span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens)
        if self._owner.capture:
            self._span.set_attribute("gen_ai.output.messages", output_json(response))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            fail(self._span, error_type(error), str(error))
        elif error is not None:  # cancelled (Abort, shutdown): ended, not an error
            self._span.set_attribute("threadpilot.cancelled", True)
        self._owner.closed(self._span)
        self._span.end()


class _RunTrace(RunTrace):
    active = True

    def __init__(
        self,
        tracer: Tracer,
        *,
        run_id: str,
        thread: ThreadKey,
        model: object,
        parent: _RunTrace | None,
        links: Sequence[str],
        capture: bool,
    ) -> None:
        self._tracer = tracer
        self.capture = capture
        self._run_id = run_id
        self._thread = thread
        self._model = str(getattr(model, "model", "") or "")
        provider = _PROVIDERS.get(str(getattr(model, "api", "")), "")
        self._model_attributes = {
            **({"gen_ai.provider.name": provider} if provider else {}),
            **({"gen_ai.request.model": self._model} if self._model else {}),
        }
        """Said on the root and on every chat span: worked out once."""
        self._chat_name = f"chat {self._model or 'model'}"
        self._parent = parent
        self._links = links
        self._root: Span | None = None
        self._root_context: Context | None = None
        self._traceparent: str | None = None
        self._open: list[Span] = []
        """Child spans not ended yet (a cancellation can leave some): ended by :meth:`end`."""
        self._tools: dict[str, Span] = {}

    # -- the root ----------------------------------------------------------------------

    def start(self) -> None:
        from opentelemetry import context, trace

        if self._parent is None:
            parent_context: Context = context.Context()  # a new trace, whatever is current
        else:
            above = tool_span.get() or self._parent._root
            parent_context = trace.set_span_in_context(above) if above else context.Context()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": str(self._thread),
            "threadpilot.run.id": self._run_id,
        }
        attributes.update(self._model_attributes)
        self._root = self._tracer.start_span(
            f"invoke_agent {AGENT_NAME}",
            context=parent_context,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            links=links_to(self._links),
        )
        self._traceparent = traceparent_of(self._root)
        self._root_context = trace.set_span_in_context(self._root)

    def end(self, result: RunResult | None) -> None:
        root = self._root
        if root is None:
            return
        self._root = None
        for span in reversed(self._open):
            span.set_attribute("threadpilot.cancelled", True)
            span.end()
        self._open.clear()
        self._tools.clear()
        if result is None:  # cancelled before its ending could be recorded
            root.set_attribute("threadpilot.run.ended_because", EndedBecause.SHUTDOWN.value)
            root.end()
            return
        usage = result.usage
        root.set_attributes(
            {
                "threadpilot.run.ended_because": result.ended_because.value,
                "threadpilot.run.exit_code": result.exit_code.value,
                "threadpilot.run.outcome": result.outcome.value,
                "threadpilot.run.turns": result.turns,
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
            }
        )
        if result.stop_reason is not None:
            root.set_attribute("threadpilot.run.stop_reason", result.stop_reason.value)
        if result.ended_because in ERRORS:
            fail(root, result.ended_because.value, result.error or result.ended_because.value)
        root.end()

    @property
    def traceparent(self) -> str | None:
        """The root span's context as a W3C ``traceparent`` (stored with the run)."""
        return self._traceparent

    # -- children ----------------------------------------------------------------------

    def chat(
        self, messages: Sequence[ChatMessage], *, turn: int, final: bool, reason: str | None
    ) -> ChatSpan:
        from opentelemetry import trace

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "threadpilot.turn": turn,
            "threadpilot.turn.final": final,
        }
        attributes.update(self._model_attributes)
        if reason is not None:
            attributes["threadpilot.turn.final_reason"] = reason
        if self.capture:
            attributes["gen_ai.input.messages"] = input_json(messages)
        span = self._child(self._chat_name, trace.SpanKind.CLIENT, attributes)
        return _OpenChat(self, span)

    def tool_started(self, call: ToolCall) -> None:
        from opentelemetry import trace

        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
        }
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = redact(call.arguments)
        span = self._child(f"execute_tool {call.name}", trace.SpanKind.INTERNAL, attributes)
        self._tools[call.id] = span
        tool_span.set(span)

    def tool_ended(self, call: ToolCall, ok: bool) -> None:
        span = self._tools.pop(call.id, None)
        if span is None:
            return
        if not ok:
            fail(span, "tool_error", f"{call.name} returned an error")
        self.closed(span)
        span.end()

    def stop_requested(self, request: StopRequest) -> None:
        self._event(
            f"threadpilot.{request.reason.value}",
            {
                "threadpilot.stop.requested_by": request.requested_by,
                "threadpilot.stop.source": request.source.value,
            },
        )

    def stop_honoured(self, reason: StopReason) -> None:
        self._event("threadpilot.stop_honoured", {"threadpilot.stop.reason": reason.value})

    def guidance_delivered(self, turn: int, count: int) -> None:
        self._event(
            "threadpilot.guidance_delivered",
            {"threadpilot.turn": turn, "threadpilot.guidance.count": count},
        )

    def retrying(self, attempt: int, delay_s: float, error: Exception) -> None:
        self._event(
            "threadpilot.retry",
            {
                "threadpilot.retry.attempt": attempt,
                "threadpilot.retry.delay_s": delay_s,
                "error.type": error_type(error),
            },
        )

    def budget_spent(self, spent: Exhaustion) -> None:
        self._event(
            "threadpilot.budget_spent",
            {
                "threadpilot.budget": spent.kind.value,
                "threadpilot.budget.limit": spent.limit,
                "threadpilot.budget.spent": spent.spent,
            },
        )

    def context_full(self, window: int | None, tokens: int | None) -> None:
        attributes = {"threadpilot.context.window": window or 0}
        if tokens is not None:
            attributes["threadpilot.context.tokens"] = tokens
        self._event("threadpilot.context_full", attributes)

    def _event(self, name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
        if self._root is not None:
            self._root.add_event(name, dict(attributes))

    def closed(self, span: Span) -> None:
        """``span`` ended: no longer ours to end."""
        try:
            self._open.remove(span)
        except ValueError:
            pass

    # -- helpers -----------------------------------------------------------------------

    def _child(self, name: str, kind: Any, attributes: Mapping[str, Any]) -> Span:
        span = self._tracer.start_span(
            name, context=self._root_context, kind=kind, attributes=attributes
        )
        self._open.append(span)
        return span
