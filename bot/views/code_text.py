"""Outside text (a tool call's arguments) as inert mrkdwn code blocks that fit Block Kit.

The text is made inert first and clipped after, counting what Slack counts: ``&``,
``<`` and ``>`` become ``&amp;``, ``&lt;`` and ``&gt;`` (so nothing in it can mention
anyone or link anywhere), a run of backticks is broken up with zero-width spaces (so it
cannot close the block early), and every block, its fences included, stays within the
budget given in UTF-16 units (:func:`bot.views.blocks.units`). Clipping after escaping
is what keeps a text of ``&`` (five units each once escaped) inside a section's 3,000;
an escape is never cut in half, and the caller is told how many characters of the text
were left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot import messages as m
from bot.views.blocks import units

__all__ = ["CodeBlocks", "code_blocks"]

FENCE = "```"
_BREAK = "\u200b"
"""Put between two backticks: the zero-width space Slack shows as nothing."""


@dataclass(frozen=True, slots=True)
class CodeBlocks:
    """Consecutive pieces of a text, each an inert code block, and what did not fit."""

    blocks: tuple[str, ...]
    sizes: tuple[int, ...]
    """How many characters of the text (code points) each block holds."""
    left_out: int
    """Characters of the text in none of the blocks."""


def code_blocks(text: str, *, budget: int, most: int = 1) -> CodeBlocks:
    """``text`` from its start, as up to ``most`` code blocks of at most ``budget``
    UTF-16 units each (fences included)."""
    if budget < 2 * len(FENCE) + 4:
        raise ValueError(f"a budget of {budget} units holds no text")
    blocks: list[str] = []
    sizes: list[int] = []
    start = 0
    while start < len(text) and len(blocks) < most:
        block, end = _fill(text, start, budget)
        blocks.append(block)
        sizes.append(end - start)
        start = end
    if not blocks and most > 0:
        blocks.append(FENCE + " " + FENCE)
        sizes.append(0)
    return CodeBlocks(tuple(blocks), tuple(sizes), len(text) - start)


def _fill(text: str, start: int, budget: int) -> tuple[str, int]:
    """One block of ``text`` from ``start``, and where the next one starts."""
    room = budget - 2 * len(FENCE) - 1  # one unit kept to break a backtick at the end
    pieces: list[str] = []
    previous = "`"  # the opening fence: a backtick right after it is broken up too
    end = start
    for char in text[start:]:
        piece = _inert(char, previous)
        cost = units(piece)
        if cost > room:
            break
        room -= cost
        pieces.append(piece)
        previous = char
        end += 1
    if end == start:  # cannot happen with the budget floor above, but never loop
        raise ValueError("a block must hold at least one character")
    tail = _BREAK if previous == "`" else ""
    return FENCE + "".join(pieces) + tail + FENCE, end


def _inert(char: str, previous: str) -> str:
    escaped = m.escape(char)
    return _BREAK + escaped if char == "`" and previous == "`" else escaped
