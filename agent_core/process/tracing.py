"""Traces: one OpenTelemetry trace per run, in the GenAI semantic conventions.

Follows :data:`SEMCONV`: the GenAI conventions as released in the repository
``open-telemetry/semantic-conventions-genai`` 0.1.0 (all of it still "Development"; the
names below are the ones that release uses). When they move, they move here, and only here.

What a run leaves (docs/operations.md lists every attribute)::

    invoke_agent threadpilot          INTERNAL, one per run (a sub-agent's under its
    ├─ chat {model}                   CLIENT, one per model request  delegate call)
    ├─ execute_tool {name}            INTERNAL, one per tool call
    │  ├─ threadpilot.approval        the wait for a person's decision, if the call needs one
    │  └─ invoke_agent threadpilot    a sub-agent, when the tool is ``delegate``
    └─ events: stop, abort, shutdown, stop honoured, guidance delivered, retry,
       budget spent, context full

Why our own spans and not the contrib instrumentations (aiohttp client, asyncpg, sqlite3,
the openai and anthropic wrappers): they would trace every stop-table poll and lease
heartbeat, put trace headers on our requests to Slack and to the model providers, and do
work for each streamed chunk. Ours start and end at request, tool and run boundaries only;
nothing here runs per chunk.

Why a run ended is ours too (there is no agent-level finish reason in the conventions
yet): ``threadpilot.run.ended_because``, ``threadpilot.run.exit_code`` and
``threadpilot.run.outcome``. Stop, Abort, a shutdown, a spent budget and the loop's limits
leave the status unset; a failure, a lost worker and a rate limit that ended the run set
ERROR with ``error.type``.

Spans are ended by the loop itself, in its ``finally`` (and the chat span as the
``with`` around the model call unwinds): the OpenTelemetry API records only
``Exception``, never ``CancelledError``, and an Abort cancels from another task, so
nothing is ended inside the streaming generator.

Nothing is loaded unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set and ``OTEL_SDK_DISABLED`` is not true: then
:func:`configure_tracing` imports the SDK and the OTLP/HTTP exporter (which read the
standard ``OTEL_*`` settings: headers, timeout, sampler), and a batch processor exports
from its own thread, so a receiver that is down never blocks a run. Otherwise every
:class:`RunTrace` is :data:`NO_TRACE`, whose methods do nothing.

Message content is recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
asks for it, and then passed through :func:`agent_core.values.redact.redact` as logs are.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import threading
from typing import TYPE_CHECKING, Any

from agent_core.process.settings_file import settings_text
from agent_core.values.ended import EndedBecause
from agent_core.values.redact import redact

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import TracebackType

    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Link, Span, Tracer

    from agent_core.values.approvals import ApprovalDecision, ApprovalRequest
    from agent_core.values.budget import Exhaustion
    from agent_core.values.chat import ChatMessage, ModelResponse, ToolCall
    from agent_core.values.outcomes import RunResult
    from agent_core.values.records import ThreadKey
    from agent_core.values.stop import StopReason, StopRequest

__all__ = [
    "AGENT_NAME",
    "FLUSH_S",
    "NO_TRACE",
    "SEMCONV",
    "ApprovalSpan",
    "ChatSpan",
    "RunTrace",
    "approval_wait",
    "configure_tracing",
    "flush_traces",
    "record_elsewhere",
    "reset_tracing",
    "run_trace",
    "shutdown_tracing",
    "tracing_enabled",
    "use_tracer_provider",
]

SEMCONV = "semantic-conventions-genai 0.1.0"
"""The version of the GenAI conventions these spans follow."""

AGENT_NAME = "threadpilot"
FLUSH_S = 2.0
"""How long a process waits, as it exits, for the spans it buffered to be sent."""
ENDPOINT_SETTINGS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CAPTURE_SETTING = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

_ERRORS = frozenset({EndedBecause.ERROR, EndedBecause.WORKER_LOST, EndedBecause.RATE_LIMIT})
"""Endings that set the root span's status to ERROR; every other ending leaves it unset."""

_PROVIDERS = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
"""``MODEL_API`` → ``gen_ai.provider.name``."""

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"", "false", "0", "no", "off"})
_CAPTURE_ON = frozenset({*_TRUE, "span_only", "span_and_event"})
_CAPTURE_OFF = frozenset({*_FALSE, "no_content", "event_only"})


class _Tracing:
    """The process's tracer, once :func:`configure_tracing` (or a test) set one."""

    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    capture: bool = False


_state = _Tracing()

_tool_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "threadpilot_tool_span", default=None
)
"""The ``execute_tool`` span of the call running in this task: a sub-agent started by a
``delegate`` call puts its root span under it."""


