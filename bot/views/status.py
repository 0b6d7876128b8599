"""The run's status message as Block Kit: pure functions from a snapshot to a message.

One status message per run, updated in place. By phase:

=========== ============================================== ===================
phase        shows                                          buttons
=========== ============================================== ===================
queued       "Queued: n ahead" (waiting for MAX_LIVE_RUNS   Stop, Abort
             room on some worker)
starting     "Starting...", elapsed, spend                  Stop, Abort
running      "Working: turn n", activity, elapsed, spend    Stop, Abort
stopping     level 1: "Stopping: finishing this step, then  Abort only
             a summary. Stop again or Abort to cut it off."
             level 2: "Aborting..." (and why, when it was   none
             stopping or FINAL_TURN_TIMEOUT ran out)
             a shutdown: "Pausing for a restart..."         none
done         Outcome, Evidence, Artifacts, Handoff; why it  feedback; Resume
             ended and whether it resumes                   now / Don't resume
                                                            while one is ahead;
                                                            Continue once the
                                                            budget is spent
=========== ============================================== ===================

The stopping phase shows where the run is on the stop ladder (docs/stopping.md,
Escalation): level 1 is a Stop (one final turn for a summary), level 2 an Abort, which
a second Stop, the Abort button or ``FINAL_TURN_TIMEOUT`` running out brings.

*Spend* is what the request (the run, its sub-agents, what it continues) has spent so far:
"12.4k tokens · 7 tool calls · $0.03", the cost only when prices are set; the terminal
report's small print says it too.

The answer streamed so far is appended below a divider when the caller has no streaming
surface for it (the ``chat.update`` fallback).

A run that delegated shows its sub-agents as a task list ("Sub-agents"), under the status
line while it works and under the handoff once it has ended: each one's task, what it is
doing, or how it ended.

Everything here is about fitting Slack's limits without ever losing the handoff. Each
handoff part has its own fixed budget, so the four parts always fit; the answer gets
whatever is left of the whole message's budget and is cut first, with a visible marker.
Text from the model is escaped (``&``, ``<``, ``>``); mentions come only from
:mod:`bot.messages`. Wording lives in :mod:`bot.messages`, never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agent_core import StopReason, strip_softeners
from bot import messages as m
from bot.views.action_ids import (
    ACTION_ABORT,
    ACTION_CONTINUE,
    ACTION_DONT_RESUME,
    ACTION_FEEDBACK,
    ACTION_RESUME_NOW,
    ACTION_STOP,
    ACTION_SUB_AGENT,
    CONTROLS_BLOCK_ID,
    RESUME_BLOCK_ID,
    SUB_AGENT_ABORT,
    SUB_AGENT_BLOCK_PREFIX,
    SUB_AGENT_STEER,
    SUB_AGENT_STOP,
)
from bot.views.blocks import (
    CLOSE_FENCE,
    FENCE,
    REOPEN_FENCE,
    Block,
    abort_button,
    clip,
    context,
    fit,
    plain,
    prefix_chars,
    section,
    soft_cut,
    stop_button,
    texts,
    units,
)
from bot.views.ending import STATUS_BUDGET, EndingView, ending_blocks

if TYPE_CHECKING:
    from agent_core import RunResult, Spent

__all__ = [
    "ACTION_ABORT",
    "ACTION_CONTINUE",
    "ACTION_DONT_RESUME",
    "ACTION_FEEDBACK",
    "ACTION_RESUME_NOW",
    "ACTION_STOP",
    "ACTION_SUB_AGENT",
    "BLOCKS_TEXT_BUDGET",
    "CONTROLS_BLOCK_ID",
    "RESUME_BLOCK_ID",
    "RUN_EVENT_TYPE",
    "SECTION_TEXT_LIMIT",
    "SUB_AGENT_ABORT",
    "SUB_AGENT_BLOCK_PREFIX",
    "SUB_AGENT_STEER",
    "SUB_AGENT_STOP",
    "TEXT_LIMIT",
    "ChildTask",
    "EndingView",
    "Phase",
    "RenderedMessage",
    "StatusSnapshot",
    "render_status",
    "run_metadata",
    "sub_agent_choice",
    "sub_agent_controls",
]

RUN_EVENT_TYPE = "threadpilot_run"
"""The ``event_type`` of the message metadata that ties a message to its run."""


def run_metadata(run_id: str) -> dict[str, Any]:
    """Slack message metadata naming the run a message belongs to.

    Read back with ``conversations.replies(include_all_metadata=True)``: how a post whose
    answer was lost (a 5xx, a timeout) is found again instead of posted twice.
    """
    return {"event_type": RUN_EVENT_TYPE, "event_payload": {"run_id": run_id}}


# -- limits ----------------------------------------------------------------------------
# Slack's documented limits are 3,000 characters per section and 50 blocks, but
# `msg_blocks_too_long` is reported well below the sum of those (around 12-13k
# characters of block text in total: slackapi/bolt-js#2509 and #2867). So the whole
# message's block text has a budget of its own, with a margin for JSON overhead.
# Lengths are counted in UTF-16 code units, the larger of the two ways the limit may be
# counted, so emoji-heavy text cannot slip past.
SECTION_TEXT_LIMIT = 2_900
BLOCKS_TEXT_BUDGET = 10_000
TEXT_LIMIT = 3_000
"""The notification fallback (`text`); Slack truncates at 40,000 but only a line shows."""

# Fixed budgets for the handoff parts. Their sum (plus headings and the small print)
# stays far below BLOCKS_TEXT_BUDGET, which is what guarantees they survive.
_EVIDENCE_BUDGET = 2_400
_ARTIFACTS_BUDGET = 1_500
_ARTIFACT_ITEM_BUDGET = 300
_QUESTION_BUDGET = 1_000
_HANDOFF_BUDGET = 1_500
_UNDELIVERED_BUDGET = 1_000
_UNDELIVERED_ITEM_BUDGET = 300
_CHILDREN_BUDGET = 1_200
_CHILD_TASK_BUDGET = 120
_CHILD_LINE_BUDGET = 300
_LIVE_CHILD_BUDGET = 400
_MIN_ANSWER_BUDGET = 200
"""Below this, an answer excerpt is too short to help and is left out."""

Phase = Literal["queued", "starting", "running", "stopping", "done"]


@dataclass(frozen=True, slots=True)
class ChildTask:
    """A sub-agent the run started (``delegate``), shown as one of the run's tasks."""

    child_id: str
    task: str
    """What it was asked to do (the model's words)."""
    activity: str = m.SUB_AGENT_STARTING
    """While it works: an already-worded line (:func:`bot.messages.sub_agent_turn`)."""
    result: RunResult | None = None
    """Once it has ended."""
    stop: StopReason | None = None
    """A Stop or Abort asked of it while it works (its own, or its parent's)."""
    stopped_by: str | None = None
    """Who asked for ``stop``."""


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """What the status message should show now: built by the run's session
    (:mod:`bot.runs.session`) from its events, or from the stored run (the queue, the
    reconciler)."""

    run_id: str
    requester: str
    """The Slack user id of whoever asked for the run."""
    phase: Phase
    turn: int = 0
    activity: str = ""
    """An already-worded line from :mod:`bot.messages`, e.g. ``activity_tool("search")``."""
    elapsed_s: float = 0.0
    spent: Spent | None = None
    """What the request has spent so far (tokens, tool calls, cost when priced); None
    when not known (a snapshot built from the stored run): then the terminal report
    shows the run's own tokens from its result."""
    stop_reason: StopReason | None = None
    """The pending request while ``stopping``."""
    stop_requested_by: str | None = None
    escalated_from: str | None = None
    """Who asked for the Stop (level 1) that the pending Abort (level 2) cut short; None
    if the run was not stopping when the Abort came. Kept once the run is done."""
    final_turn_timeout_s: float | None = None
    """Set when the pending Abort is ``FINAL_TURN_TIMEOUT`` (this many seconds) running
    out on the final turn."""
    answer: str = ""
    """The answer streamed so far, for the ``chat.update`` fallback (may be long)."""
    result: RunResult | None = None
    """Set when ``phase == "done"``."""
    answer_streamed: bool = False
    """True when the answer already has its own streamed message: then neither
    ``answer`` nor ``result.final_text`` is repeated here."""
    ending: EndingView | None = None
    """Once done: why the run ended and what becomes of it; None says nothing."""
    children: tuple[ChildTask, ...] = ()
    """The run's sub-agents, oldest first."""
    queued_ahead: int = 0
    """While ``queued``: how many runs wait before it."""
    history_note: str = ""
    """Said under the status while the run is live (e.g. that older thread messages
    were not read, :data:`bot.messages.HISTORY_NOT_READ`)."""

    def __post_init__(self) -> None:
        if self.phase == "done" and self.result is None:
            raise ValueError(f"run {self.run_id}: a 'done' status needs the RunResult")


