"""The approval message: a held tool call, its arguments, Approve and Deny; once decided,
the same message says what became of the call and who decided. Pure functions; the
words come from :mod:`bot.messages`.

The arguments are shown as the call will receive them
(:func:`agent_core.shown_arguments`), inert (:mod:`bot.views.code_text`). As much of
them as fits in one section is in the message; when some are left out, the message says
how many and **Show all** opens :func:`arguments_view`, a modal with all of them (or, past
what Slack holds even there, all it can hold and how many characters are missing)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agent_core import shown_arguments
from bot import messages as m
from bot.views import block_limits as limits
from bot.views.blocks import context, plain, section
from bot.views.code_text import code_blocks

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from agent_core import ApprovalRecord
    from bot.views.blocks import Block

__all__ = [
    "ACTION_APPROVE",
    "ACTION_DENY",
    "ACTION_SHOW_ALL",
    "APPROVAL_EVENT_TYPE",
    "ARGUMENTS_UNITS",
    "HOME_APPROVALS_SHOWN",
    "HOME_ARGUMENTS_UNITS",
    "NotRun",
    "approval_buttons",
    "approval_metadata",
    "arguments_view",
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
ACTION_SHOW_ALL = "approval_show_all"

ARGUMENTS_UNITS = limits.SECTION_TEXT - 100
"""The arguments' section of an approval message (and of each piece of them in the
modal), in UTF-16 units: a section holds 3,000, kept with a margin."""
HOME_ARGUMENTS_UNITS = 600
"""The arguments' section of a held call on App Home, which lists several."""
_VIEW_SECTIONS = limits.VIEW_BLOCKS - 5
_VIEW_BYTES = 200_000
"""What the modal's pieces of the arguments may take (``view_too_large`` is at 250 kB)."""


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
        *_arguments(record, ARGUMENTS_UNITS),
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
        if may_see_arguments(record, viewer, public_channels):
            blocks += _arguments(record, HOME_ARGUMENTS_UNITS)
        blocks.append(approval_buttons(record.id))
    hidden = len(records) - HOME_APPROVALS_SHOWN
    if hidden > 0:
        blocks.append(context(m.more_approvals(hidden)))
    return blocks


def may_see_arguments(
    record: ApprovalRecord, viewer: str, public_channels: Collection[str]
) -> bool:
    """Whether App Home shows ``viewer`` the arguments of ``record`` (its requester, or
    anyone for a run in a public channel)."""
    return record.requester == viewer or record.thread.channel in public_channels


def arguments_view(record: ApprovalRecord) -> dict[str, Any]:
    """The modal **Show all** opens: every character of the arguments that Slack holds."""
    shown = code_blocks(
        shown_arguments(record.arguments), budget=ARGUMENTS_UNITS, most=_VIEW_SECTIONS
    )
    blocks: list[Block] = [section(m.arguments_heading(record.tool))]
    room = _VIEW_BYTES
    left_out = shown.left_out
    for index, text in enumerate(shown.blocks):
        block = section(text)
        room -= len(json.dumps(block))
        if room < 0:
            left_out += sum(shown.sizes[index:])
            break
        blocks.append(block)
    if left_out:
        blocks.append(context(m.arguments_too_long(left_out)))
    return {
        "type": "modal",
        "title": plain(m.ARGUMENTS_TITLE),
        "close": plain(m.CLOSE_LABEL),
        "blocks": blocks,
    }


def _arguments(record: ApprovalRecord, budget: int) -> list[Block]:
    """The start of the arguments that fits ``budget``; with a note and **Show all** if
    some are left out."""
    shown = code_blocks(shown_arguments(record.arguments), budget=budget)
    blocks = [section(shown.blocks[0])]
    if shown.left_out:
        note = section(m.arguments_left_out(shown.left_out))
        note["accessory"] = {
            "type": "button",
            "action_id": ACTION_SHOW_ALL,
            "text": plain(m.SHOW_ALL_LABEL),
            "value": record.id,
        }
        blocks.append(note)
    return blocks
