"""Mentions whose run could not be recorded before the ack, recorded after it.

A mention's run is recorded before Slack's event is acknowledged, within
:data:`bot.stopping.stops.ACK_BUDGET_S` (:mod:`bot.handlers.mentions`). When the
database does not answer in that time (a blip: a fail-over, backends terminated), the
event is acknowledged all the same, and the run is recorded here, in the background:
tried again with a growing pause (:data:`FIRST_PAUSE_S` doubling to
:data:`LONGEST_PAUSE_S`) for :data:`RECORD_RETRY_S`, then started as any accepted run
is. The storms that break a first try last seconds; only when the whole time is spent is
the thread told the run could not be started (``messages.RUN_NOT_RECORDED``), so no
mention is lost to a blip (SPEC §5).

Every retry is a task held here; :meth:`LateAdmissions.shutdown` (the first step of
the process's shutdown) cancels them, waits for them, and tells each thread whose
mention was still waiting that nothing runs.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import StorageError

if TYPE_CHECKING:
    from bot.handlers.mentions import Asked

__all__ = ["FIRST_PAUSE_S", "LONGEST_PAUSE_S", "RECORD_RETRY_S", "Admitter", "LateAdmissions"]

log = structlog.get_logger("bot.handlers.late_admissions")

RECORD_RETRY_S = 60.0
"""How long a mention's run is tried again after its ack before the thread is told."""
FIRST_PAUSE_S = 0.25
LONGEST_PAUSE_S = 5.0
ATTEMPT_S = 5.0
"""One try's bound: a database that hangs is tried again, not waited on."""
TELL_S = 5.0
"""How long shutting down waits to tell the threads whose mention was not recorded."""


class Admitter(Protocol):
    """What a late admission calls back (:class:`bot.handlers.mentions.Mentions`)."""

    async def admit_again(self, asked: Asked) -> Asked:
        """Try once more to record ``asked``'s run; raises StorageError or TimeoutError
        when the database still does not answer."""

    async def admitted(self, asked: Asked) -> None:
        """Go on with a mention whose run is now decided, as after the ack."""

    async def not_recorded(self, asked: Asked) -> None:
        """Tell the thread nothing runs: the run could not be recorded."""


class LateAdmissions:
    """The mentions whose run is being recorded after the ack, one task each."""

    def __init__(self, admitter: Admitter) -> None:
        self._admitter = admitter
        self._tasks: dict[asyncio.Task[None], Asked] = {}
        self._recorded: set[asyncio.Task[None]] = set()
        self._closed = False

    def admit(self, asked: Asked) -> None:
        """Record ``asked``'s run in the background, then start it (or tell the thread)."""
        if self._closed:
            log.warning("run.not_recorded", reason="shutting down")
            return
        task = asyncio.get_running_loop().create_task(self._admit(asked), name="late admission")
        self._tasks[task] = asked
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self._recorded.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("run.late_admission_failed", error=f"{type(exc).__name__}: {exc}")

    async def _admit(self, asked: Asked) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECORD_RETRY_S
        pause = FIRST_PAUSE_S
        tries = 1  # the one before the ack
        while True:
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            tries += 1
            try:
                async with asyncio.timeout(min(ATTEMPT_S, max(0.01, deadline - loop.time()))):
                    recorded = await self._admitter.admit_again(asked)
            except (StorageError, TimeoutError) as exc:
                if loop.time() >= deadline:
                    log.error("run.not_recorded", tries=tries, error=str(exc) or "timed out")
                    await self._admitter.not_recorded(asked)
                    return
                pause = min(pause * 2, LONGEST_PAUSE_S)
                continue
            log.info("run.recorded_late", tries=tries, run_id=recorded.run_id)
            if (me := asyncio.current_task()) is not None:
                self._recorded.add(me)  # from here on its thread hears from its run
            await self._admitter.admitted(recorded)
            return

    async def shutdown(self) -> None:
        """Cancel every late admission, wait for them, and tell each thread still waiting
        that nothing runs (bounded by :data:`TELL_S`)."""
        self._closed = True
        waiting = dict(self._tasks)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        untold = [a for t, a in waiting.items() if t.cancelled() and t not in self._recorded]
        if not untold:
            return
        try:
            async with asyncio.timeout(TELL_S):
                await asyncio.gather(*(self._admitter.not_recorded(a) for a in untold))
        except TimeoutError:
            log.error("run.not_recorded_untold", threads=len(untold))
