"""Tools that stay busy until the test lets them go, for the tool-limit and freeze tests.

``async with stuck_tools() as stuck:`` hands out tools that block, spin or crunch in
their thread (or await forever, for an async tool) until ``stuck.release`` is set, and
counts the calls running right now so a test can wait for one to be under way. Leaving
the block releases every one of them and waits until their threads have returned, so no
thread is left spinning after the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from typing import TYPE_CHECKING

from agent_core.tools.toolbox import Tool, tool
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

WAIT_S = 10.0
_CRUNCH = 7**60_000
"""Squaring this holds the interpreter lock for a few milliseconds per multiplication."""


class StuckTools:
    """Makes tools that are stuck until :attr:`release` is set; counts their calls."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._changes = Changes()
        self.release = threading.Event()
        self._async_release = asyncio.Event()
        self.running = 0
        """Calls inside a tool right now (updated on the event loop)."""
        self.started = 0
        """Calls that ever entered a tool."""

    # -- the tools ---------------------------------------------------------------------

    def blocked(self, name: str = "wait") -> Tool:
        """A sync tool that waits in its thread (without the interpreter lock)."""

        def fn() -> str:
            with self._inside():
                self.release.wait()
            return "released"

        return tool(name=name, description="Wait for the release.")(fn)

    def spinning(self, name: str = "spin") -> Tool:
        """A sync tool spinning in pure Python: it gives up the lock only when forced."""

        def fn() -> str:
            with self._inside():
                while not self.release.is_set():
                    pass
            return "released"

        return tool(name=name, description="Spin until released.")(fn)

    def crunching(self, name: str = "crunch") -> Tool:
        """A sync tool doing big-integer arithmetic: each multiplication holds the lock
        for its whole (bounded, few-millisecond) length."""

        def fn() -> str:
            with self._inside():
                while not self.release.is_set():
                    _ = _CRUNCH * _CRUNCH
            return "released"

        return tool(name=name, description="Crunch numbers until released.")(fn)

    def awaiting(self, name: str = "hang") -> Tool:
        """An async tool that waits (on the event loop) until released."""

        async def fn() -> str:
            with self._inside():
                await self._async_release.wait()
            return "released"

        return tool(name=name, description="Wait forever.")(fn)

    def observed(self, original: Tool) -> Tool:
        """``original`` unchanged (name, schema, function), but counted while it runs."""
        fn = original.fn

        def counted(**kwargs: object) -> object:
            with self._inside():
                return fn(**kwargs)

        return dataclasses.replace(original, fn=counted)

    def let_go(self) -> None:
        """Release every stuck tool, sync and async."""
        self.release.set()
        self._async_release.set()

    # -- waiting -------------------------------------------------------------------------

    async def until_started(self, count: int = 1) -> None:
        await self._changes.until(
            lambda: self.started >= count,
            timeout=WAIT_S,
            describe=lambda: f"{self.started} of {count} tool calls started",
        )

    async def until_idle(self) -> None:
        await self._changes.until(
            lambda: self.running == 0,
            timeout=WAIT_S,
            describe=lambda: f"{self.running} tool calls still running",
        )

    @contextlib.contextmanager
    def _inside(self) -> Iterator[None]:
        self._report(+1)
        try:
            yield
        finally:
            self._report(-1)

    def _report(self, delta: int) -> None:
        # Tools run in other threads: the count changes on the loop, where tests read it.
        self._loop.call_soon_threadsafe(self._apply, delta)

    def _apply(self, delta: int) -> None:
        self.running += delta
        self.started += max(delta, 0)
        self._changes.notify()


@contextlib.asynccontextmanager
async def stuck_tools() -> AsyncIterator[StuckTools]:
    """Stuck tools for one test; on leaving, release them and wait for their threads."""
    stuck = StuckTools()
    try:
        yield stuck
    finally:
        stuck.let_go()
        await stuck.until_idle()