def tracing_enabled() -> bool:
    return _state.tracer is not None


def _flag(environ: Mapping[str, str], name: str, on: frozenset[str], off: frozenset[str]) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in on:
        return True
    if value in off:
        return False
    raise ValueError(f"{name} must be true or false, not {environ[name]!r}")


def configure_tracing(environ: Mapping[str, str] | None = None) -> bool:
    """Export traces over OTLP/HTTP if an endpoint is set (and ``OTEL_SDK_DISABLED`` is
    not true); True if they will be. A bad flag raises :class:`ValueError` naming it.

    ``environ``: the settings to read (default: the environment and ``.env``, whose
    ``OTEL_*`` lines are copied into the environment, where the SDK reads the rest of
    them: headers, timeout, sampler)."""
    if environ is None:
        for name, value in settings_text().items():
            if name.startswith("OTEL_"):
                os.environ.setdefault(name, value)
    env = os.environ if environ is None else environ
    capture = _flag(env, CAPTURE_SETTING, _CAPTURE_ON, _CAPTURE_OFF)
    disabled = _flag(env, "OTEL_SDK_DISABLED", _TRUE, _FALSE)
    if disabled or not any(env.get(name, "").strip() for name in ENDPOINT_SETTINGS):
        return False
    # Imported here: without an endpoint the SDK is never loaded.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = env.get("OTEL_SERVICE_NAME", "").strip() or AGENT_NAME
    # No atexit shutdown: flush_traces is the bounded one, after the checkpoint.
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: service}), shutdown_on_exit=False
    )
    exporter = OTLPSpanExporter(endpoint=_traces_endpoint(env))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use_tracer_provider(provider, capture_content=capture)
    return True


def _traces_endpoint(env: Mapping[str, str]) -> str:
    """Where spans go: the traces endpoint as given, or the base endpoint's ``/v1/traces``
    (as the OTLP/HTTP exporter specification says)."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    return env["OTEL_EXPORTER_OTLP_ENDPOINT"].strip().rstrip("/") + "/v1/traces"


def use_tracer_provider(provider: TracerProvider, *, capture_content: bool = False) -> None:
    """Trace runs with ``provider`` (tests and benchmarks give one with their exporter)."""
    _state.provider = provider
    _state.tracer = provider.get_tracer("threadpilot", schema_url=None)
    _state.capture = capture_content


def reset_tracing() -> None:
    """Back to no tracing (the provider is not shut down: its owner does that)."""
    _state.provider = None
    _state.tracer = None
    _state.capture = False


async def flush_traces(timeout_s: float = FLUSH_S) -> bool:
    """Export what is buffered, waiting at most ``timeout_s``. False if it did not finish
    in time or nothing is configured."""
    provider = _state.provider
    if provider is None:
        return False
    millis = max(1, int(timeout_s * 1000))
    return await _bounded(lambda: provider.force_flush(millis), timeout_s)


async def shutdown_tracing(timeout_s: float = FLUSH_S) -> None:
    """Send what is buffered and stop the exporter (each bounded), then trace nothing more."""
    provider = _state.provider
    if provider is None:
        return
    await flush_traces(timeout_s)
    reset_tracing()

    def shut() -> bool:
        provider.shutdown()
        return True

    await _bounded(shut, timeout_s)


async def _bounded(work: Callable[[], bool], timeout_s: float) -> bool:
    """``work()`` in a daemon thread, waited on for at most ``timeout_s``.

    Not ``asyncio.to_thread``: the SDK's flush ignores its own timeout and an export to
    a receiver that is down takes the exporter's (10 s by default); the event loop's
    executor would make the process wait for it at exit, a daemon thread does not.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def settle(ok: bool) -> None:
        if not done.done():
            done.set_result(ok)

    def run() -> None:
        try:
            ok = bool(work())
        except Exception:
            ok = False
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, ok)

    threading.Thread(target=run, name="threadpilot-traces", daemon=True).start()
    try:
        async with asyncio.timeout(timeout_s):
            return await done
    except TimeoutError:
        return False


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
    tracer = _state.tracer
    if tracer is None or traceparent is None:
        return
    from opentelemetry import context

    span = tracer.start_span(
        name, context=context.Context(), attributes=dict(attributes), links=_links([traceparent])
    )
    if ended_because is not None:
        span.set_attribute("threadpilot.run.ended_because", ended_because.value)
        if ended_because in _ERRORS:
            _fail(span, ended_because.value, ended_because.value)
    span.end()


# -- spans -------------------------------------------------------------------------------


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


class ApprovalSpan:
    """The wait for a person's decision on one call; the no-op one is :data:`_NO_WAIT`.
    Used as ``with`` around the wait, in the call's own task."""

    def decided(self, decision: ApprovalDecision) -> None:
        """The wait ended with ``decision``."""

    def __enter__(self) -> ApprovalSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NO_WAIT = ApprovalSpan()


