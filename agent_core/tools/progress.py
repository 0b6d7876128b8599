"""How far a tool call has got: reported by the tool, shown by the run as its progress.

The :class:`~agent_core.tools.toolbox.Toolbox` binds a reporter to each call for the call's
duration (a context variable, so it is the call's own, in its task and in the thread a
sync tool runs in)::

    @tool
    async def build(target: str) -> str:
        for step, total in ...:
            report_progress(step, total, f"compiling {target}")

A tool whose progress arrives on another task (an MCP server's notifications arrive on
the connection's reader) takes :func:`current_progress` once, in its own task, and calls
that from there. Listeners always run on the event loop: a report from a sync tool's
thread is handed over with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

from agent_core.values.chat import ToolCall

__all__ = ["OnProgress", "ProgressFn", "current_progress", "report_progress", "reporting_progress"]

ProgressFn = Callable[[float, float | None, str | None], None]
"""``(progress, total, message)``: how far the current call has got."""

OnProgress = Callable[[ToolCall, float, float | None, str | None], None]
"""The run's listener: which call, and how far it has got."""

_reporter: contextvars.ContextVar[ProgressFn | None] = contextvars.ContextVar(
    "threadpilot_tool_progress", default=None
)


def current_progress() -> ProgressFn:
    """Where the tool call running here reports progress (a no-op outside a call)."""
    return _reporter.get() or _ignore


def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """Tell the run how far the tool call running in this task (or thread) has got."""
    current_progress()(progress, total, message)


@contextlib.contextmanager
def reporting_progress(call: ToolCall, on_progress: OnProgress | None) -> Iterator[None]:
    """Within the block, this call's progress goes to ``on_progress`` (None: nowhere)."""
    token = _reporter.set(_reporter_for(call, on_progress) if on_progress else None)
    try:
        yield
    finally:
        _reporter.reset(token)


def _reporter_for(call: ToolCall, on_progress: OnProgress) -> ProgressFn:
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def report(progress: float, total: float | None, message: str | None) -> None:
        if threading.get_ident() == loop_thread:
            on_progress(call, progress, total, message)
        else:  # a sync tool's thread: listeners run on the loop only
            loop.call_soon_threadsafe(on_progress, call, progress, total, message)

    return report


def _ignore(progress: float, total: float | None, message: str | None) -> None:
    pass
