"""Traces: one OpenTelemetry trace per run, in the GenAI semantic conventions.

Follows :data:`SEMCONV`: the GenAI conventions as released in the repository
``open-telemetry/semantic-conventions-genai`` 0.1.0 (all of it still "Development"; the
names these spans use are that release's). When they move, they move here, and only here:
:mod:`~agent_core.process.tracing.setup` says whether this process traces and how spans
leave it; :mod:`~agent_core.process.tracing.spans` is what a run's trace holds.

Why our own spans and not the contrib instrumentations (aiohttp client, asyncpg, sqlite3,
the openai and anthropic wrappers): they would trace every stop-table poll and lease
heartbeat, put trace headers on our requests to Slack and to the model providers, and do
work for each streamed chunk. Ours start and end at request, tool and run boundaries only;
nothing here runs per chunk.
"""

from __future__ import annotations

from agent_core.process.tracing.approval import ApprovalSpan, approval_wait
from agent_core.process.tracing.setup import (
    AGENT_NAME,
    FLUSH_S,
    configure_tracing,
    flush_traces,
    reset_tracing,
    shutdown_tracing,
    tracing_enabled,
    use_tracer_provider,
)
from agent_core.process.tracing.spans import (
    NO_TRACE,
    ChatSpan,
    RunTrace,
    record_elsewhere,
    run_trace,
)

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
