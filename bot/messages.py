"""Every piece of text threadpilot shows people in Slack, in one place.

What belongs here: status lines, button and dialog labels, outcome labels, section
headings, ephemeral replies and notification fallbacks, as constants or small functions
that fill in names and numbers. What does not: layout (``bot/views``), limits and
truncation policy (``bot/views/status.py``), and anything that talks to Slack.

Strings are Slack ``mrkdwn``, except the button and dialog labels (``plain_text``) and
:data:`STREAM_RETRYING` (streamed markdown, written to read the same in both).
Functions that take text from outside (tool names, error reasons, actor names) escape it
with :func:`escape`, so their results can go into a block as they are. Mentions are only
ever built by :func:`mention`, which renders non-people (``system:...``,
``signal:...``) as "threadpilot" instead of a broken ``<@system:...>``.
"""

from __future__ import annotations

import re
from datetime import UTC
from typing import TYPE_CHECKING

from agent_core import ExitCode, Outcome, StopReason, count
from agent_core import outcome_label as core_outcome_label

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core import RunResult, Spent

# -- names and escaping ----------------------------------------------------------------

APP_NAME = "threadpilot"

# Slack user ids: U... for workspace users, W... for Enterprise Grid users.
_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")
# Actors that are the app itself rather than a person (see agent_core/run/loop.py, cli.py).
_SYSTEM_PREFIXES = ("system:", "signal:")
# An unknown actor name is shown as text; keep it short so it cannot crowd the label.
_MAX_ACTOR_CHARS = 80


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters.

    Used on everything the model or a tool produced, so ``<!channel>`` or ``<@U123>`` in
    an answer shows as text instead of pinging people, and ``a < b`` does not vanish.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def is_person(actor: str | None) -> bool:
    """True if ``actor`` is a Slack user id (something :func:`mention` can @-mention)."""
    return actor is not None and _USER_ID.fullmatch(actor) is not None


def mention(actor: str | None) -> str:
    """How to name whoever did something: ``<@U1>``, ``threadpilot``, or their name.

    ``None`` or an empty actor reads as "someone"; callers that can say nothing better
    usually leave the name out instead.
    """
    if not actor:
        return "someone"
    if is_person(actor):
        return f"<@{actor}>"
    if actor.startswith(_SYSTEM_PREFIXES):
        return APP_NAME
    return escape(actor[:_MAX_ACTOR_CHARS])


def _code(text: str) -> str:
    """Inline code for a short outside name; backticks would end the span early."""
    inner = escape(text.replace("`", "'"))
    return f"`{inner}`"


# -- numbers ---------------------------------------------------------------------------


def format_elapsed(seconds: float) -> str:
    """``mm:ss`` under an hour, ``h:mm:ss`` from then on."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


def format_tokens(tokens: int) -> str:
    return count(tokens, "token")


def format_turns(turns: int) -> str:
    return count(turns, "turn")


def format_tokens_short(tokens: int) -> str:
    """Tokens at a glance: "950 tokens", "12.4k tokens", "3.2M tokens"."""
    if tokens < 1_000:
        return count(tokens, "token")
    if tokens < 999_950:  # would round to "1000k"
        size, suffix = 1_000, "k"
    elif tokens < 999_950_000:
        size, suffix = 1_000_000, "M"
    else:
        size, suffix = 1_000_000_000, "B"
    shown = f"{tokens / size:,.1f}".removesuffix(".0")
    return f"{shown}{suffix} tokens"


def format_cost(usd: float) -> str:
    """Dollars to the cent; under a cent, said so rather than "$0.00"."""
    if 0 < usd < 0.005:
        return "under $0.01"
    return f"${usd:,.2f}"


def spend(spent: Spent) -> str:
    """What a request has spent: "12.4k tokens · 7 tool calls · $0.03" (the cost only
    when prices are set)."""
    parts = [format_tokens_short(spent.total_tokens), count(spent.tool_calls, "tool call")]
    if spent.cost_usd is not None:
        parts.append(format_cost(spent.cost_usd))
    return " · ".join(parts)


# -- the live status line --------------------------------------------------------------

STATUS_STARTING = "Starting..."
HISTORY_NOT_READ = (
    "Older thread messages were not read: Slack lets this app read a thread only once a "
    "minute. This run starts from what threadpilot kept of the thread."
)
THREAD_READ_IN_PART_LIMITED = (
    "Slack lets this app read only the start of a thread, once a minute: the later "
    "messages of this thread were not read"
)
HISTORY_NOT_READ_TOOL = (
    "The thread could not be read now: Slack lets this app read a thread only once a "
    "minute per workspace, and that allowance is spent. Older thread messages were not "
    "read; go on with what you have, or try again in a minute."
)


def status_queued(ahead: int) -> str:
    """A run waiting for room under MAX_LIVE_RUNS, and how many wait before it."""
    return f"Queued: {ahead:,} ahead"


QUEUED_NOTE = "Every worker is busy; this run starts when one has room. Stop or Abort cancels it."
QUEUED_NEVER_STARTED = (
    "It was still waiting in the queue: it never started, and the model was never asked."
)
QUEUED_NEXT_STEP = "Nothing is running. Mention me again to start it anew."
QUEUED_ELSEWHERE = (
    "Still waiting for a worker with room. When one takes this request it answers in a "
    "new message below."
)
ACTIVITY_WAITING_FOR_MODEL = "Waiting for the model"
ACTIVITY_WRITING_ANSWER = "Writing the answer"
ACTIVITY_FINAL_REPORT = "Writing the final report"


def status_turn(turn: int) -> str:
    return f"Working: turn {turn}"


def activity_tool(name: str) -> str:
    return f"Running the tool {_code(name)}"


def activity_retry(seconds: float, why: str) -> str:
    """The model call failed in a retryable way; the run waits ``seconds`` first."""
    reason = f": {escape(why)}" if why else ""
    return f"Waiting to retry the model (in {max(0, round(seconds))}s{reason})"


STREAM_RETRYING = "_(The model call failed partway and is being retried; text above may repeat.)_"
"""Pushed into a streamed answer when a step restarts and its partial text is void."""
ANSWER_CONTINUES = "_(continued in the next message)_"
"""Ends a part of an answer too long for one Slack message; the rest follows."""


def earlier_tasks(count: int) -> str:
    """Ends the task list's title when only its latest tasks fit in the answer message."""
    return f"(and {count:,} earlier task{'s' if count != 1 else ''})"


