"""App Home and the ``/threadpilot`` list as Block Kit: pure functions from a listing.

What they show (docs/slack-setup.md, Home tab and /threadpilot): the viewer's live runs (a
link to the thread, state, turn, what it is doing, elapsed time, what its request has
spent so far where this worker holds it) with Stop and Abort, and the runs that ended
lately with their outcome, why they ended, what they spent (as their stored result
says; nothing where nothing was stored) and the feedback they got. An admin sees every
run of the workspace and a ``Stop all`` button that asks for confirmation first. The
same blocks answer ``/threadpilot list``, as an ephemeral message.

Live runs' buttons by state:

=============================== ============================================ =========
state                           shows                                        buttons
=============================== ============================================ =========
queued                          "Waiting to start"                           Stop, Abort
running                         "Working: turn n"                            Stop, Abort
stopping, or a Stop pending     "Stopping: ...", who asked                   Abort
an Abort (or restart) pending   "Aborting..." / "Pausing for a restart..."   none
=============================== ============================================ =========

Limits: a view holds at most 100 blocks and 250 kB of JSON (``view_too_large``), a
message 50 blocks and far less text than the sum of its sections (see
:mod:`bot.views.status`). The ended runs (at most ten) always fit; live runs fill what is
left, with a margin, and the rest are counted in one line. Wording lives in
:mod:`bot.messages`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_core import Outcome, RunResult, RunState, Spent, StopReason
from bot import messages as m
from bot.views import block_limits as limits
from bot.views.approval import home_approvals
from bot.views.blocks import (
    Block,
    abort_button,
    confirm,
    context,
    plain,
    section,
    stop_button,
    text_units,
)
from bot.views.status import BLOCKS_TEXT_BUDGET, RenderedMessage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

    from agent_core import ApprovalRecord, AuditEvent, RunRecord, StopRequestRecord

__all__ = [
    "ACTION_HOME_ABORT",
    "ACTION_HOME_STOP",
    "ACTION_STOP_ALL",
    "FEEDBACK_KIND",
    "HOME_CALLBACK_ID",
    "MAX_VIEW_BLOCKS",
    "MAX_VIEW_BYTES",
    "ListedRun",
    "Listing",
    "latest_votes",
    "render_home",
    "render_list_message",
]

ACTION_HOME_STOP = "threadpilot_home_stop"
ACTION_HOME_ABORT = "threadpilot_home_abort"
ACTION_STOP_ALL = "threadpilot_stop_all"
"""Action ids of App Home's (and the ``/threadpilot`` list's) buttons: not the status
message's, since a click there counts only on the run's own status message."""
HOME_CALLBACK_ID = "threadpilot_home"
STOP_ALL_BLOCK_ID = "threadpilot_stop_all"
FEEDBACK_KIND = "feedback"
"""The audit event a feedback press writes (``detail.value``: positive or negative)."""

MAX_VIEW_BLOCKS = limits.VIEW_BLOCKS
MAX_VIEW_BYTES = limits.VIEW_BYTES
"""Slack's limits for a view: 100 blocks, and ``view_too_large`` above 250 kB."""
_VIEW_BLOCK_BUDGET = MAX_VIEW_BLOCKS - 5
_VIEW_BYTES_BUDGET = 200_000
_MESSAGE_BLOCK_BUDGET = limits.MESSAGE_BLOCKS - 5
_TITLE_CHARS = 120


@dataclass(frozen=True, slots=True)
class ListedRun:
    """One run as the dashboard shows it: its row and what the other tables add."""

    record: RunRecord
    turns_done: int | None = None
    """The turn of its last checkpoint (None: no turn finished yet)."""
    pending: StopRequestRecord | None = None
    """The strongest stop request still waiting for the run's owner, if any."""
    feedback: tuple[AuditEvent, ...] = ()
    """Feedback presses on its terminal message (every press: :func:`latest_votes`
    counts each person once)."""
    spent: Spent | None = None
    """A live run's request spend so far, from the run itself (None: not held here)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """Everything one viewer's dashboard shows."""

    viewer: str
    admin: bool
    now: datetime
    live: tuple[ListedRun, ...] = ()
    ended: tuple[ListedRun, ...] = ()
    team_url: str | None = None
    """``https://<workspace>.slack.com/`` (``auth.test``'s ``url``), for thread links."""
    notice: str | None = None
    """An answer to something the viewer just did (a Stop, Stop all), shown on top."""
    live_not_listed: int = 0
    """Live runs that were not even read (more than the listing's limit)."""
    public_channels: frozenset[str] = frozenset()
    """Channels known to be public (:mod:`bot.slack_api.channels`). A run elsewhere (a DM, a group
    DM, a private channel, or one Slack did not describe) shows its request only to
    whoever asked for it."""
    approvals: tuple[ApprovalRecord, ...] = ()
    """Tool calls of the listed live runs waiting for approval, oldest first."""
    refused: bool = False
    """The viewer may not use the app (another organisation, a guest): only ``notice``,
    which says why, is shown."""


