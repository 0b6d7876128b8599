"""structlog set-up shared by the terminal runner and the Slack app.

Logs go to stderr (stdout belongs to the answer and to ``--json``), as readable console
lines or one JSON object per line. Context bound with :func:`structlog.contextvars` (run
id, team, channel, thread, user) appears on every line logged within that context.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

__all__ = ["LogFormat", "configure_logging"]

LogFormat = Literal["console", "json"]


def configure_logging(
    fmt: LogFormat = "console", level: str = "INFO", stream: TextIO | None = None
) -> None:
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
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries that use the standard library (aiohttp, slack_bolt) follow the same level.
    logging.basicConfig(level=numeric, stream=stream or sys.stderr, format="%(name)s %(message)s")
