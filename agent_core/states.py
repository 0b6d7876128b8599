"""The lifecycle states of a run and the one table of legal moves between them.

::

    queued ──► running ──► stopping ──► (terminal)
       │          │            │
       └──────────┴────────────┴──────► finished | blocked | failed
                                        | userinterlude | askuserQuestion
    blocked ──► queued      (resume from the last checkpoint)

Terminal states are the canonical outcomes, so a stored run's state *is* its outcome
once it has ended. ``blocked`` is the only terminal state with a way out: a resumer may
queue it again (auto-resume after a restart).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from agent_core.errors import IllegalTransition

if TYPE_CHECKING:
    from agent_core.outcomes import Outcome

__all__ = ["LIVE_STATES", "TERMINAL_STATES", "RunState", "state_for_outcome", "transition"]


class RunState(StrEnum):
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

_ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING}) | TERMINAL_STATES,
    RunState.RUNNING: frozenset({RunState.STOPPING}) | TERMINAL_STATES,
    RunState.STOPPING: TERMINAL_STATES,
    RunState.BLOCKED: frozenset({RunState.QUEUED}),
    RunState.FINISHED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.USERINTERLUDE: frozenset(),
    RunState.ASK_USER_QUESTION: frozenset(),
}


def transition(current: RunState, new: RunState) -> RunState:
    """Return ``new`` if the move is legal; raise :class:`IllegalTransition` otherwise."""
    if new not in _ALLOWED[current]:
        raise IllegalTransition(f"a run cannot go from {current.value} to {new.value}")
    return new


def state_for_outcome(outcome: Outcome) -> RunState:
    return RunState(outcome.value)