def render_home(listing: Listing) -> dict[str, Any]:
    """The Home tab view for ``views.publish``: within 100 blocks and 250 kB, whatever
    the listing holds."""
    used = len(json.dumps({"type": "home", "callback_id": HOME_CALLBACK_ID, "blocks": []}))

    def size(block: dict[str, Any]) -> int:
        return len(json.dumps(block, ensure_ascii=False).encode()) + 1

    blocks = _blocks(listing, _VIEW_BLOCK_BUDGET, _VIEW_BYTES_BUDGET - used, size, approvals=True)
    return {"type": "home", "callback_id": HOME_CALLBACK_ID, "blocks": blocks}


def render_list_message(listing: Listing) -> RenderedMessage:
    """The ``/threadpilot list`` answer (an ephemeral message): the same blocks, within a
    message's 50 blocks and text budget."""
    blocks = _blocks(listing, _MESSAGE_BLOCK_BUDGET, BLOCKS_TEXT_BUDGET, text_units)
    if listing.refused and listing.notice:
        return RenderedMessage(text=listing.notice, blocks=blocks)
    live = len(listing.live) + listing.live_not_listed
    text = f"{m.HEADING_LIVE_RUNS}: {live:,}"
    if listing.notice:
        text = f"{listing.notice} {text}"
    return RenderedMessage(text=text, blocks=blocks)


# -- layout ----------------------------------------------------------------------------


def _blocks(
    listing: Listing,
    max_blocks: int,
    budget: int,
    size: Callable[[Block], int],
    *,
    approvals: bool = False,
) -> list[Block]:
    """``approvals``: list the held calls with their buttons (App Home only: a click
    counts on the approval message or on App Home, not in a ``/threadpilot`` answer)."""
    if listing.refused:
        return [_title_block(), section(listing.notice or "")]
    head = _head(listing, approvals=approvals)
    tail = [{"type": "divider"}, section(m.heading(m.HEADING_ENDED_RUNS))]
    tail += [_ended_block(listing, run) for run in listing.ended] or [context(m.NO_ENDED_RUNS)]
    blocks = [*head, section(m.heading(m.HEADING_LIVE_RUNS))]
    if not listing.live:
        return [*blocks, context(m.NO_LIVE_RUNS), *tail]
    # The ended runs and the "more" line are reserved first; live runs take the rest.
    reserve = context(m.more_live_runs(len(listing.live) + listing.live_not_listed))
    room_blocks = max_blocks - len(blocks) - len(tail) - 1
    room = budget - sum(size(b) for b in (*blocks, *tail, reserve))
    shown = 0
    for run in listing.live:
        pair = _live_blocks(listing, run)
        cost = sum(size(b) for b in pair)
        if len(pair) > room_blocks or cost > room:
            break
        blocks += pair
        room_blocks -= len(pair)
        room -= cost
        shown += 1
    hidden = len(listing.live) - shown + listing.live_not_listed
    if hidden:
        blocks.append(context(m.more_live_runs(hidden)))
    return blocks + tail


def _head(listing: Listing, *, approvals: bool) -> list[Block]:
    now = listing.now
    intro = m.home_intro(admin=listing.admin, at_epoch=int(now.timestamp()), at_text=_utc_text(now))
    blocks: list[Block] = [_title_block(), context(intro)]
    if listing.notice:
        blocks.append(section(listing.notice))
    if approvals and listing.approvals:
        blocks += home_approvals(listing.approvals, listing.viewer, listing.public_channels)
    if listing.admin and listing.live:
        count = len(listing.live) + listing.live_not_listed
        blocks.append(
            {"type": "actions", "block_id": STOP_ALL_BLOCK_ID, "elements": [_stop_all(count)]}
        )
    return blocks


def _title_block() -> Block:
    return {"type": "header", "text": plain(m.HOME_TITLE)}


def _live_blocks(listing: Listing, run: ListedRun) -> list[Block]:
    record = run.record
    status, buttons = _live_state(run)
    elapsed = (listing.now - record.created_at).total_seconds()
    spending = m.spend(run.spent) if run.spent is not None else ""
    details = m.home_live_details(
        status, elapsed, record.requester, show_requester=listing.admin, spending=spending
    )
    blocks: list[Block] = [section(f"{_title(listing, record)}\n{details}")]
    if buttons:
        block_id = f"threadpilot_home_run:{record.id}"
        blocks.append({"type": "actions", "block_id": block_id, "elements": buttons})
    return blocks


def _live_state(run: ListedRun) -> tuple[str, list[Block]]:
    """(status line, buttons) for a live run, by its state and any pending request."""
    record, pending = run.record, run.pending
    run_id = record.id
    if pending is not None and pending.kind is StopReason.SHUTDOWN:
        return m.STATUS_RESTARTING, []
    if pending is not None and pending.kind is StopReason.ABORT:
        return m.status_aborting(pending.requested_by), []
    if pending is not None or record.state is RunState.STOPPING:
        who = pending.requested_by if pending is not None else record.stopped_by
        note = m.stop_requested_note(who)
        status = f"{m.HOME_STOPPING} · {note}" if note else m.HOME_STOPPING
        return status, [abort_button(ACTION_HOME_ABORT, run_id)]
    if record.state is RunState.QUEUED:
        status = m.HOME_QUEUED
    else:
        status = m.status_turn((run.turns_done or 0) + 1)
    return status, [stop_button(ACTION_HOME_STOP, run_id), abort_button(ACTION_HOME_ABORT, run_id)]


