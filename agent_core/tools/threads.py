"""The threads synchronous tools run in: a small pool of their own, bounded, never joined.

A Python thread cannot be killed. When a sync tool's call is timed out or its run is
aborted, the caller stops waiting at once and the thread's eventual result is dropped,
but the thread runs on until the function returns, and until then it holds one of this
pool's slots. So a sync tool that never returns costs one slot for the rest of the
process's life; when every slot is taken, further sync calls wait in line (each still
bounded by its own timeout) and nothing else in the process is affected.

Why a pool of its own, not asyncio's default executor: that executor also resolves host
names (``getaddrinfo``) and serves anything else that calls ``asyncio.to_thread``; stuck
tools there would starve the Slack and model clients. Why daemon threads: a stuck tool
must not keep the process from exiting (asyncio's executor and
:class:`concurrent.futures.ThreadPoolExecutor` join their threads at exit).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DEFAULT_TOOL_THREADS", "SHARED_TOOL_THREADS", "ToolThreads"]

DEFAULT_TOOL_THREADS = 8
"""Sync tool calls that may run at once in one process (the shared pool's size)."""


class _Job:
    __slots__ = ("args", "fn", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.future: Future[Any] = Future()

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # the caller gave up while this waited in line: never start it
        try:
            result = self.fn(*self.args)
        except Exception as exc:
            self.future.set_exception(exc)
        except SystemExit as exc:
            # Neither the process nor this thread ends because a tool called sys.exit();
            # handed on as is, asyncio would re-raise it out of the event loop.
            self.future.set_exception(RuntimeError(f"the tool called sys.exit({exc.code!r})"))
        else:
            self.future.set_result(result)


class ToolThreads:
    """At most ``max_threads`` daemon threads; calls beyond that wait in line.

    A thread is started for a call when a slot is free and ends when the line is empty,
    so an idle pool holds no threads.
    """

    def __init__(self, max_threads: int = DEFAULT_TOOL_THREADS, *, name: str = "tool") -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.max_threads = max_threads
        self._name = name
        self._lock = threading.Lock()
        self._line: deque[_Job] = deque()
        self._busy = 0
        self._started = 0

    @property
    def busy(self) -> int:
        """Threads running a call now (including calls nobody waits for any more)."""
        with self._lock:
            return self._busy

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` in a pool thread; cancelling the future before it starts
        means it never runs."""
        job = _Job(fn, args)
        with self._lock:
            if self._busy >= self.max_threads:
                # Calls whose callers gave up are dropped here, so a pool that stays full
                # of stuck tools does not collect abandoned calls forever.
                self._line = deque(j for j in self._line if not j.future.cancelled())
                self._line.append(job)
                return job.future
            self._busy += 1
            self._started += 1
            number = self._started
        thread = threading.Thread(
            target=self._work, args=(job,), name=f"{self._name}-{number}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # the system is out of threads: give the slot back
            with self._lock:
                self._busy -= 1
            raise
        return job.future

    def _work(self, job: _Job | None) -> None:
        while job is not None:
            job.run()
            job = self._next()

    def _next(self) -> _Job | None:
        with self._lock:
            if self._line:
                return self._line.popleft()
            self._busy -= 1
            return None


SHARED_TOOL_THREADS = ToolThreads(name="threadpilot-tool")
"""The process's pool for sync tools; it starts no thread until a sync tool is called."""
