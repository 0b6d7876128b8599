"""Block Kit pieces every view uses: text objects, the Stop and Abort buttons, and how
much text a set of blocks carries. Pure functions; the words come from
:mod:`bot.messages`."""

from __future__ import annotations

from typing import Any

from bot import messages as m

__all__ = [
    "Block",
    "abort_button",
    "confirm",
    "context",
    "plain",
    "section",
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
