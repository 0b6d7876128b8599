"""Mentions whose run could not be recorded before the ack, recorded after it.

A mention's run is recorded before Slack's event is acknowledged, within
:data:`bot.stopping.stops.ACK_BUDGET_S` (:mod:`bot.handlers.mentions`). When the
database does not answer in that time (a blip: a fail-over, backends terminated), the
event is acknowledged all the same, and the run is recorded here, in the background:
tried again with a growing pause (:data:`FIRST_PAUSE_S` doubling to
:data:`LONGEST_PAUSE_S`) for :data:`RECORD_RETRY_S`, then started as any accepted run
is. The storms that break a first try last seconds; only when the whole time is spent is
the thread told the run could not be started (``messages.RUN_NOT_RECORDED``), so no
mention is lost to a blip.

Every retry is a task held here; :meth:`LateAdmissions.shutdown` (the first step of
the process's shutdown) cancels them, waits for them, and tells each thread whose
mention was still waiting that nothing runs.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import StorageError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bot.handlers.asked import Asked

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

    async def admit_again(self, asked: Asked, *, earlier: Sequence[str]) -> Asked:
        """Try once more to record ``asked``'s run, under its new ``run_id``, after ending
        the rows of the tries before (``earlier`` run ids), had any landed unseen.
        Raises StorageError or TimeoutError when the database still does not answer."""

    async def admitted(self, asked: Asked) -> None:
        """Go on with a mention whose run is now decided, as after the ack."""

    async def not_recorded(self, asked: Asked, *, earlier: Sequence[str]) -> None:
        """Tell the thread nothing runs: the run could not be recorded (and end the rows
        of the tries, ``earlier``, had any landed unseen)."""


@dataclass
class _Pending:
    """One mention being recorded late."""

    asked: Asked
    tried: list[str] = field(default_factory=list)
    """The run ids of its tries, any of whose rows may have landed unseen."""
    recorded: bool = False
    """Its run is recorded: from here on its thread hears from the run."""


class LateAdmissions:
    """The mentions whose run is being recorded after the ack, one task each."""

    def __init__(self, admitter: Admitter) -> None:
        self._admitter = admitter
        self._tasks: dict[asyncio.Task[None], _Pending] = {}
        self._closed = False

    def admit(self, asked: Asked) -> None:
        """Record ``asked``'s run in the background, then start it (or tell the thread)."""
        if self._closed:
            log.warning("run.not_recorded", reason="shutting down")
            return
        pending = _Pending(asked, [asked.run_id] if asked.run_id is not None else [])
        task = asyncio.get_running_loop().create_task(self._admit(pending), name="late admission")
        self._tasks[task] = pending
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("run.late_admission_failed", error=f"{type(exc).__name__}: {exc}")

    async def _admit(self, pending: _Pending) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECORD_RETRY_S
        pause = FIRST_PAUSE_S
        while True:
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            attempt = replace(pending.asked, run_id=uuid.uuid4().hex)
            earlier = list(pending.tried)
            pending.tried.append(str(attempt.run_id))  # its row may land unseen
            try:
                async with asyncio.timeout(min(ATTEMPT_S, max(0.01, deadline - loop.time()))):
                    recorded = await self._admitter.admit_again(attempt, earlier=earlier)
            except (StorageError, TimeoutError) as exc:
                if loop.time() >= deadline:
                    tries = len(pending.tried)
                    log.error("run.not_recorded", tries=tries, error=str(exc) or "timed out")
                    await self._admitter.not_recorded(pending.asked, earlier=pending.tried)
                    return
                pause = min(pause * 2, LONGEST_PAUSE_S)
                continue
            pending.recorded = True
            log.info("run.recorded_late", tries=len(pending.tried), run_id=recorded.run_id)
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
        untold = [p for t, p in waiting.items() if t.cancelled() and not p.recorded]
        if not untold:
            return
        try:
            async with asyncio.timeout(TELL_S):
                told = (self._admitter.not_recorded(p.asked, earlier=p.tried) for p in untold)
                await asyncio.gather(*told)
        except TimeoutError:
            log.error("run.not_recorded_untold", threads=len(untold))
