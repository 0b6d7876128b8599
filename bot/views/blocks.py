"""Block Kit pieces every view uses: text objects, the Stop and Abort buttons, how much
text a set of blocks carries, and fitting text into a limit (one rule for where a cut
falls: :func:`soft_cut`). Pure functions; the words come from :mod:`bot.messages`."""

from __future__ import annotations

from typing import Any

from bot import messages as m

__all__ = [
    "CLOSE_FENCE",
    "FENCE",
    "REOPEN_FENCE",
    "Block",
    "abort_button",
    "clip",
    "confirm",
    "context",
    "fit",
    "plain",
    "prefix_chars",
    "section",
    "soft_cut",
    "stop_button",
    "text_units",
    "texts",
    "units",
]

Block = dict[str, Any]


def stop_button(action_id: str, run_id: str) -> Block:
    """Stop for ``run_id``. Default style on purpose: Stop is the safe choice, it should
    not shout."""
    return {"type": "button", "action_id": action_id, "text": plain(m.STOP_LABEL), "value": run_id}


def abort_button(action_id: str, run_id: str) -> Block:
    """Abort for ``run_id``, red, behind a confirmation."""
    return {
        "type": "button",
        "action_id": action_id,
        "text": plain(m.ABORT_LABEL),
        "value": run_id,
        "style": "danger",
        "confirm": confirm(
            m.ABORT_CONFIRM_TITLE, m.ABORT_CONFIRM_TEXT, m.ABORT_CONFIRM_YES, m.ABORT_CONFIRM_NO
        ),
    }


def confirm(title: str, text: str, yes: str, no: str) -> Block:
    """A confirmation dialog for a dangerous button."""
    return {
        "title": plain(title),
        "text": plain(text),
        "confirm": plain(yes),
        "deny": plain(no),
        "style": "danger",
    }


def section(mrkdwn: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}


def context(mrkdwn: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": mrkdwn}]}


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def texts(value: Any) -> list[str]:
    """Every ``text`` string inside ``value`` (blocks, elements, text objects)."""
    if isinstance(value, list):
        return [t for item in value for t in texts(item)]
    if isinstance(value, dict):
        found = [value["text"]] if isinstance(value.get("text"), str) else []
        return found + [t for v in value.values() if not isinstance(v, str) for t in texts(v)]
    return []


def units(text: str) -> int:
    """Length in UTF-16 code units (what Slack's text limits count)."""
    # surrogatepass: a lone surrogate (possible in decoded JSON) must not crash a render.
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def text_units(value: Any) -> int:
    """The text ``value`` carries, in UTF-16 units (what a message's budget counts)."""
    return sum(units(t) for t in texts(value))


# -- fitting text ----------------------------------------------------------------------

FENCE = "```"
"""A code fence in mrkdwn."""
CLOSE_FENCE = "\n```"
"""What closes a code block a cut left open."""
REOPEN_FENCE = "```\n"
"""What opens it again in the next piece."""


def fit(raw: str, budget: int, *, sep: str = "\n") -> str:
    """Escape model text for mrkdwn and cut it to ``budget`` units, with a marker.

    The marker says how many characters of ``raw`` were left out. A code fence left open
    by the cut is closed, so the marker is not swallowed into the code block.
    """
    escaped = m.escape(raw)
    if units(escaped) <= budget:
        return escaped
    marker_room = units(sep + m.truncated(len(raw)))  # the longest the marker can be
    room = max(0, budget - marker_room - len(CLOSE_FENCE))
    cut = soft_cut(raw, prefix_chars(raw, room, escaped=False))
    head = raw[:cut].rstrip()
    body = m.escape(head)
    if body.count(FENCE) % 2 == 1:
        body += CLOSE_FENCE
    return f"{body}{sep}{m.truncated(len(raw) - len(head))}"


def clip(mrkdwn: str, budget: int) -> str:
    """Cut text that is already mrkdwn (ours, escaped where needed) without escaping."""
    if units(mrkdwn) <= budget:
        return mrkdwn
    cut = prefix_chars(mrkdwn, budget - 1, escaped=True)
    # Never end inside an entity such as "&amp;": that would show a stray "&am".
    amp = mrkdwn.rfind("&", max(0, cut - 4), cut)
    if amp != -1 and ";" not in mrkdwn[amp:cut]:
        cut = amp
    return mrkdwn[:cut] + "…"


def prefix_chars(text: str, room: int, *, escaped: bool) -> int:
    """How many leading characters of ``text`` fit in ``room`` UTF-16 units (after
    escaping them for mrkdwn, unless they are ``escaped`` already or not mrkdwn)."""
    used = 0
    for index, char in enumerate(text):
        used += _char_units(char, escaped=escaped)
        if used > room:
            return index
    return len(text)


def soft_cut(text: str, limit: int) -> int:
    """Move a cut at ``limit`` back to a line break or space in the last quarter, and
    never into the middle of an entity."""
    if limit >= len(text):
        return limit
    floor = limit - limit // 4
    for sep in ("\n", " "):
        at = text.rfind(sep, floor, limit)
        if at > 0:
            return at
    amp = text.rfind("&", max(0, limit - 4), limit)
    if amp != -1 and ";" not in text[amp:limit]:
        return amp
    return limit


def _char_units(char: str, *, escaped: bool) -> int:
    units = 2 if ord(char) > 0xFFFF else 1
    if not escaped:
        if char == "&":
            return 5
        if char in "<>":
            return 4
    return units
