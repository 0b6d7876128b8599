"""A person's message that asks for a new run, and what became of it before Slack's ack:
what the mention listeners (:mod:`bot.handlers.mentions`) decide and the late admissions
(:mod:`bot.handlers.late_admissions`) finish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_core import RunRecord, ThreadKey

__all__ = ["Asked"]


@dataclass(frozen=True, slots=True)
class Asked:
    """A person's message that asks for a new run, and what became of it before the ack."""

    thread: ThreadKey
    user: str
    ts: str
    """The message's own ``ts`` (the thread's, for a message that starts one)."""
    task: str
    run_id: str | None = None
    """The run accepted for it (None: the thread was busy)."""
    stored: bool = False
    """Its row was written in time (else the thread is told, and a row that landed
    unseen is ended)."""
    busy: bool = False
    """The thread already has a live run (here, on another worker, or in the queue)."""
    orphans: tuple[RunRecord, ...] = ()
    """Live rows of the thread whose worker is gone: ended after the ack."""
    refusal: str | None = None
    """Nothing was accepted, and this is the person's answer: they may not use the app
    (:mod:`bot.access.trust`), or have ``MAX_RUNS_PER_USER`` runs live or queued."""