def approval_wait(request: ApprovalRequest) -> ApprovalSpan:
    """The span of the wait for ``request``, under the span of its call (the call running
    in this task); the no-op one when the call is not traced."""
    tool = _tool_span.get()
    tracer = _state.tracer
    if tool is None or tracer is None:
        return _NO_WAIT
    from opentelemetry import trace

    span = tracer.start_span(
        "threadpilot.approval",
        context=trace.set_span_in_context(tool),
        attributes={
            "gen_ai.tool.name": request.tool,
            "gen_ai.tool.call.id": request.call_id,
            "threadpilot.approval.id": request.id,
        },
    )
    return _OpenWait(span)


class _OpenWait(ApprovalSpan):
    def __init__(self, span: Span) -> None:
        self._span = span

    def decided(self, decision: ApprovalDecision) -> None:
        self._span.set_attribute("threadpilot.approval.decision", decision.status.value)
        if decision.decided_by:
            self._span.set_attribute("threadpilot.approval.decided_by", decision.decided_by)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            _fail(self._span, type(error).__name__, str(error))
        elif error is not None:
            self._span.set_attribute("threadpilot.cancelled", True)
        self._span.end()


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
    tracer = _state.tracer
    if tracer is None:
        return NO_TRACE
    return _RunTrace(
        tracer,
        run_id=run_id,
        thread=thread,
        model=model,
        parent=parent if isinstance(parent, _RunTrace) else None,
        links=links,
        capture=_state.capture,
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
            self._span.set_attribute("gen_ai.output.messages", _output_json(response))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            _fail(self._span, _error_type(error), str(error))
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
        self._provider = _PROVIDERS.get(str(getattr(model, "api", "")), "")
        self._parent = parent
        self._links = links
        self._root: Span | None = None
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
            above = _tool_span.get() or self._parent._root
            parent_context = trace.set_span_in_context(above) if above else context.Context()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": str(self._thread),
            "threadpilot.run.id": self._run_id,
        }
        attributes.update(self._model_attributes())
        self._root = self._tracer.start_span(
            f"invoke_agent {AGENT_NAME}",
            context=parent_context,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            links=_links(self._links),
        )
        self._traceparent = _traceparent(self._root)

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
        if result.ended_because in _ERRORS:
            _fail(root, result.ended_because.value, result.error or result.ended_because.value)
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
        attributes.update(self._model_attributes())
        if reason is not None:
            attributes["threadpilot.turn.final_reason"] = reason
        if self.capture:
            attributes["gen_ai.input.messages"] = _input_json(messages)
        span = self._child(f"chat {self._model or 'model'}", trace.SpanKind.CLIENT, attributes)
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
        _tool_span.set(span)

    def tool_ended(self, call: ToolCall, ok: bool) -> None:
        span = self._tools.pop(call.id, None)
        if span is None:
            return
        if not ok:
            _fail(span, "tool_error", f"{call.name} returned an error")
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
                "error.type": _error_type(error),
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
            name, context=self._root_context(), kind=kind, attributes=attributes
        )
        self._open.append(span)
        return span

    def _root_context(self) -> Context | None:
        from opentelemetry import trace

        return trace.set_span_in_context(self._root) if self._root is not None else None

    def _model_attributes(self) -> dict[str, str]:
        found = {}
        if self._provider:
            found["gen_ai.provider.name"] = self._provider
        if self._model:
            found["gen_ai.request.model"] = self._model
        return found


def _fail(span: Span, error_type: str, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, redact(description)[:400]))


def _error_type(error: Exception) -> str:
    """The conventions' ``error.type``: the HTTP status when there was one, else the class."""
    status = getattr(error, "status", None)
    return str(status) if isinstance(status, int) else type(error).__name__


def _traceparent(span: Span) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _links(traceparents: Sequence[str]) -> list[Link]:
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


def _text_of(message: ChatMessage) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content, default=str) if content is not None else ""


def _input_json(messages: Sequence[ChatMessage]) -> str:
    shaped = [
        {"role": m.get("role", ""), "parts": [{"type": "text", "content": _text_of(m)}]}
        for m in messages
    ]
    return redact(json.dumps(shaped, ensure_ascii=False))


def _output_json(response: ModelResponse) -> str:
    parts: list[dict[str, Any]] = []
    if response.text:
        parts.append({"type": "text", "content": response.text})
    parts.extend(
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
        for c in response.tool_calls
    )
    shaped = [{"role": "assistant", "parts": parts, "finish_reason": response.finish_reason}]
    return redact(json.dumps(shaped, ensure_ascii=False))
