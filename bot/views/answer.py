"""The streamed answer message, written whole: pure functions from the answer (and the
run's tasks) to Slack messages.

The answer streams into its own message as the model writes it. When a model call fails
partway and its step is retried, the partial text it streamed is void; the stream can
only append, so once the run ends the message is rewritten (``chat.update``) with the
answer that counts. After Slack ends a stream (about five minutes in), the message goes
on the same way, its tasks shown as a ``plan`` block of ``task_card`` s above the text.

One budget (:data:`ANSWER_BUDGET`) holds the message's text and its task cards together:
Slack refuses a message whose blocks carry more (``msg_blocks_too_long``), and a
``markdown`` block holds at most 12,000 characters. The cards take at most
:data:`PLAN_SHARE` of it (the latest tasks, and how many earlier ones there were); the
answer has the rest. An answer longer than that is never cut silently: the message ends
with a note, and the rest follows in up to :data:`FOLLOW_UPS` more messages
(:class:`AnswerMessages`); only an answer longer than all of them together is cut, with
a marker saying how much was left out. Wording lives in :mod:`bot.messages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot import messages as m
from bot.views.blocks import prefix_chars, soft_cut, units
from bot.views.status import TEXT_LIMIT, RenderedMessage, run_metadata

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bot.views.blocks import Block

__all__ = [
    "ANSWER_BUDGET",
    "FOLLOW_UPS",
    "MARKDOWN_LIMIT",
    "PLAN_SHARE",
    "AnswerMessages",
    "Task",
    "answer_metadata",
    "follow_ups",
    "render_answer",
]

MARKDOWN_LIMIT = 11_000
"""Below the markdown block's 12,000 characters, with a margin (counted in UTF-16 units)."""
ANSWER_BUDGET = 11_000
"""All the text one answer message carries: the answer and the task cards together."""
PLAN_SHARE = 3_000
"""The most of :data:`ANSWER_BUDGET` the task cards may take."""
FOLLOW_UPS = 4
"""At most this many messages carry the rest of an answer too long for one."""
_TITLE_LIMIT = 200


@dataclass(frozen=True, slots=True)
class Task:
    """One of the run's tasks (a tool call, a sub-agent), as its card shows it."""

    id: str
    title: str
    status: str


@dataclass(frozen=True, slots=True)
class AnswerMessages:
    """The answer message's final form, and the messages that carry the rest of it."""

    first: RenderedMessage
    rest: tuple[RenderedMessage, ...] = ()


def answer_metadata(run_id: str, piece: int = 0) -> dict[str, Any]:
    """Metadata tying an answer message to its run; distinct from the status message's,
    so a search for a run's status message never finds its answer. ``piece`` numbers the
    messages that carry the rest of a long answer (1, 2...), each its own."""
    metadata = run_metadata(run_id)
    payload = {**metadata["event_payload"], "part": "answer"}
    return {**metadata, "event_payload": payload | ({"piece": piece} if piece else {})}


def render_answer(
    answer: str, *, title: str | None = None, tasks: Sequence[Task] = ()
) -> AnswerMessages | None:
    """The answer message (``tasks`` as a plan titled ``title`` above the answer), and
    the rest of a long answer; None if there is nothing to show."""
    shown = answer.strip()
    plan = _plan(title, tasks) if title and tasks else None
    if not shown and plan is None:
        return None
    spent = _plan_units(plan)
    head, rest = _split(shown, ANSWER_BUDGET - spent)
    blocks = ([plan] if plan is not None else []) + ([_markdown(head)] if head else [])
    text = _clip(shown, TEXT_LIMIT) if shown else str(plan["title"] if plan else "")
    return AnswerMessages(RenderedMessage(text=text, blocks=blocks), follow_ups(rest))


def follow_ups(rest: str) -> tuple[RenderedMessage, ...]:
    """The messages that carry ``rest`` (what the answer message could not hold)."""
    pieces: list[RenderedMessage] = []
    for number in range(1, FOLLOW_UPS + 1):
        if not rest.strip():
            break
        if number == FOLLOW_UPS:
            head, rest = _clip(rest, MARKDOWN_LIMIT), ""
        else:
            head, rest = _split(rest, MARKDOWN_LIMIT)
        pieces.append(RenderedMessage(text=_clip(head, TEXT_LIMIT), blocks=[_markdown(head)]))
    return tuple(pieces)


def _split(text: str, room: int) -> tuple[str, str]:
    """``text`` if it fits in ``room`` units; else a head that does, ending with a note
    that the rest follows, and the rest."""
    if units(text) <= room:
        return text, ""
    note = m.ANSWER_CONTINUES
    end = soft_cut(text, prefix_chars(text, room - units(note) - 2, escaped=True))
    head, rest = text[:end].rstrip(), text[end:].lstrip()
    return f"{head}\n\n{note}", rest


def _clip(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` UTF-16 units; else its head, cut at a line break
    or space near the end, and a marker saying how much was left out."""
    if units(text) <= limit:
        return text
    marker = m.truncated(len(text))
    head = text[
        : soft_cut(text, prefix_chars(text, limit - units(marker) - 2, escaped=True))
    ].rstrip()
    return f"{head}\n\n{m.truncated(len(text) - len(head))}"


def _markdown(text: str) -> Block:
    return {"type": "markdown", "text": text}


def _plan(title: str, tasks: Sequence[Task]) -> Block:
    """The tasks as Block Kit's ``plan`` of ``task_card`` s: the latest that fit in
    :data:`PLAN_SHARE`, the title saying how many earlier ones are left out."""
    title = title[:_TITLE_LIMIT]
    room = PLAN_SHARE - units(title) - units(m.earlier_tasks(len(tasks))) - 1
    shown: list[Task] = []
    for task in reversed(tasks):
        cost = units(task.title[:_TITLE_LIMIT])
        if cost > room:
            break
        room -= cost
        shown.insert(0, task)
    if len(shown) < len(tasks):
        note = m.earlier_tasks(len(tasks) - len(shown))
        title = f"{title[: _TITLE_LIMIT - len(note) - 1]} {note}"
    cards = [
        {"type": "task_card", "task_id": t.id, "title": t.title[:_TITLE_LIMIT], "status": t.status}
        for t in shown
    ]
    return {"type": "plan", "title": title, "tasks": cards}


def _plan_units(plan: Block | None) -> int:
    if plan is None:
        return 0
    return units(str(plan["title"])) + sum(units(str(c["title"])) for c in plan["tasks"])