@dataclass(frozen=True, slots=True)
class RenderedMessage:
    """Arguments for ``chat.postMessage`` / ``chat.update``: blocks plus fallback text,
    and the metadata naming the run (sent with the post; an update keeps it)."""

    text: str
    blocks: list[Block]
    metadata: dict[str, Any] | None = None

    def as_kwargs(self) -> dict[str, Any]:
        extra = {"metadata": self.metadata} if self.metadata is not None else {}
        return {"text": self.text, "blocks": self.blocks, **extra}


def render_status(snapshot: StatusSnapshot) -> RenderedMessage:
    """The status message for ``snapshot``, within Slack's limits whatever its size."""
    if snapshot.result is not None and snapshot.phase == "done":
        return _render_done(snapshot, snapshot.result)
    return _render_live(snapshot)


# -- live phases -----------------------------------------------------------------------


def _render_live(snapshot: StatusSnapshot) -> RenderedMessage:
    status, note, buttons = _live_state(snapshot)
    if note == status:  # e.g. activity=STATUS_STARTING while starting: say it once
        note = ""
    lines = m.heading(status) + (f"\n{note}" if note else "")
    # A run being cut off (an Abort, a restart) takes its sub-agents with it: no
    # controls on them then.
    reachable = snapshot.stop_reason is None or not snapshot.stop_reason.cancels
    blocks = [
        section(clip(lines, STATUS_BUDGET)),
        *_children_blocks(snapshot.children, controls=reachable),
        context(m.live_details(snapshot.elapsed_s, snapshot.spent, snapshot.requester)),
    ]
    if snapshot.history_note:
        blocks.append(context(snapshot.history_note))
    if buttons:
        blocks.append({"type": "actions", "block_id": CONTROLS_BLOCK_ID, "elements": buttons})
    if not snapshot.answer_streamed:
        blocks += _answer_blocks(snapshot.answer, _remaining(blocks), heading=None)
    text = clip(m.fallback_live(status, note), TEXT_LIMIT)
    return RenderedMessage(text=text, blocks=blocks, metadata=run_metadata(snapshot.run_id))