def _ended_block(listing: Listing, run: ListedRun) -> Block:
    record = run.record
    label, why = _ending(record)
    ended = record.updated_at
    details = m.home_ended_details(
        label,
        why,
        int(ended.timestamp()),
        _utc_text(ended),
        record.requester,
        show_requester=listing.admin,
        spending=stored_spending(record),
    )
    text = f"{_title(listing, record)}\n{details}"
    votes = latest_votes(run.feedback)
    if votes:
        positive = sum(votes.values())
        text += "\n" + m.feedback_line(positive, len(votes) - positive)
    return section(text)


def latest_votes(feedback: Iterable[AuditEvent]) -> dict[str, bool]:
    """Each person's vote on a run (True: thumbs up): their latest press counts, once."""
    votes: dict[str, bool] = {}
    for event in sorted(feedback, key=lambda e: e.at):  # stable: ties keep their order
        value = event.detail.get("value")
        if value in ("positive", "negative"):
            votes[event.actor] = value == "positive"
    return votes


def _ending(record: RunRecord) -> tuple[str, str]:
    """(outcome label, why it ended) of a terminal run, from its stored result if any."""
    outcome = record.outcome or _outcome_of(record.state)
    label = m.slack_outcome_label(
        outcome,
        stop_reason=record.stop_reason,
        exit_code=record.exit_code,
        stopped_by=record.stopped_by,
    )
    reason = _ended_because(record)
    if reason:
        return label, m.ended_because_words(reason)
    return label, m.exit_note(record.exit_code) if record.exit_code else ""


def _outcome_of(state: RunState) -> Outcome:
    # Terminal states are the canonical outcomes (agent_core.values.states).
    return Outcome(state.value)


def _ended_because(record: RunRecord) -> str:
    """The stored result's ``ended_because``, or, for a result stored before it existed,
    what the result records classifies as; "" when there is no readable result."""
    if not record.result:
        return ""
    try:
        result = RunResult.from_dict(record.result)
    except (KeyError, ValueError, TypeError):
        return ""
    return result.ended_because.value


def stored_spending(record: RunRecord) -> str:
    """What an ended run spent, worded, from its stored result: the request's whole
    ``spent`` (tokens, tool calls, cost) when the result carries one, else the tokens
    of its ``usage`` and its sub-agents'; "" when nothing readable (or only zeros) was
    stored: a result written before spend was kept says nothing rather than "0"."""
    stored = record.result
    if not stored:
        return ""
    try:
        spent = stored.get("spent")
        if isinstance(spent, dict):
            return m.spend(Spent.from_dict(spent))
        tokens = _stored_tokens(stored)
    except (TypeError, ValueError, AttributeError):
        return ""
    return m.format_tokens_short(tokens) if tokens else ""


def _stored_tokens(result: Any) -> int | None:
    """Tokens of a stored result and its children's; None if it records none."""
    usage = result.get("usage")
    if not isinstance(usage, dict):
        return None
    tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    for child in result.get("children") or ():
        tokens += _stored_tokens(child) or 0
    return tokens


def _title(listing: Listing, record: RunRecord) -> str:
    url = _thread_url(listing.team_url, record)
    channel = record.thread.channel
    if record.requester != listing.viewer and channel not in listing.public_channels:
        return m.home_run_title(m.PRIVATE_REQUEST, url, channel)
    task = " ".join(record.task.split()) or m.UNTITLED_RUN
    if len(task) > _TITLE_CHARS:
        task = task[: _TITLE_CHARS - 1].rstrip() + "…"
    return m.home_run_title(m.escape(task), url, channel)


def _thread_url(team_url: str | None, record: RunRecord) -> str | None:
    """The run's status message in its thread, as ``chat.getPermalink`` writes links
    (no call needed: the workspace URL and the message's ids make it)."""
    if not team_url:
        return None
    thread = record.thread
    target = record.status_ts or thread.thread_ts
    url = f"{team_url.rstrip('/')}/archives/{thread.channel}/p{target.replace('.', '')}"
    if target != thread.thread_ts:
        url += f"?thread_ts={thread.thread_ts}&cid={thread.channel}"
    return url


def _utc_text(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC")


# -- controls --------------------------------------------------------------------------


def _stop_all(count: int) -> Block:
    return {
        "type": "button",
        "action_id": ACTION_STOP_ALL,
        "text": plain(m.STOP_ALL_LABEL),
        "value": "all",
        "style": "danger",
        "confirm": confirm(
            m.STOP_ALL_CONFIRM_TITLE,
            m.stop_all_confirm_text(count),
            m.STOP_ALL_CONFIRM_YES,
            m.STOP_ALL_CONFIRM_NO,
        ),
    }


# -- blocks ----------------------------------------------------------------------------
