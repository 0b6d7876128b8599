"""The approval message: a held tool call, its clipped arguments, Approve and Deny; once
decided, the same message says what became of the call and who decided. Pure functions;
the words come from :mod:`bot.messages`."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from bot import messages as m
from bot.views.blocks import context, plain, section

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from agent_core import ApprovalRecord
    from bot.views.blocks import Block

__all__ = [
    "ACTION_APPROVE",
    "ACTION_DENY",
    "APPROVAL_EVENT_TYPE",
    "HOME_APPROVALS_SHOWN",
    "NotRun",
    "approval_buttons",
    "approval_metadata",
    "home_approvals",
    "render_approval",
]

HOME_APPROVALS_SHOWN = 5
"""App Home shows this many held calls (the oldest) with their buttons; a line counts
the rest, which each thread shows anyway."""

APPROVAL_EVENT_TYPE = "threadpilot_approval"
"""The ``event_type`` of the message metadata that ties a message to its approval."""
ACTION_APPROVE = "approval_approve"
ACTION_DENY = "approval_deny"


class NotRun(StrEnum):
    """Why a decided call was not run, where its status alone does not say."""

    RUN_ENDED = "run_ended"
    """Cancelled: its run ended for good while it waited."""
    STOPPED = "stopped"
    """Approved, but the run was stopped (or aborted) while the call still waited: the
    approval had not reached it yet."""


def approval_metadata(approval_id: str) -> dict[str, Any]:
    """Slack message metadata naming the approval a message shows: how a post whose
    answer was lost, or whose ts its worker did not live to store, is found again
    instead of posted twice."""
    return {"event_type": APPROVAL_EVENT_TYPE, "event_payload": {"approval_id": approval_id}}


def approval_buttons(approval_id: str) -> Block:
    """Approve and Deny for one held call (the button's value is the approval's id)."""
    return {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "action_id": ACTION_APPROVE,
                "text": plain(m.APPROVE_LABEL),
                "value": approval_id,
                "style": "primary",
            },
            {
                "type": "button",
                "action_id": ACTION_DENY,
                "text": plain(m.DENY_LABEL),
                "value": approval_id,
                "style": "danger",
            },
        ],
    }


def render_approval(
    record: ApprovalRecord, *, not_run: NotRun | None = None
) -> tuple[str, list[Block]]:
    """The message's text and blocks for ``record`` as it stands (``not_run``: why the
    decided call was not run, where its status does not say)."""
    blocks: list[Block] = [
        section(m.approval_request(record.tool, record.requester)),
        section(m.approval_arguments(record.arguments)),
    ]
    if not_run is NotRun.RUN_ENDED and record.status.terminal:
        blocks.append(context(m.APPROVAL_CLOSED_RUN_ENDED))
    elif not_run is NotRun.STOPPED and record.status.terminal:
        blocks.append(context(m.approval_stopped_first(record.decided_by)))
    elif record.status.terminal:
        blocks.append(context(m.approval_decided(record.status.value, record.decided_by)))
    else:
        blocks.append(approval_buttons(record.id))
    return m.approval_fallback(record.tool), blocks


def home_approvals(
    records: Sequence[ApprovalRecord], viewer: str, public_channels: Collection[str]
) -> list[Block]:
    """App Home's list of held calls, with the same buttons as in the thread. The
    arguments of someone else's run outside a public channel are not shown (as its
    request is not)."""
    blocks: list[Block] = [section(m.heading(m.HEADING_APPROVALS))]
    for record in records[:HOME_APPROVALS_SHOWN]:
        blocks.append(section(m.approval_request(record.tool, record.requester)))
        if record.requester == viewer or record.thread.channel in public_channels:
            blocks.append(section(m.approval_arguments(record.arguments)))
        blocks.append(approval_buttons(record.id))
    hidden = len(records) - HOME_APPROVALS_SHOWN
    if hidden > 0:
        blocks.append(context(m.more_approvals(hidden)))
    return blocks