def _live_state(snapshot: StatusSnapshot) -> tuple[str, str, list[Block]]:
    """(status line, second line, buttons) for a run that has not ended."""
    run_id = snapshot.run_id
    if snapshot.phase == "stopping":
        if snapshot.stop_reason is StopReason.ABORT:
            status = m.status_aborting(
                snapshot.stop_requested_by,
                after_stop=snapshot.escalated_from is not None,
                final_turn_timeout_s=snapshot.final_turn_timeout_s,
            )
            return status, "", []
        if snapshot.stop_reason is StopReason.SHUTDOWN:
            return m.STATUS_RESTARTING, m.RESTART_NOTE, []
        # Level 1 can still be escalated, so Abort stays. Stop goes (a stopping run shows
        # only Abort): a second Stop comes from Slack's own stop button or a stop word.
        note = m.stop_requested_note(snapshot.stop_requested_by, snapshot.activity)
        return m.STATUS_STOPPING, note, [abort_button(ACTION_ABORT, run_id)]
    if snapshot.phase == "queued":
        status = m.status_queued(snapshot.queued_ahead)
        return (
            status,
            m.QUEUED_NOTE,
            [stop_button(ACTION_STOP, run_id), abort_button(ACTION_ABORT, run_id)],
        )
    status = m.STATUS_STARTING if snapshot.phase == "starting" else m.status_turn(snapshot.turn)
    return (
        status,
        snapshot.activity,
        [stop_button(ACTION_STOP, run_id), abort_button(ACTION_ABORT, run_id)],
    )


