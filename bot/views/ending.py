"""The status message's last word on an ended run (docs/stopping.md): why it ended, and
whether (and when) it resumes on its own, with ``Resume now`` and ``Don't resume`` while a
resume is scheduled, and ``Continue`` under a run that spent its budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core.values.records import ResumeState
from bot import messages as m
from bot.views.action_ids import (
    ACTION_CONTINUE,
    ACTION_DONT_RESUME,
    ACTION_RESUME_NOW,
    RESUME_BLOCK_ID,
)
from bot.views.blocks import Block, clip, context, plain

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["STATUS_BUDGET", "EndingView", "ending_blocks"]

STATUS_BUDGET = 1_000
"""What the lines on a run's state and ending may take of a status message."""


@dataclass(frozen=True, slots=True)
class EndingView:
    """Why a run ended, and its automatic resume, as the stored run has them."""

    ended_because: str
    """``rate_limit``, ``completed``... (:class:`agent_core.EndedBecause`)."""
    resume: ResumeState | None = None
    resume_at: datetime | None = None
    reason: str | None = None
    """Why the policy decided as it did (shown when it will not resume)."""
    by: str | None = None
    """Who cancelled the resume (Don't resume, or Stop)."""
    blocked: bool = False
    """The run ended ``blocked``: not resuming it is worth explaining."""


def ending_blocks(run_id: str, ending: EndingView | None) -> list[Block]:
    """Under the handoff: why the run ended and whether (and when) it resumes on its own;
    ``Resume now`` and ``Don't resume`` while a resume is scheduled; ``Continue`` under a
    run that spent its budget."""
    if ending is None:
        return []
    lines = [m.why_ended(ending.ended_because)]
    if ending.ended_because == "budget_exhausted":
        buttons = _budget_ending(run_id, ending, lines)
    else:
        buttons = _resume_ending(run_id, ending, lines)
    blocks = [context(clip("\n".join(lines), STATUS_BUDGET))]
    if buttons:
        blocks.append({"type": "actions", "block_id": RESUME_BLOCK_ID, "elements": buttons})
    return blocks


def _budget_ending(run_id: str, ending: EndingView, lines: list[str]) -> list[Block]:
    """A run that spent its budget never resumes on its own; ``Continue`` gives it one
    more budget, once: after the press, who continued it."""
    match ending.resume:
        case ResumeState.DECLINED if ending.by is None:
            if ending.reason:
                lines.append(m.not_resuming(ending.reason))
            lines.append(m.CONTINUE_OFFER)
            return [_continue_button(run_id)]
        case ResumeState.SCHEDULED | ResumeState.CLAIMED | ResumeState.STARTED:
            lines.append(m.continued(ending.by))
        case ResumeState.CANCELLED:  # a Stop before the continuation started
            lines.append(m.resume_cancelled(ending.by))
        case ResumeState.DECLINED if ending.reason:
            lines.append(m.not_resuming(ending.reason))
        case _:
            pass
    return []


def _resume_ending(run_id: str, ending: EndingView, lines: list[str]) -> list[Block]:
    """An automatic resume: when, and ``Resume now`` / ``Don't resume`` while ahead."""
    buttons: list[Block] = []
    continuation = ending.ended_because == "context_exhausted"
    match ending.resume:
        case ResumeState.SCHEDULED if continuation:
            lines.append(m.RESUME_CONTINUING)
            buttons = [_dont_resume_button(run_id)]
        case ResumeState.SCHEDULED if ending.ended_because == "rate_limit" and ending.resume_at:
            lines.append(m.resume_scheduled(ending.resume_at))
            buttons = [_resume_now_button(run_id), _dont_resume_button(run_id)]
        case ResumeState.SCHEDULED | ResumeState.CLAIMED:
            lines.append(m.RESUME_CONTINUING if continuation else m.RESUMING_NOW)
            buttons = [_dont_resume_button(run_id)]
        case ResumeState.STARTED:
            lines.append(m.RESUME_CONTINUED if continuation else m.RESUMING_NOW)
        case ResumeState.CANCELLED:
            lines.append(m.resume_cancelled(ending.by))
        case ResumeState.DECLINED if ending.blocked and ending.reason:
            lines.append(m.not_resuming(ending.reason))
        case _:
            pass
    return buttons


def _continue_button(run_id: str) -> Block:
    return {
        "type": "button",
        "action_id": ACTION_CONTINUE,
        "text": plain(m.CONTINUE_LABEL),
        "value": run_id,
        "style": "primary",
    }


def _resume_now_button(run_id: str) -> Block:
    return {
        "type": "button",
        "action_id": ACTION_RESUME_NOW,
        "text": plain(m.RESUME_NOW_LABEL),
        "value": run_id,
        "style": "primary",
    }


def _dont_resume_button(run_id: str) -> Block:
    return {
        "type": "button",
        "action_id": ACTION_DONT_RESUME,
        "text": plain(m.DONT_RESUME_LABEL),
        "value": run_id,
    }
