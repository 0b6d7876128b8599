"""Whether this process traces, and how its spans leave it.

Nothing is loaded unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (in the environment or ``.env``) and
``OTEL_SDK_DISABLED`` is not true: then :func:`configure_tracing` imports the SDK and the
OTLP/HTTP exporter (which read the standard ``OTEL_*`` settings: headers, timeout,
sampler), and a batch processor exports from its own thread, so a receiver that is down
never blocks a run. :func:`flush_traces` sends what is buffered as a process exits,
bounded whatever the receiver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import TYPE_CHECKING

from agent_core.process.settings_file import settings_text
from agent_core.values.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

__all__ = [
    "AGENT_NAME",
    "CAPTURE_SETTING",
    "ENDPOINT_SETTINGS",
    "FLUSH_S",
    "Tracing",
    "configure_tracing",
    "flush_traces",
    "reset_tracing",
    "shutdown_tracing",
    "state",
    "tracing_enabled",
    "use_tracer_provider",
]

AGENT_NAME = "threadpilot"
"""``gen_ai.agent.name``, and the service's name unless ``OTEL_SERVICE_NAME`` says another."""
FLUSH_S = 2.0
"""How long a process waits, as it exits, for the spans it buffered to be sent."""
ENDPOINT_SETTINGS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CAPTURE_SETTING = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"", "false", "0", "no", "off"})
_CAPTURE_ON = frozenset({*_TRUE, "span_only", "span_and_event"})
_CAPTURE_OFF = frozenset({*_FALSE, "no_content", "event_only"})


class Tracing:
    """The process's tracer, once :func:`configure_tracing` (or a test) set one."""

    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    capture: bool = False


state = Tracing()


def tracing_enabled() -> bool:
    return state.tracer is not None


def _flag(environ: Mapping[str, str], name: str, on: frozenset[str], off: frozenset[str]) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in on:
        return True
    if value in off:
        return False
    raise ConfigError(name, f"must be true or false, not {environ[name]!r}")


def configure_tracing(environ: Mapping[str, str] | None = None) -> bool:
    """Export traces over OTLP/HTTP if an endpoint is set (and ``OTEL_SDK_DISABLED`` is
    not true); True if they will be. A bad value raises
    :class:`~agent_core.values.errors.ConfigError` naming its setting.

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
    try:
        processor = BatchSpanProcessor(exporter)  # reads OTEL_BSP_* itself
    except ValueError as exc:  # the SDK's words do not name the setting
        raise ConfigError("OTEL_BSP_*", str(exc)) from None
    provider.add_span_processor(processor)
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
    state.provider = provider
    state.tracer = provider.get_tracer("threadpilot", schema_url=None)
    state.capture = capture_content


def reset_tracing() -> None:
    """Back to no tracing (the provider is not shut down: its owner does that)."""
    state.provider = None
    state.tracer = None
    state.capture = False


async def flush_traces(timeout_s: float = FLUSH_S) -> bool:
    """Export what is buffered, waiting at most ``timeout_s``. False if it did not finish
    in time or nothing is configured."""
    provider = state.provider
    if provider is None:
        return False
    millis = max(1, int(timeout_s * 1000))
    return await _bounded(lambda: provider.force_flush(millis), timeout_s)


async def shutdown_tracing(timeout_s: float = FLUSH_S) -> None:
    """Send what is buffered and stop the exporter (each bounded), then trace nothing more."""
    provider = state.provider
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
