"""The lifecycle states of a run and the one table of legal moves between them.

::

    queued ──► running ──► stopping ──► (terminal)
       │          │            │
       └──────────┴────────────┴──────► finished | blocked | failed
                                        | userinterlude | askuserQuestion
    running ──► queued      (its worker could not start it after all: back in the queue)
    (terminal but finished) ──► queued      (resumed in place from the last checkpoint)

A write that keeps a run's state is not a move: its compare-and-set only guards the
other fields it writes (a queued run handed back to the queue, a run its claim already
made ``running`` starting, a final message marked posted).

Terminal states are the canonical outcomes, so a stored run's state *is* its outcome
once it has ended. An ended run goes nowhere but back to ``queued``, when its resume in
place is due (``AUTO_RESUME`` lists why it ended); ``finished`` never moves: a completed
run has nothing left to do. Every store checks a state write against this table
(:func:`check_moves`) before it writes."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from agent_core.values.errors import IllegalTransition

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agent_core.values.outcomes import Outcome

__all__ = [
    "LIVE_STATES",
    "TERMINAL_STATES",
    "RunState",
    "check_moves",
    "sources",
    "state_for_outcome",
    "transition",
]


class RunState(StrEnum):
    """Where a run is in its life (the module's table says how it moves)."""

    QUEUED = "queued"
    """Accepted, not yet picked up by an owner."""
    RUNNING = "running"
    """An owner is driving the loop."""
    STOPPING = "stopping"
    """A stop was honoured at a step boundary; the final turn is under way."""
    FINISHED = "finished"
    BLOCKED = "blocked"
    FAILED = "failed"
    USERINTERLUDE = "userinterlude"
    ASK_USER_QUESTION = "askuserQuestion"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


LIVE_STATES = frozenset({RunState.QUEUED, RunState.RUNNING, RunState.STOPPING})
TERMINAL_STATES = frozenset(RunState) - LIVE_STATES

_RESUMABLE = TERMINAL_STATES - {RunState.FINISHED}
"""The ended states a resume in place may queue again."""

_ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING}) | TERMINAL_STATES,
    RunState.RUNNING: frozenset({RunState.QUEUED, RunState.STOPPING}) | TERMINAL_STATES,
    RunState.STOPPING: TERMINAL_STATES,
    RunState.FINISHED: frozenset(),
    **{state: frozenset({RunState.QUEUED}) for state in _RESUMABLE},
}


def transition(current: RunState, new: RunState) -> RunState:
    """Return ``new`` if the move is legal; raise :class:`IllegalTransition` otherwise."""
    if new not in _ALLOWED[current]:
        raise IllegalTransition(f"a run cannot go from {current.value} to {new.value}")
    return new


def check_moves(expected: Iterable[RunState], new: RunState) -> None:
    """Raise :class:`IllegalTransition` unless every move from one of ``expected`` to
    ``new`` is legal: what a compare-and-set of the state may write. Staying in a state
    is no move, and always allowed."""
    for current in expected:
        if current is not new:
            transition(current, new)


def sources(new: RunState, among: Iterable[RunState]) -> frozenset[RunState]:
    """The states of ``among`` from which a run may move to ``new``."""
    return frozenset(s for s in among if new in _ALLOWED[s])


def state_for_outcome(outcome: Outcome) -> RunState:
    return RunState(outcome.value)
