"""The streamed answer message, written whole: a pure function from the answer to a message.

The answer streams into its own message as the model writes it. When a model call fails
partway and its step is retried, the partial text it streamed is void; the stream can
only append, so once the run ends the message is rewritten (``chat.update``) with the
answer that counts. The text is the model's markdown, as the stream sent it, in one
``markdown`` block (Slack allows 12,000 characters there; longer answers are cut with a
visible marker). Wording lives in :mod:`bot.messages`.
"""

from __future__ import annotations

from typing import Any

from bot import messages as m
from bot.views.status import TEXT_LIMIT, RenderedMessage, run_metadata

__all__ = ["MARKDOWN_LIMIT", "answer_metadata", "render_answer"]

MARKDOWN_LIMIT = 11_000
"""Below the markdown block's 12,000 characters, with a margin (counted in UTF-16 units)."""


def answer_metadata(run_id: str) -> dict[str, Any]:
    """Metadata tying an answer message to its run; distinct from the status message's,
    so a search for a run's status message never finds its answer."""
    metadata = run_metadata(run_id)
    return {**metadata, "event_payload": {**metadata["event_payload"], "part": "answer"}}


def render_answer(answer: str) -> RenderedMessage:
    """The answer message's final form: the answer in a markdown block, cut to fit."""
    body = _cut(answer.strip(), MARKDOWN_LIMIT)
    return RenderedMessage(
        text=_cut(answer.strip(), TEXT_LIMIT), blocks=[{"type": "markdown", "text": body}]
    )


def _cut(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` UTF-16 units; else its head, cut at a line break
    or space near the end, and a marker saying how much was left out."""
    if _units(text) <= limit:
        return text
    marker = m.truncated(len(text))
    room = limit - _units(marker) - 2
    used = end = 0
    for end, char in enumerate(text):  # noqa: B007 - `end` is used after the loop
        used += 2 if ord(char) > 0xFFFF else 1
        if used > room:
            break
    floor = end - end // 4
    soft = max(text.rfind("\n", floor, end), text.rfind(" ", floor, end))
    head = text[: soft if soft > 0 else end].rstrip()
    return f"{head}\n\n{m.truncated(len(text) - len(head))}"


def _units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2
