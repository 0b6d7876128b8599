"""What became of a request to end a run before its ack: :class:`StopDecision`, made by
the stop service (:mod:`bot.stopping.stops`) and read by everything that answers the
person or finishes the work after the ack (the resume controls, the listeners); and
what the person is told of it (:func:`stop_answer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot import messages
from bot.access.stop_policy import Verdict

if TYPE_CHECKING:
    from agent_core import RunRecord, RunResult, StopRequestRecord, ThreadKey
    from bot.access.stop_policy import StopAsk
    from bot.config.settings import Settings

__all__ = ["StopDecision", "stop_answer"]


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
    parent_id: str | None = None
    """Set when the run asked about is a sub-agent: its parent run."""
    audited: bool = False
    """Its audit event was committed with its request (a batch): :meth:`StopService.after`
    writes none."""

    @property
    def changed(self) -> bool:
        """True if this ask committed a request (and, on the owner, applied it)."""
        return self.request is not None


def stop_answer(decision: StopDecision, settings: Settings) -> str | None:
    """What to tell the person who asked (here, as an ephemeral reply; App Home and
    ``/threadpilot`` answer in their own way); None when the run's own messages say it
    all."""
    if decision.verdict is None:
        return decision.failure
    match decision.verdict:
        case Verdict.STOP | Verdict.ABORT | Verdict.REDELIVERED:
            return None  # the status message shows the change / the first was answered
        case Verdict.ESCALATE:
            return messages.ESCALATED_TO_ABORT
        case Verdict.DUPLICATE:
            return messages.ALREADY_STOPPING
        case Verdict.ALREADY_ABORTING:
            return messages.ALREADY_ABORTING
        case Verdict.NOT_ALLOWED:
            return messages.not_allowed(settings.STOP_POLICY.value, decision.requester)
        case Verdict.NOT_THIS_RUN:
            return messages.CLICK_NOT_FROM_RUN
        case Verdict.OTHER_WORKSPACE:
            return messages.NOT_THIS_WORKSPACE
        case Verdict.UNTRUSTED:
            return decision.failure
        case Verdict.FINISHED if decision.parent_id is not None:
            return messages.SUB_AGENT_NOT_LIVE
        case Verdict.FINISHED:
            return messages.run_already_finished(decision.result)
        case Verdict.NOT_FOUND:
            # A thread with no live run (a stale native stop, a stop word too late)
            # has nothing to say; a button naming a run we do not know has.
            return messages.RUN_NOT_FOUND if decision.ask.run_id is not None else None
