"""What became of a request to end a run before its ack: :class:`StopDecision`, made by
the stop service (:mod:`bot.stopping.stops`) and read by everything that answers the
person or finishes the work after the ack (the resume controls, the listeners)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_core import RunRecord, RunResult, StopRequestRecord, ThreadKey
    from bot.access.stop_policy import StopAsk, Verdict

__all__ = ["StopDecision"]


@dataclass(frozen=True, slots=True)
class StopDecision:
    """What became of a :class:`StopAsk` before the ack; :meth:`StopService.after` ends it."""

    ask: StopAsk
    verdict: Verdict | None
    """None when it could not be decided or made durable (``failure`` says so)."""
    run_id: str | None = None
    thread: ThreadKey | None = None
    requester: str = ""
    result: RunResult | None = None
    """How the run ended, if it has."""
    record: RunRecord | None = None
    """The stored run, when decided from the database (another worker owns it)."""
    request: StopRequestRecord | None = None
    """The committed stop request, if this ask made one."""
    failure: str | None = None
    """The answer saying nothing was recorded, and why (also the refusal of an
    ``UNTRUSTED`` asker)."""
    local: bool = False
    """This worker owns the run, and applied the request already."""
    resume_cancelled: bool = False
    """No run was live: the ask cancelled the run's scheduled resume instead."""
    audited: bool = False
    """Its audit event was committed with its request (a batch): :meth:`StopService.after`
    writes none."""

    @property
    def changed(self) -> bool:
        """True if this ask committed a request (and, on the owner, applied it)."""
        return self.request is not None