# -- tools' progress and sub-agents ---------------------------------------------------

ACTIVITY_SUB_AGENTS = "Waiting for sub-agents"
HEADING_SUB_AGENTS = "Sub-agents"
SUB_AGENT_STARTING = "starting"
SUB_AGENT_REPORTING = "writing its report"
_MAX_PROGRESS_MESSAGE_CHARS = 200


def activity_tool_progress(
    name: str, progress: float, total: float | None, message: str | None
) -> str:
    """A running tool said how far it has got (an MCP server's progress notification)."""
    amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    said = " ".join((message or "").split())[:_MAX_PROGRESS_MESSAGE_CHARS]
    head = activity_tool(name)
    return f"{head}: {escape(said)} ({amount})" if said else f"{head} ({amount})"


def sub_agent_turn(turn: int, doing: str = "") -> str:
    """What a sub-agent is doing: its turn, and the tool it runs (worded here) if any."""
    return f"turn {turn}: {doing}" if doing else f"turn {turn}"


def sub_agent_working(task: str, activity: str) -> str:
    """A live sub-agent's line; ``task`` is already escaped and cut."""
    return f":hourglass_flowing_sand: {task} · {activity}"


_SUB_AGENT_ICONS = {
    Outcome.FINISHED: ":white_check_mark:",
    Outcome.BLOCKED: ":warning:",
    Outcome.FAILED: ":x:",
    Outcome.USERINTERLUDE: ":black_square_for_stop:",
    Outcome.ASK_USER_QUESTION: ":question:",
}


def sub_agent_ended(task: str, result: RunResult) -> str:
    """An ended sub-agent's line, with its outcome label; ``task`` is escaped and cut."""
    return f"{_SUB_AGENT_ICONS[result.outcome]} {task} · {result_label(result)}"


def earlier_sub_agents(count: int) -> str:
    return f"… and {count:,} earlier"


# A live sub-agent's own section on its parent's status message, and its controls.
STEER_LABEL = "Steer…"
STEER_TITLE = "Steer a sub-agent"
STEER_SUBMIT = "Send"
STEER_CLOSE = "Cancel"
STEER_LABEL_TEXT = "Guidance for this sub-agent"


def home_sub_agent(task: str, status: str, depth: int) -> str:
    """A live sub-agent on App Home, under its parent (``depth`` 1) or under another
    sub-agent (2); ``task`` is escaped and cut already."""
    indent = "\u2003" * (depth - 1)
    return f"{indent}↳ *Sub-agent:* {task}\n{indent}{status}"


def sub_agent_stop_card(stop: StopReason, stopped_by: str | None) -> str:
    """A sub-agent's task card in the streamed answer once a Stop or Abort reached it."""
    who = f" (requested by {mention(stopped_by)})" if stopped_by else ""
    if stop is StopReason.STOP:
        return f"stopping: finishing this step, then its report{who}"
    return f"aborting{who}"


def steer_intro(task: str) -> str:
    """The modal's opening line; ``task`` is the sub-agent's task, as the model wrote it."""
    return (
        f"Sub-agent «{escape(_clip_words(task, 300))}»\n"
        "What you write goes to this sub-agent alone, with its next model request. "
        "Its parent run and the other sub-agents do not see it."
    )


def steered_sub_agent(user: str, task: str, text: str) -> str:
    """The guidance for one sub-agent, as posted in the thread (its marks go on it)."""
    return f"{mention(user)} → sub-agent «{escape(_clip_words(task, 120))}»: {escape(text)}"


