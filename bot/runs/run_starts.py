"""What each run this process starts begins from: the run in memory for it.

The supervisor (:mod:`bot.runs.supervisor`) decides whether a run starts here and holds
its task; these make the run itself, for each way one starts: a person's message just
accepted, a row taken from the queue, a stored run resumed from its checkpoint, a
continuation from the summary of its conversation (its context filled up), and one from
its checkpoint with one more budget (a person pressed Continue). A resume and a summary's
continuation are the same request: its budget goes on from what it had spent. Every run
continuing a stored one links to the trace that run last had.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from agent_core import EndedBecause, continue_from
from bot.runs.resume_decision import spent_of, stored_ended_because

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core import Agent, ChatMessage, Checkpoint, Compacted, Run, RunRecord
    from bot.runs.run_registry import Accepted

__all__ = [
    "accepted_run",
    "budget_continuation",
    "queued_run",
    "resumed_run",
    "summary_continuation",
]


def accepted_run(
    agent: Agent, run_id: str, accepted: Accepted, history: Sequence[ChatMessage]
) -> Run:
    """A person's new run, accepted here before their message was acknowledged."""
    return agent.new_run(
        accepted.task,
        run_id=run_id,
        requester=accepted.requester,
        thread=accepted.thread,
        history=history,
    )


def queued_run(agent: Agent, record: RunRecord, history: Sequence[ChatMessage]) -> Run:
    """A run taken from the queue, starting (not resuming)."""
    return agent.new_run(
        record.task,
        run_id=record.id,
        requester=record.requester,
        thread=record.thread,
        history=history,
    )


def resumed_run(agent: Agent, record: RunRecord, checkpoint: Checkpoint | None) -> Run:
    """A stored run going on from its checkpoint, with what its request had spent
    (``record``: the row as it ended, its result kept)."""
    return agent.new_run(
        record.task,
        run_id=record.id,
        requester=record.requester,
        thread=record.thread,
        restore=checkpoint,
        resumed_because=stored_ended_because(record),
        spent=spent_of(record),  # the same request: its budget goes on
        trace_links=_traced_before(record),  # a new trace, linked to the run's last
    )


def summary_continuation(
    agent: Agent, previous: RunRecord, compacted: Compacted, run_id: str
) -> Run:
    """``run_id`` in ``previous``'s thread, from the summary of its conversation."""
    return continue_from(
        agent,
        compacted,
        task=previous.task,
        previous_run_id=previous.id,
        run_id=run_id,
        requester=previous.requester,
        thread=previous.thread,
        spent=spent_of(previous),  # the same request: its budget goes on
        trace_links=_traced_before(previous),
    )


def budget_continuation(
    agent: Agent, previous: RunRecord, checkpoint: Checkpoint | None, run_id: str
) -> Run:
    """``run_id`` in ``previous``'s thread, from its checkpoint, with one more budget."""
    return agent.new_run(
        previous.task,
        run_id=run_id,
        requester=previous.requester,
        thread=previous.thread,
        # A run of its own: its turns count from one, its budget from zero.
        restore=replace(checkpoint, turn=0) if checkpoint else None,
        resumed_because=EndedBecause.BUDGET_EXHAUSTED,
        continued_from=previous.id,
        trace_links=_traced_before(previous),
    )


def _traced_before(record: RunRecord) -> tuple[str, ...]:
    """The trace ``record``'s run last had, which a run continuing it links to."""
    return () if record.trace_context is None else (record.trace_context,)
