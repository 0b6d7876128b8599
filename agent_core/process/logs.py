"""structlog set-up shared by the terminal runner and the Slack app.

Logs go to stderr (stdout belongs to the answer and to ``--json``), as readable console
lines or one JSON object per line. Libraries that log through the standard library
(slack_bolt, aiohttp, asyncpg) are rendered the same way, so a JSON log stays JSON.
Context bound with :mod:`structlog.contextvars` (run id, team, channel, thread, user)
appears on every line logged within that context, whichever logger wrote it.

Above DEBUG, libraries that log a line per request or per start (:data:`QUIET_AT_INFO`:
the HTTP clients, the access log, asyncpg, alembic's migration steps) show only their
warnings and errors; at DEBUG everything is shown. Their lines (and tracebacks) are
passed through :func:`agent_core.values.redact.redact` first: an MCP server's URL, which the
HTTP clients log with each request, loses its user info and query, and anything shaped
like a key is masked. Our own lines say what they show on purpose.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

from agent_core.values.redact import redact

__all__ = ["QUIET_AT_INFO", "LogFormat", "configure_logging"]

LogFormat = Literal["console", "json"]

QUIET_AT_INFO = (
    "httpx",  # "HTTP Request: POST ..." for every MCP request over HTTP
    "httpx2",  # the same, from our MCP transport's client
    "httpcore",
    "httpcore2",
    "openai",  # its client's request and retry lines (the set-up check lists models)
    "mcp.client.streamable_http",  # a line per MCP session opened
    "aiohttp.access",  # a line per request served
    "asyncpg",
    "alembic",  # "Context impl ...", "Running upgrade ..." on every start
    "slack_sdk.web",  # "A retry handler found ..." before each retried Web API call
)
"""Libraries whose INFO lines are per-request or per-start chatter: below DEBUG only their
warnings and errors are shown (ours say what happened, once)."""

_SHARED: list[structlog.typing.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure_logging(
    fmt: LogFormat = "console", level: str = "INFO", stream: TextIO | None = None
) -> None:
    """Send structlog's and the standard library's logs at ``level`` and above to
    ``stream`` (default: stderr), as readable lines or JSON (``fmt``)."""
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            *_SHARED,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *_SHARED,
                structlog.stdlib.add_logger_name,
                structlog.processors.format_exc_info,
                _redacted,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    quiet = max(numeric, logging.WARNING) if numeric > logging.DEBUG else logging.NOTSET
    for name in QUIET_AT_INFO:
        logging.getLogger(name).setLevel(quiet)


def _redacted(
    logger: object, method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """A library's line and traceback, with what looks secret masked."""
    for key in ("event", "exception"):
        if isinstance(event_dict.get(key), str):
            event_dict[key] = redact(event_dict[key])
    return event_dict