# -- the terminal report ---------------------------------------------------------------


def _render_done(snapshot: StatusSnapshot, result: RunResult) -> RenderedMessage:
    handoff = result.handoff
    label = m.result_label(result)
    evidence = fit(handoff.evidence, _EVIDENCE_BUDGET) if handoff.evidence.strip() else ""
    # The streamed text may still carry a closing softener; the result's never does.
    answer = (
        "" if snapshot.answer_streamed else strip_softeners(snapshot.answer or result.final_text)
    )
    same = answer.strip() == handoff.evidence.strip()
    if same and evidence != fit(handoff.evidence, BLOCKS_TEXT_BUDGET * 10):
        # A long answer that is its own evidence: shown once, below, with all the room.
        evidence = m.EVIDENCE_IS_THE_ANSWER
    next_step = _handoff_text(result)
    outcome = label
    if snapshot.escalated_from is not None and result.stop_reason is StopReason.ABORT:
        # Where it went on the stop ladder: a Stop first, then cut off (level 2).
        ladder = m.cut_off_after_stop(snapshot.escalated_from, snapshot.final_turn_timeout_s)
        outcome = f"{label}\n{ladder}"
    blocks = [
        section(_part(m.HEADING_OUTCOME, outcome)),
        context(
            m.result_details(
                result.exit_code,
                result.turns,
                result.timings.duration_s,
                result.usage.total_tokens,
                snapshot.spent,
            )
        ),
        section(_part(m.HEADING_EVIDENCE, evidence or m.NO_EVIDENCE)),
        section(_part(m.HEADING_ARTIFACTS, _artifacts_text(handoff.artifacts))),
        section(_part(m.HEADING_HANDOFF, next_step + _undelivered_text(result))),
        *_children_blocks(snapshot.children),
    ]
    blocks += ending_blocks(snapshot.run_id, snapshot.ending)
    if answer.strip() and (not same or evidence == m.EVIDENCE_IS_THE_ANSWER):
        blocks += _answer_blocks(answer, _remaining(blocks), heading=m.HEADING_ANSWER)
    blocks.append(_feedback_block(snapshot.run_id))
    text = clip(m.fallback_done(label, next_step), TEXT_LIMIT)
    return RenderedMessage(text=text, blocks=blocks, metadata=run_metadata(snapshot.run_id))


def _feedback_block(run_id: str) -> Block:
    """Thumbs up and down under the terminal report (Slack's ``feedback_buttons``, in a
    ``context_actions`` block); a press is recorded as an audit event."""
    return {
        "type": "context_actions",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": ACTION_FEEDBACK,
                "positive_button": {
                    "text": plain(m.FEEDBACK_POSITIVE_LABEL),
                    "accessibility_label": m.FEEDBACK_POSITIVE_HINT,
                    "value": f"positive:{run_id}",
                },
                "negative_button": {
                    "text": plain(m.FEEDBACK_NEGATIVE_LABEL),
                    "accessibility_label": m.FEEDBACK_NEGATIVE_HINT,
                    "value": f"negative:{run_id}",
                },
            }
        ],
    }


