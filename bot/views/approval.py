"""The approval message: a held tool call, its clipped arguments, Approve and Deny; once
decided, the same message says what became of the call and who decided. Pure functions;
the words come from :mod:`bot.messages`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot import messages as m
from bot.views.blocks import context, plain, section

if TYPE_CHECKING:
    from agent_core import ApprovalRecord
    from bot.views.blocks import Block

__all__ = ["ACTION_APPROVE", "ACTION_DENY", "approval_buttons", "render_approval"]

ACTION_APPROVE = "approval_approve"
ACTION_DENY = "approval_deny"


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


def render_approval(record: ApprovalRecord) -> tuple[str, list[Block]]:
    """The message's text and blocks for ``record`` as it stands."""
    blocks: list[Block] = [
        section(m.approval_request(record.tool, record.requester)),
        section(m.approval_arguments(record.arguments)),
    ]
    if record.status.terminal:
        blocks.append(context(m.approval_decided(record.status.value, record.decided_by)))
    else:
        blocks.append(approval_buttons(record.id))
    return m.approval_fallback(record.tool), blocks
