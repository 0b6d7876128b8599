"""The runs this process holds, by run and by thread, and its room for more.

A run is held here from the moment it is accepted (:meth:`bot.runs.supervisor.Supervisor.accept`)
or launched until it is gone: :class:`RunRegistry` keeps the live runs, the runs accepted
and not started yet, and the run holding each thread (at most one: live, or accepted and
about to start). The supervisor checks a thread and holds it without an ``await`` in
between, so two deliveries of the same mention racing each other cannot both start a run.

A run is held here until its ending is in the database, not just in Slack: while its
terminal write is being retried through an outage it stays in memory, so the heartbeat
keeps its lease (:meth:`RunRegistry.held_runs`) and no reconciler takes it for an orphan.

Room: under ``MAX_LIVE_RUNS`` runs still working, the event loop not busy
(:mod:`bot.observe.loop_load`), and not closing; a place can be held for a run about to
start (:meth:`RunRegistry.hold_room`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.runs.run_life import LiveRun, descendants

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agent_core import Run, ThreadKey
    from bot.observe.loop_load import LoopLoad

__all__ = ["Accepted", "RunRegistry"]


@dataclass(frozen=True, slots=True)
class Accepted:
    """A run accepted here (its row written before the ack) and not started yet."""

    thread: ThreadKey
    requester: str
    task: str


def _as_live_sub_agent(live: LiveRun, run: Run) -> LiveRun:
    """``live``'s sub-agent ``run`` as a live run: its parent's session and standing."""
    return LiveRun(run, live.session, live.requester, registered=live.registered, lost=live.lost)


def _descendant(run: Run, run_id: str) -> Run | None:
    return next((c for c in descendants(run) if c.id == run_id), None)


class RunRegistry:
    """The runs held here: live, or accepted and not started yet; and the room left.

    ``max_live``: ``MAX_LIVE_RUNS``, runs beyond it wait in the queue
    (:mod:`bot.runs.run_queue`); ``load``: while this process's event loop is busy, no
    new run starts here.
    """

    def __init__(self, *, max_live: int | None, load: LoopLoad | None) -> None:
        self._max_live = max_live
        self._load = load
        self._live: dict[str, LiveRun] = {}
        self._by_thread: dict[ThreadKey, str] = {}
        """The run holding each thread here: live, or accepted and not started yet."""
        self._accepted: dict[str, Accepted] = {}
        self._queuing: set[str] = set()
        """Accepted runs the queue is queueing: it lets them go itself, shutdown or not."""
        self._holding = 0
        """Places held for runs about to start here (:meth:`hold_room`)."""
        self._accepting = True

    # -- lookups -----------------------------------------------------------------------

    def get(self, run_id: str) -> LiveRun | None:
        return self._live.get(run_id)

    def reachable(self, run_id: str) -> LiveRun | None:
        """The run a person's control names, if this worker runs it: a top-level run, or
        a sub-agent of one (at any depth). A sub-agent comes as a :class:`LiveRun` of its
        own (its run) on its top-level run's session, requester and ownership: its
        controls live on that run's status message, and it stands or falls with it."""
        live = self._live.get(run_id)
        if live is not None:
            return live
        for top in self._live.values():
            child = _descendant(top.run, run_id)
            if child is not None:
                return _as_live_sub_agent(top, child)
        return None

    def live_children(self, run_id: str) -> list[Run]:
        """The sub-agents of this worker's run ``run_id`` (at any depth) still working."""
        live = self._live.get(run_id)
        if live is None:
            return []
        return [c for c in descendants(live.run) if c.result is None]

    def live_in_thread(self, thread: ThreadKey) -> LiveRun | None:
        run_id = self._by_thread.get(thread)
        return self._live.get(run_id) if run_id else None

    def thread_held(self, thread: ThreadKey) -> bool:
        """True if ``thread`` has a run here: live, or accepted and about to start."""
        return thread in self._by_thread

    def holds(self, run_id: str) -> bool:
        """True if the run is this process's: live here, or accepted and not started."""
        return run_id in self._live or run_id in self._accepted

    def held_runs(self) -> set[str]:
        """The runs whose leases this process must keep: accepted and not started yet, or
        registered here, not lost, and still in memory (running, or writing their
        ending)."""
        live = {live.run.id for live in self._live.values() if live.registered and not live.lost}
        return live | self._accepted.keys()

    @property
    def live_runs(self) -> list[LiveRun]:
        return list(self._live.values())

    def count(self) -> int:
        """How many runs are live here (running, or writing their ending)."""
        return len(self._live)

    @property
    def accepting(self) -> bool:
        return self._accepting

    def close(self) -> None:
        """Shutting down: no run is accepted, started or given room here from now on."""
        self._accepting = False

    # -- room --------------------------------------------------------------------------

    def has_room(self) -> bool:
        """True if a new run may start here now: accepting, the event loop not busy
        (:mod:`bot.observe.loop_load`), and fewer than ``max_live`` runs still working (a run
        whose loop has ended, only waiting for Slack to take its final message, no longer
        counts) or about to start (:meth:`hold_room`).

        Resumes and continuations are held to it as new runs are: they wait in the
        schedule until a worker has room (:mod:`bot.workers.resume`).
        """
        if not self._accepting:
            return False
        if self._load is not None and self._load.busy:
            return False
        if self._max_live is None:
            return True
        working = sum(1 for live in self._live.values() if live.run.result is None)
        return working + self._holding < self._max_live

    def hold_room(self) -> bool:
        """Keep one place for a run about to start here (a resume or a continuation: it
        is claimed in the database first), if there is room; True if one is held. Free it
        with :meth:`free_room` once the run is launched (it counts itself then) or will
        not be: without it, two starts looking at once could both take the last place."""
        if not self.has_room():
            return False
        self._holding += 1
        return True

    def free_room(self) -> None:
        """Give back a place :meth:`hold_room` held."""
        self._holding = max(0, self._holding - 1)

    @contextlib.contextmanager
    def room(self) -> Iterator[bool]:
        """:meth:`hold_room` for the block: True inside it if a place is held."""
        held = self.hold_room()
        try:
            yield held
        finally:
            if held:
                self.free_room()

    def room_in(self, thread: ThreadKey) -> bool:
        """True if a stored run may start in ``thread`` here: we are not closing, and no
        run holds the thread here."""
        return self._accepting and thread not in self._by_thread

    # -- holding and letting go --------------------------------------------------------

    def hold_accepted(self, run_id: str, accepted: Accepted) -> None:
        """Hold ``accepted``'s thread for ``run_id``, accepted here and not started yet."""
        self._by_thread[accepted.thread] = run_id
        self._accepted[run_id] = accepted

    def accepted(self, run_id: str) -> Accepted | None:
        """The accepted run ``run_id``, if it is still held here and not started."""
        return self._accepted.get(run_id)

    def take_accepted(self, run_id: str) -> Accepted | None:
        """The accepted run ``run_id``, no longer waiting to start (it is starting now);
        its thread stays held. None if it is not held here any more."""
        return self._accepted.pop(run_id, None)

    def hand_over(self, run_id: str) -> None:
        """An accepted run is no longer this process's to start (it was queued, or not
        stored): the thread is free here and its lease no longer renewed."""
        accepted = self._accepted.pop(run_id, None)
        self._queuing.discard(run_id)
        if accepted is not None and self._by_thread.get(accepted.thread) == run_id:
            del self._by_thread[accepted.thread]

    def queuing(self, run_id: str) -> bool:
        """The queue takes over the accepted run ``run_id`` (:meth:`hand_over` when it is
        done); False if it is not held here (shutdown put it back in the queue)."""
        if run_id not in self._accepted:
            return False
        self._queuing.add(run_id)
        return True

    def not_queuing(self) -> list[str]:
        """The accepted runs not started yet that the queue is not queueing."""
        return [r for r in self._accepted if r not in self._queuing]

    def hold_thread(self, run: Run) -> None:
        """Hold ``run``'s thread for it while it is stored (a continuation)."""
        self._by_thread[run.thread] = run.id

    def add(self, live: LiveRun) -> None:
        """``live`` is launched here: it is live, and holds its thread."""
        self._live[live.run.id] = live
        self._by_thread[live.run.thread] = live.run.id

    def forget(self, run: Run) -> None:
        """``run`` is gone from this process: not live, its thread free."""
        self._live.pop(run.id, None)
        self.release_thread(run)

    def release_thread(self, run: Run) -> None:
        """``run``'s thread is free here, if ``run`` still holds it."""
        if self._by_thread.get(run.thread) == run.id:
            del self._by_thread[run.thread]