def _clip_words(text: str, most: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= most else flat[: most - 1].rstrip() + "…"


def sub_agent_live(
    task: str, activity: str, stop: StopReason | None = None, stopped_by: str | None = None
) -> str:
    """A live sub-agent's own section: its task (escaped and cut), its state and turn,
    and who stopped or aborted it, if anyone did."""
    if stop is StopReason.ABORT:
        state = f"aborting (requested by {mention(stopped_by)})" if stopped_by else "aborting"
        return f":no_entry: *Sub-agent:* {task}\n{state}"
    if stop is StopReason.STOP:
        who = f" (requested by {mention(stopped_by)})" if stopped_by else ""
        return (
            f":double_vertical_bar: *Sub-agent:* {task}\n"
            f"stopping: finishing this step, then its report{who} · {activity}"
        )
    return f":hourglass_flowing_sand: *Sub-agent:* {task}\n{activity}"


# The stop ladder (docs/stopping.md, Escalation): level 1 is Stop (one final turn for
# a summary); a second Stop, an Abort or FINAL_TURN_TIMEOUT is level 2 (cut off now).
STATUS_STOPPING = (
    "Stopping: finishing this step, then a summary. Stop again or Abort to cut it off."
)


def stop_requested_note(requested_by: str | None, activity: str = "") -> str:
    """The line under :data:`STATUS_STOPPING`: who asked, and what the agent does now."""
    who = f"Requested by {mention(requested_by)}" if requested_by else ""
    return " · ".join(part for part in (who, activity) if part)


def status_aborting(
    requested_by: str | None = None,
    *,
    after_stop: bool = False,
    final_turn_timeout_s: float | None = None,
) -> str:
    """Level 2. ``after_stop``: it was stopping (level 1) when this came; with
    ``final_turn_timeout_s``, the summary took longer than ``FINAL_TURN_TIMEOUT``."""
    if final_turn_timeout_s is not None:
        return (
            f"Aborting: the summary took longer than {final_turn_timeout_s:g}s "
            "(FINAL_TURN_TIMEOUT), so it is cut off now."
        )
    if after_stop and requested_by:
        return (
            f"Aborting: {mention(requested_by)} asked again while it was stopping, "
            "so it is cut off now, with no summary."
        )
    if not requested_by:
        return "Aborting..."
    return f"Aborting... (requested by {mention(requested_by)})"


def cut_off_after_stop(stopped_by: str, final_turn_timeout_s: float | None = None) -> str:
    """Under the outcome of a run that was stopping (level 1) when it was aborted
    (level 2): how it got there. ``final_turn_timeout_s``: ``FINAL_TURN_TIMEOUT`` did it."""
    if final_turn_timeout_s is not None:
        return (
            f"{mention(stopped_by)} asked it to stop; its summary took longer than "
            f"{final_turn_timeout_s:g}s (FINAL_TURN_TIMEOUT), so it was cut off."
        )
    return (
        f"{mention(stopped_by)} asked it to stop; it was asked again while stopping, so it "
        "was cut off with no summary."
    )


STATUS_RESTARTING = "Pausing for a restart..."
RESTART_NOTE = (
    "threadpilot resumes this run from its last checkpoint after the restart if resuming "
    "is enabled; otherwise reply in the thread to continue."
)
SHUTDOWN_NOTICE = f"Interrupted by a restart; {RESTART_NOTE}"
"""For a run whose process shut down before it could write its own result."""

WORKER_LOST = "Interrupted: the worker running this stopped."
"""Evidence for a run whose owner's lease expired (found by the reconciler)."""


def worker_lost_stopped(turns: int) -> str:
    """Evidence for a run a person stopped whose worker went away before it could say so."""
    return (
        f"{WORKER_LOST} It had completed {format_turns(turns)}; no final summary could be written."
    )


def worker_lost_checkpointed(turns: int) -> str:
    """Evidence for a run whose worker went away, resumable from its checkpoint."""
    return f"{WORKER_LOST} Progress up to turn {turns} is checkpointed."


ENDING_NOT_RECORDED = (
    "Its final message was posted in this thread, but how it ended could not be recorded "
    "(threadpilot's database did not answer)."
)
"""Evidence stored for a run whose answer reached Slack but whose ending was lost."""
ENDING_NOT_RECORDED_NEXT_STEP = "Nothing is running. Reply in the thread to continue."

STATUS_POST_IN_DOUBT = (
    "Slack failed while this status message was being posted, so the run never started."
)
"""Evidence for a run abandoned at its status post, written when the message turns up."""


def live_details(elapsed_s: float, spent: Spent | None, requester: str) -> str:
    """``spent``: what the request has spent so far (None: nothing known yet, e.g.
    queued)."""
    # The requester is named because, under the default policy, only they (and admins)
    # may press the buttons below; others in the thread can see whom to ask.
    spending = f"{spend(spent)} · " if spent is not None else ""
    return f"{format_elapsed(elapsed_s)} elapsed · {spending}started by {mention(requester)}"


# -- controls --------------------------------------------------------------------------

STOP_LABEL = "Stop"
ABORT_LABEL = "Abort"
SUB_AGENT_NOT_LIVE = "That sub-agent has ended: its report went to its parent run."
ABORT_CONFIRM_TITLE = "Abort now?"
ABORT_CONFIRM_TEXT = "The agent is cancelled immediately and writes no summary."
ABORT_CONFIRM_YES = "Abort"
ABORT_CONFIRM_NO = "Keep running"

# -- the terminal report ---------------------------------------------------------------

HEADING_OUTCOME = "Outcome"
HEADING_EVIDENCE = "Evidence"
HEADING_ARTIFACTS = "Artifacts"
HEADING_HANDOFF = "Handoff"
HEADING_ANSWER = "Answer"

NO_EVIDENCE = "Nothing was recorded."
EVIDENCE_IS_THE_ANSWER = "The answer below."
NO_ARTIFACTS = "none"

HOW_TO_CONTINUE = "reply in the thread"
"""The loop's own handoff lines say this is how a person carries on (AgentConfig)."""
WORKER_LOST_NEXT_STEP = f"{HOW_TO_CONTINUE.capitalize()} to go on."
"""The handoff of a run whose worker went away, blocked at its checkpoint."""

_DEFAULT_NEXT_STEP = {
    Outcome.FINISHED: "Nothing is running. Reply in the thread to follow up.",
    Outcome.BLOCKED: "Nothing is running. Reply in the thread once the blocker is resolved.",
    Outcome.FAILED: "Nothing is running. Reply in the thread to try again.",
    Outcome.USERINTERLUDE: "Nothing is running. Reply in the thread to start again.",
    Outcome.ASK_USER_QUESTION: "Reply in the thread with your answer.",
}

SHUTDOWN_LABEL = "interrupted by a restart"
"""What an outcome label calls a shutdown here: the app's runs resume after it."""

_EXIT_NOTES = {
    ExitCode.FINAL_ANSWER: "final answer",
    ExitCode.USER_STOP: "stopped on request",
    ExitCode.USER_ABORT: "aborted on request",
    ExitCode.SHUTDOWN: "interrupted by a restart",
    ExitCode.TOKEN_LIMIT: "context window nearly full",
    ExitCode.MAX_TURNS: "turn limit reached",
    ExitCode.MAX_RETRIES: "model retries used up",
    ExitCode.BUDGET: "budget spent",
    ExitCode.ERROR: "error",
}


def default_next_step(outcome: Outcome) -> str:
    """The handoff when the run recorded none: who acts next, never an optional offer."""
    return _DEFAULT_NEXT_STEP[outcome]


def slack_outcome_label(
    outcome: Outcome,
    *,
    stop_reason: StopReason | None = None,
    exit_code: ExitCode | None = None,
    stopped_by: str | None = None,
) -> str:
    """The canonical label, naming who stopped the run if anyone did, with Slack mentions.

    Takes the parts rather than a :class:`RunResult` so a stored run record (which has
    the same fields) can be labelled too; :func:`result_label` is the shortcut.
    """
    return core_outcome_label(
        outcome,
        stop_reason=stop_reason,
        exit_code=exit_code,
        stopped_by=stopped_by,
        name=mention,
        shutdown=SHUTDOWN_LABEL,
    )


def result_label(result: RunResult) -> str:
    return result.label(mention, SHUTDOWN_LABEL)


def result_details(
    exit_code: ExitCode, turns: int, elapsed_s: float, tokens: int, spent: Spent | None = None
) -> str:
    """The small print under the outcome: exit code, turns, duration, and what the
    request spent (``spent``; without it, the run's own ``tokens``)."""
    spending = spend(spent) if spent is not None else format_tokens(tokens)
    return (
        f"`{exit_code.value}` ({_EXIT_NOTES[exit_code]}) · {format_turns(turns)} · "
        f"{format_elapsed(elapsed_s)} · {spending}"
    )


def bullet(item: str) -> str:
    return f"• {item}"


def more_artifacts(count: int) -> str:
    return f"… and {count:,} more"


def truncated(remaining: int) -> str:
    """Marks text cut to fit Slack's limits; ``remaining`` is what was left out."""
    return f"_… (truncated, {remaining:,} characters more)_"


def heading(title: str) -> str:
    return f"*{title}*"


# -- notification fallbacks (the message's plain ``text``) -----------------------------


def fallback_live(status: str, activity: str) -> str:
    return f"{status} · {activity}" if activity else status


def fallback_done(label: str, handoff: str) -> str:
    return f"{HEADING_OUTCOME}: {label}. {HEADING_HANDOFF}: {handoff}"


# -- ephemeral replies to clicks and messages ------------------------------------------

RUN_ALREADY_FINISHED = "This run has already ended; the buttons no longer do anything."


def run_already_finished(ended: RunResult | str | None = None) -> str:
    """A click on an ended run. ``ended`` is its result, or the outcome label of a stored
    record (:func:`slack_outcome_label`); with neither, the reply just says it ended."""
    label = ended if ended is None or isinstance(ended, str) else result_label(ended)
    if not label:
        return RUN_ALREADY_FINISHED
    return f"This run has already ended ({label}); the buttons no longer do anything."


ALREADY_STOPPING = "Already stopping: press Abort to cancel immediately."
"""A second press of Stop by the same person right after their first (a double click)."""
ESCALATED_TO_ABORT = "Stop asked again while stopping: aborting now, with no summary."
ALREADY_ABORTING = "Already aborting: the run ends in a moment."
STOP_ACCEPTED = "Stopping: the agent finishes its current step, then writes a summary."
ABORT_ACCEPTED = "Aborting: the agent is cancelled now and writes no summary."
STOP_NOT_RECORDED = (
    "Your click could not be recorded (threadpilot's database did not answer). "
    "Nothing changed: please press the button again."
)
STOP_NOT_RECORDED_BUSY = (
    "Your click was not recorded: threadpilot's database is busy right now. "
    "Nothing changed: please press the button again."
)
STOP_WORD_NOT_RECORDED = (
    "Your stop could not be recorded (threadpilot's database did not answer). "
    "Nothing changed: please say it again."
)
STOP_WORD_NOT_RECORDED_BUSY = (
    "Your stop was not recorded: threadpilot's database is busy right now. "
    "Nothing changed: please say it again."
)


def stop_not_recorded(*, busy: bool, typed: bool) -> str:
    """A request to stop that could not be made durable: nothing changed. ``typed``: it
    was written in the thread (a stop word), not pressed."""
    if typed:
        return STOP_WORD_NOT_RECORDED_BUSY if busy else STOP_WORD_NOT_RECORDED
    return STOP_NOT_RECORDED_BUSY if busy else STOP_NOT_RECORDED


CLICK_NOT_FROM_RUN = (
    "That button is not on this run's own status message, so nothing changed. "
    "Use the buttons on the run's status message in its thread."
)
NOT_THIS_WORKSPACE = (
    "That run is not one of this workspace's, so nothing changed. "
    "Each workspace sees and controls only its own runs."
)
RUN_NOT_RECORDED = (
    "I could not start on this: threadpilot's database did not answer, so the request "
    "could not be recorded. Nothing is running. Please mention me again in a minute."
)
UNKNOWN_ACTION = "threadpilot does not know that button; it may be from an older version."
RUN_NOT_FOUND = "This run is no longer tracked (it may have ended during a restart)."


def too_many_runs(limit: int) -> str:
    """A person's mention past ``MAX_RUNS_PER_USER``: nothing started."""
    runs = "run" if limit == 1 else "runs"
    return (
        f"You already have {limit} {runs} working or waiting here, the most one person may "
        "have at once, so I did not start this one. When one of them finishes (or you stop "
        "one), mention me again."
    )


THREAD_BUSY = (
    "A run is already working in this thread. Wait for it to finish (or stop it), then "
    "mention me again."
)


def not_allowed(policy: str, requester: str) -> str:
    """Why a click was refused, worded after ``STOP_POLICY`` (requester|participants|anyone).

    Takes the policy's string value so any enum over those words can be passed in.
    """
    if policy == "participants":
        return (
            f"Only {mention(requester)}, people taking part in this thread, or an admin "
            "can stop or abort this run."
        )
    if policy == "anyone":
        # Not reachable under "anyone" unless a run-specific rule refused the click.
        return "You can't stop or abort this run."
    return f"Only {mention(requester)} or an admin can stop or abort this run."


# -- who may use threadpilot (docs/slack-setup.md) ---------------------------------------

EXTERNAL_NOT_ALLOWED = (
    "threadpilot only works for people of this workspace's organisation, and you are "
    "from another one (Slack Connect). Nothing was started or changed."
)
GUEST_NOT_ALLOWED = (
    "threadpilot is not available to guests of this workspace. Nothing was started or "
    "changed; ask a member to do it for you."
)
PERSON_NOT_CHECKED = (
    "threadpilot could not check who you are with Slack just now, so nothing was started "
    "or changed. Please try again in a moment."
)


# -- steering: replies in a live run's thread (docs/stopping.md, Guidance) -------------


def guidance_too_long(length: int, limit: int) -> str:
    """A reply too long to pass to the agent; nothing was queued."""
    return (
        f"Your reply is {length:,} characters; the agent takes at most {limit:,} while it "
        "works. Nothing was passed to it: shorten your reply and send it again."
    )


def guidance_not_allowed(policy: str, requester: str) -> str:
    """A reply by someone the stop policy does not allow to steer the run (see
    :func:`not_allowed` for ``policy``); nothing was queued."""
    if policy == "participants":
        who = f"{mention(requester)}, people taking part in this thread, or an admin"
    else:
        who = f"{mention(requester)} or an admin"
    return f"Only {who} can guide this run while it works. Your reply was not passed to it."


GUIDANCE_NOT_RECORDED = (
    "Your reply could not be recorded (threadpilot's database did not answer), so the "
    "agent will not see it. Please send it again."
)
GUIDANCE_NOT_RECORDED_BUSY = (
    "Your reply was not recorded: threadpilot's database is busy right now, so the agent "
    "will not see it. Please send it again."
)
UNDELIVERED_GUIDANCE = "The run ended before the agent saw these replies; send them again to go on:"
"""Heads the replies listed in the handoff that never reached the model (a Stop won)."""


def undelivered_reply(author: str, text: str) -> str:
    """One reply the agent never saw; ``text`` is already escaped and cut to fit."""
    return bullet(f"{mention(author)}: {text}")


# -- why a run ended, and resuming it (docs/stopping.md) --------------------------------

RESUME_NOW_LABEL = "Resume now"
DONT_RESUME_LABEL = "Don't resume"
RESUMING_NOW = "Resuming now, from its last checkpoint."
RESUME_CONTINUING = "Continuing in a new run, from a summary of this one."
RESUME_CONTINUED = "Continued in a new run below, from a summary of this one."
STATUS_RESUMING = "Resuming from the last checkpoint..."
"""The activity of a run resumed in its own status message, until its first turn."""
RESUME_NOTHING_SCHEDULED = (
    "Nothing is waiting to resume on this run any more: it has resumed already, or it "
    "will not. Nothing changed."
)


def why_ended(reason: str) -> str:
    """The status message's line saying why the run ended (``ended_because``)."""
    return f"Why it ended: {ended_because_words(reason)}."


def resume_scheduled(at: datetime) -> str:
    """When a paused run resumes on its own (Slack shows the time in the reader's zone;
    the fallback is UTC)."""
    epoch = int(at.timestamp())
    fallback = at.astimezone(UTC).strftime("%H:%M:%S UTC")
    return f"Resumes on its own at <!date^{epoch}^{{time_secs}}|{fallback}>."


def resume_cancelled(by: str | None) -> str:
    """A scheduled resume a person called off (``Don't resume``, or Stop)."""
    return f"Not resuming: {mention(by)} chose not to resume it."


# Why the app does not resume a run, beside the policy's own reasons
# (agent_core.values.resume_policy): stored as the run's resume reason, logged and audited in
# these words, and shown by :func:`not_resuming`.
RESUME_SUB_AGENT = "A sub-agent resumes only with its parent run"
RESUME_PERSON_STOPPED = "Session ended by user, not auto-resuming"
RESUME_MOVED_ON = "A newer run started in this thread; not auto-resuming"
RESUME_NOTHING_CHECKPOINTED = "Nothing was checkpointed to continue from"


def resume_not_blocked(state: str) -> str:
    return f"Only a blocked run can resume; this one ended {state}, not auto-resuming"


def resume_summary_failed(error: object) -> str:
    return f"The summary to continue from failed ({error})"


def not_resuming(reason: str) -> str:
    """Why a paused run does not resume on its own, from the policy's reason (written for
    logs: "...; not auto-resuming", which the line already says)."""
    why = re.sub(r"[;,]\s*not auto-resuming\.?$", "", reason.strip())
    return f"Not resuming on its own: {escape(why[:1].lower() + why[1:])}."


def resume_not_allowed(policy: str, requester: str) -> str:
    """A ``Resume now`` / ``Don't resume`` click by someone ``STOP_POLICY`` does not allow."""
    return not_allowed(policy, requester).replace("stop or abort", "resume or cancel")


# -- Continue: one more budget for a run that spent its own (docs/stopping.md) ----------

CONTINUE_LABEL = "Continue"
CONTINUE_OFFER = (
    "*Continue* picks it up from where it stopped, with one more budget of the same size."
)
"""Under a run that spent its budget, beside the Continue button."""
CONTINUE_NOT_BUDGET = (
    "Only a run whose budget ran out can be continued with one more budget. Nothing changed."
)
CONTINUE_SUPERSEDED = (
    "A newer run has taken over this thread, so this one is not continued. Nothing "
    "changed; reply in the thread to ask again."
)


def continued(by: str | None) -> str:
    """A person pressed Continue: the continuation (one more budget) starts, or has
    started, in its own message below. One wording for both, so whichever of the two
    writes (the click's, the starting worker's) lands last, the message reads true."""
    return f"Continued by {mention(by)} in a new run below, with one more budget."


def already_continued(by: str | None) -> str:
    """A second press of Continue (or a press on a run continued some other way)."""
    who = f" by {mention(by)}" if by else ""
    return f"This run was already continued{who}. Nothing changed."


def continue_not_allowed(requester: str) -> str:
    """A Continue click by someone other than the requester or an admin (whatever
    ``STOP_POLICY`` says: Continue spends one more budget on the requester's behalf)."""
    return (
        f"Only {mention(requester)} or an admin can continue this run: it spends one more "
        "budget on their behalf. Nothing changed."
    )


def continue_person_full(requester: str, limit: int) -> str:
    """A Continue click while the requester has ``MAX_RUNS_PER_USER`` runs working or
    waiting (a Continue not started yet counts as one)."""
    runs = "run" if limit == 1 else "runs"
    return (
        f"{mention(requester)} already has {limit} {runs} working or waiting, the most one "
        "person may have at once, so this run was not continued. Nothing changed; press "
        "Continue again when one of them finishes."
    )


# -- App Home and /threadpilot (docs/slack-setup.md) ------------------------------------

HOME_TITLE = APP_NAME
HEADING_LIVE_RUNS = "Live runs"
HEADING_ENDED_RUNS = "Recently ended"
NO_LIVE_RUNS = "Nothing is running."
NO_ENDED_RUNS = "No run has ended yet."
HOME_QUEUED = "Waiting to start"
HOME_STOPPING = "Stopping: finishing this step, then a summary"
UNTITLED_RUN = "(no task text)"
PRIVATE_REQUEST = "Private request (in a DM, group DM or private channel)"
"""Shown instead of someone else's request asked where not everyone can read it."""


def home_intro(*, admin: bool, at_epoch: int, at_text: str) -> str:
    """Under the title: whose runs these are, and when the list was read (Slack shows
    the time in the viewer's own time zone; ``at_text`` is the fallback, in UTC)."""
    whose = "Every run in this workspace (you are an admin)" if admin else "Your runs"
    return f"{whose} · updated <!date^{at_epoch}^{{time}}|{at_text}>"


def home_run_title(task: str, url: str | None, channel: str) -> str:
    """A run's first line: its task (already escaped and cut), linked to its thread when
    the link is known, and where it lives."""
    title = f"<{url}|{task}>" if url else task
    return f"*{title}* in <#{channel}>"


def home_live_details(
    status: str, elapsed_s: float, requester: str, *, show_requester: bool, spending: str = ""
) -> str:
    """A live run's second line: what it is doing, for how long, what it has spent
    (``spending``, from :func:`spend`; "" when not known here), and whose it is."""
    parts = [status, f"{format_elapsed(elapsed_s)} elapsed"]
    if spending:
        parts.append(spending)
    if show_requester:
        parts.append(f"started by {mention(requester)}")
    return " · ".join(parts)


def home_ended_details(
    label: str,
    why: str,
    ended_epoch: int,
    ended_text: str,
    requester: str,
    *,
    show_requester: bool,
    spending: str = "",
) -> str:
    """An ended run's second line: its outcome, why it ended, when, what it spent
    (``spending``; "" when nothing was stored), and whose it was."""
    parts = [label]
    if why:
        parts.append(f"why: {why}")
    parts.append(f"ended <!date^{ended_epoch}^{{date_short_pretty}} {{time}}|{ended_text}>")
    if spending:
        parts.append(spending)
    if show_requester:
        parts.append(f"started by {mention(requester)}")
    return " · ".join(parts)


_ENDED_BECAUSE = {
    "completed": "it completed",
    "rate_limit": "the model's rate limit",
    "context_exhausted": "its context window filled up",
    "user_exit": "a person stopped it",
    "shutdown": "a restart",
    "worker_lost": "its worker stopped",
    "budget_exhausted": "its budget was spent",
    "error": "an error",
    "unknown": "unknown",
}


def ended_because_words(reason: str) -> str:
    """Why a run ended (``ended_because``: ``rate_limit``, ``completed``...), for people."""
    return _ENDED_BECAUSE.get(reason, escape(reason))


def exit_note(exit_code: ExitCode) -> str:
    """The short note for an exit code (``final answer``, ``stopped on request``...)."""
    return _EXIT_NOTES[exit_code]


FEEDBACK_POSITIVE_LABEL = "👍"
FEEDBACK_NEGATIVE_LABEL = "👎"
FEEDBACK_POSITIVE_HINT = "This answer helped"
FEEDBACK_NEGATIVE_HINT = "This answer did not help"
FEEDBACK_RECORDED = "Thanks: your feedback on this answer was recorded."
FEEDBACK_NOT_FROM_RUN = (
    "Those buttons are not on this run's own message, so no feedback was recorded."
)
FEEDBACK_NOT_RECORDED = (
    "Your feedback could not be recorded (threadpilot's database did not answer). "
    "Please press the button again."
)


def feedback_line(positive: int, negative: int) -> str:
    """The feedback a run got, as App Home shows it: one vote per person, counted."""
    up, down = FEEDBACK_POSITIVE_LABEL, FEEDBACK_NEGATIVE_LABEL
    return f"Feedback: {up} {positive:,} · {down} {negative:,}"


def more_live_runs(count: int) -> str:
    return f"… and {count:,} more live runs, not shown here."


STOP_ALL_LABEL = "Stop all"
STOP_ALL_CONFIRM_TITLE = "Stop every run?"
STOP_ALL_CONFIRM_YES = "Stop all"
STOP_ALL_CONFIRM_NO = "Cancel"


def stop_all_confirm_text(count: int) -> str:
    runs = "the live run" if count == 1 else f"all {count:,} live runs"
    return f"Stop {runs} in this workspace? Each finishes its step, then writes a summary."


STOP_ALL_NOT_ALLOWED = (
    "Only admins (the workspace's admins and owners, whoever installed the app, and "
    "ADMIN_USER_IDS) can stop every run. Nothing changed."
)
STOP_ALL_NOTHING = "Nothing is running, so there was nothing to stop."


def stop_all_done(stopped: int, already: int, failed: int) -> str:
    """What ``Stop all`` did: runs asked to stop, runs that were ending anyway, and runs
    whose request could not be recorded (press again for those)."""
    parts = [f"Stop all: {stopped:,} run{'' if stopped == 1 else 's'} asked to stop"]
    if already:
        parts.append(f"{already:,} already stopping or ending")
    if failed:
        parts.append(
            f"{failed:,} could not be recorded (threadpilot's database did not answer); "
            "press Stop all again for those"
        )
    return "; ".join(parts) + "."


DASHBOARD_UNAVAILABLE = (
    "Your runs cannot be listed right now: threadpilot's database did not answer. "
    "Please try again in a moment."
)
COMMAND_HELP = (
    "*/threadpilot list* shows your live runs (with Stop and Abort) and the runs that "
    "ended lately; admins see every run.\n"
    "*/threadpilot stop all* (admins) asks every live run in this workspace to stop.\n"
    "The same list is on threadpilot's *Home* tab."
)


# -- approvals (docs/tools.md, Approvals) ------------------------------------------------

APPROVE_LABEL = "Approve"
DENY_LABEL = "Deny"
SHOW_ALL_LABEL = "Show all"
ARGUMENTS_TITLE = "Tool call arguments"
"""The title of the modal **Show all** opens (Slack allows 24 characters)."""
CLOSE_LABEL = "Close"
HEADING_APPROVALS = "Waiting for your approval"


def activity_awaiting_approval(tool: str) -> str:
    return f"Waiting for approval to run {_code(tool)}"


def approval_request(tool: str, requester: str) -> str:
    """The approval message's heading (mentions the requester: under the default policy
    they decide)."""
    return f":raised_hand: {mention(requester)}, the agent wants to run {_code(tool)}."


def arguments_left_out(count: int) -> str:
    """Under a held call's arguments, when only their start fits in the message."""
    return f"{count:,} more characters of the arguments are not shown here: *Show all* shows them."


def arguments_heading(tool: str) -> str:
    """The top of the modal **Show all** opens."""
    return f"The arguments {_code(tool)} will receive, in full:"


def arguments_too_long(count: int) -> str:
    """At the end of that modal, when even it cannot hold them all."""
    return f"{count:,} more characters do not fit in Slack. If you cannot check the call, deny it."


def approval_decided(status: str, decided_by: str | None) -> str:
    """The approval message once decided: what became of the call, and who decided."""
    if status == "approved":
        return f":white_check_mark: Approved by {mention(decided_by or '')}: the call runs."
    if status == "denied":
        return f":no_entry: Denied by {mention(decided_by or '')}: the call was not run."
    if status == "expired":
        return ":hourglass: Expired: nobody decided in time, so the call was not run."
    return ":black_square_for_stop: Not run: the run was stopped before anyone decided."


def approval_stopped_first(decided_by: str | None) -> str:
    """The approval message of a call approved while its run was being stopped: the
    approval had not reached the call when the Stop did, so it was not run."""
    return (
        f":black_square_for_stop: Approved by {mention(decided_by or '')}, "
        "but not run: the run was stopped first."
    )


def approval_fallback(tool: str) -> str:
    """The approval message's notification text."""
    return f"The agent wants to run {tool.replace('<', '').replace('>', '')}: approve or deny."


def approval_not_allowed(policy: str, requester: str) -> str:
    """Why an Approve or Deny click was refused, worded after ``APPROVAL_POLICY``."""
    return not_allowed(policy, requester).replace("stop or abort this run", "decide this call")


def approval_recorded_late(status: str, decided_by: str | None) -> str:
    """To the person whose decision the database took only after the click was answered."""
    return (
        f"{approval_decided(status, decided_by)} (threadpilot's database was slow, so your "
        "click was recorded a little late.)"
    )


APPROVAL_NOT_CONFIRMED = (
    "threadpilot's database has not answered for a minute, so it cannot tell whether your "
    "click was recorded. The approval message shows what was: if it still has its "
    "buttons, please press again."
)


def approval_already_decided(status: str, decided_by: str | None) -> str:
    return f"{approval_decided(status, decided_by)} Nothing changed."


def more_approvals(count: int) -> str:
    return f"…and {count:,} more waiting: each is in its run's thread."


APPROVAL_RUN_ENDED = "This run has ended, so the call will not run. Nothing changed."
APPROVAL_CLOSED_RUN_ENDED = (
    ":black_square_for_stop: Not run: the run ended before anyone decided, and it will not go on."
)
"""The approval message of a call whose run ended for good while it waited (its resume
declined or cancelled, or it ended in a way that is never resumed)."""
APPROVAL_NOT_FOUND = "This approval is not known here. Nothing changed."
ARGUMENTS_NOT_SHOWN = (
    "The arguments could not be shown just now (threadpilot's database or Slack did not "
    "answer in time). Please press *Show all* again."
)