def _part(title: str, body: str) -> str:
    return f"{m.heading(title)}\n{body}"


def _handoff_text(result: RunResult) -> str:
    """Who acts next: the blocking question first (askuserQuestion), then the next step."""
    handoff = result.handoff
    raw_question = (handoff.question or "").strip()
    raw_next = handoff.next_step.strip()
    question = fit(raw_question, _QUESTION_BUDGET) if raw_question else ""
    if raw_next and raw_next != raw_question:
        next_step = fit(raw_next, _HANDOFF_BUDGET - units(question) - 1)
    else:
        next_step = m.default_next_step(result.outcome)
    return "\n".join(part for part in (question, next_step) if part)


def _undelivered_text(result: RunResult) -> str:
    """The replies the model never saw (a Stop won), listed after the
    handoff within their own budget, each cut to fit; "" when there are none."""
    replies = result.undelivered_guidance
    if not replies:
        return ""
    lines = [m.UNDELIVERED_GUIDANCE]
    used = units(lines[0])
    for index, reply in enumerate(replies):
        text = fit(" ".join(reply.text.split()), _UNDELIVERED_ITEM_BUDGET, sep=" ")
        line = m.undelivered_reply(reply.author, text)
        last = index == len(replies) - 1
        reserve = 0 if last else units(m.more_artifacts(len(replies))) + 1
        if used + units(line) + 1 > _UNDELIVERED_BUDGET - reserve:
            lines.append(m.more_artifacts(len(replies) - index))
            break
        lines.append(line)
        used += units(line) + 1
    return "\n\n" + "\n".join(lines)


def _artifacts_text(artifacts: tuple[str, ...]) -> str:
    """One bullet per artifact until the budget runs out, then "... and N more"."""
    items = [a for a in (" ".join(a.split()) for a in artifacts) if a]
    if not items:
        return m.NO_ARTIFACTS
    reserve = units(m.more_artifacts(len(items))) + 1
    lines: list[str] = []
    used = 0
    for index, item in enumerate(items):
        line = m.bullet(fit(item, _ARTIFACT_ITEM_BUDGET, sep=" "))
        last = index == len(items) - 1
        if used + units(line) + 1 > _ARTIFACTS_BUDGET - (0 if last else reserve):
            lines.append(m.more_artifacts(len(items) - index))
            break
        lines.append(line)
        used += units(line) + 1
    return "\n".join(lines)


# -- sub-agents ------------------------------------------------------------------------


def _children_blocks(children: tuple[ChildTask, ...], *, controls: bool = False) -> list[Block]:
    """The run's ended sub-agents as a task list within its own budget (the newest are
    kept, oldest first, and the earlier ones counted), then each live one as a section of
    its own, with its controls (``controls``) as an ``overflow`` menu."""
    live = [c for c in children if c.result is None][-MAX_LIVE_SECTIONS:]
    shown = {c.child_id for c in live}
    listed = tuple(c for c in children if c.child_id not in shown)
    return [*_listed_children(listed), *(_live_child(c, controls=controls) for c in live)]


MAX_LIVE_SECTIONS = 8
"""At most this many live sub-agents get a section (a run has at most 4 live at once;
the margin covers grandchildren's parents shown late)."""


def _live_child(child: ChildTask, *, controls: bool) -> Block:
    task = clip(m.escape(" ".join(child.task.split())), _CHILD_TASK_BUDGET)
    text = m.sub_agent_live(task, child.activity, child.stop, child.stopped_by)
    text = clip(text, _LIVE_CHILD_BUDGET)
    block = section(text)
    block["block_id"] = SUB_AGENT_BLOCK_PREFIX + child.child_id
    menu = sub_agent_controls(child.child_id, child.stop) if controls else None
    if menu is not None:
        block["accessory"] = menu
    return block


def sub_agent_controls(child_id: str, stop: StopReason | None) -> Block | None:
    """A live sub-agent's ``overflow``: Stop, Abort and Steer… while it works; only Abort
    while it is stopping (as the run's own buttons); none once it is being cut off."""
    if stop is not None and stop.cancels:
        return None
    choices = [(SUB_AGENT_ABORT, m.ABORT_LABEL)]
    if stop is None:
        choices = [(SUB_AGENT_STOP, m.STOP_LABEL), *choices, (SUB_AGENT_STEER, m.STEER_LABEL)]
    return {
        "type": "overflow",
        "action_id": ACTION_SUB_AGENT,
        "options": [
            {"text": plain(label), "value": sub_agent_choice(verb, child_id)}
            for verb, label in choices
        ],
    }


def sub_agent_choice(verb: str, child_id: str) -> str:
    """An overflow option's ``value``: what to do, and to which sub-agent."""
    return f"{verb}:{child_id}"


def _listed_children(children: tuple[ChildTask, ...]) -> list[Block]:
    if not children:
        return []
    title = m.heading(m.HEADING_SUB_AGENTS)
    reserve = units(m.earlier_sub_agents(len(children))) + 1
    used = units(title)
    kept: list[str] = []
    for index, child in enumerate(reversed(children)):
        line = clip(_child_line(child), _CHILD_LINE_BUDGET)
        room = _CHILDREN_BUDGET - (0 if index == len(children) - 1 else reserve)
        if used + units(line) + 1 > room:
            break
        kept.append(line)
        used += units(line) + 1
    left = len(children) - len(kept)
    lines = [title, *([m.earlier_sub_agents(left)] if left else []), *reversed(kept)]
    return [section("\n".join(lines))]


def _child_line(child: ChildTask) -> str:
    task = clip(m.escape(" ".join(child.task.split())), _CHILD_TASK_BUDGET)
    if child.result is not None:
        return m.sub_agent_ended(task, child.result)
    return m.sub_agent_working(task, child.activity)


# -- the answer ------------------------------------------------------------------------


def _answer_blocks(answer: str, budget: int, *, heading: str | None) -> list[Block]:
    """The answer under a divider, cut to ``budget`` and split into sections."""
    if not answer.strip():
        return []
    prefix = f"{m.heading(heading)}\n" if heading else ""
    # Each section may need a fence closed and reopened (8 units): reserve for as many
    # sections as soft cuts (at worst three quarters full) can produce.
    sections = budget // (SECTION_TEXT_LIMIT * 3 // 4) + 1
    room = budget - units(prefix) - sections * (len(CLOSE_FENCE) + len(REOPEN_FENCE))
    if room < _MIN_ANSWER_BUDGET:
        return []
    pieces = _split(fit(answer.strip(), room), SECTION_TEXT_LIMIT - len(prefix))
    return [{"type": "divider"}] + [
        section(prefix + piece if i == 0 else piece) for i, piece in enumerate(pieces)
    ]


def _split(text: str, size: int) -> list[str]:
    """Split escaped mrkdwn into pieces of at most ``size`` units, at line breaks when
    possible, closing a code fence at the end of a piece and reopening it in the next."""
    pieces: list[str] = []
    reopen = False
    while text:
        head = REOPEN_FENCE if reopen else ""
        room = size - len(head) - len(CLOSE_FENCE)
        if units(text) <= room:
            piece, text = text, ""
        else:
            cut = soft_cut(text, prefix_chars(text, room, escaped=True))
            piece, text = text[:cut].rstrip(), text[cut:].lstrip("\n")
        piece = head + piece
        reopen = piece.count(FENCE) % 2 == 1
        if reopen:
            piece += CLOSE_FENCE
        if piece.strip():
            pieces.append(piece)
    return pieces


# -- blocks ----------------------------------------------------------------------------


def _remaining(blocks: list[Block]) -> int:
    return BLOCKS_TEXT_BUDGET - sum(units(t) for t in texts(blocks))
