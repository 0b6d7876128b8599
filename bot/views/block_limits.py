"""Block Kit's limits, in one place, and a check of a set of blocks against them.

Slack refuses a message or a view that breaks one of these (``invalid_blocks``,
``invalid_arguments``, ``view_too_large``), and a refused ``views.publish`` or
``chat.update`` leaves the old one showing. The views keep well inside them (each has
budgets of its own, with margins), clipping what they hold with a note; this module is
what those budgets are measured against, and what the tests' fake Slack enforces.

Sources: Slack's Block Kit reference (blocks, block elements, composition objects) and
``chat.postMessage`` / ``views.publish``; the same numbers are in slack_sdk's Block Kit
models (``slack_sdk.models.blocks``), which ``tests/bot/views/test_block_limits.py`` checks
them against. Lengths are counted in UTF-16 code units (:func:`bot.views.blocks.units`),
the larger of the ways Slack may count them.
"""

from __future__ import annotations

from typing import Any

from bot.views.blocks import units

__all__ = [
    "ACTIONS_ELEMENTS",
    "ACTION_ID",
    "ACTION_VALUE",
    "BLOCK_ID",
    "BUTTON_TEXT",
    "CONFIRM_BUTTON",
    "CONFIRM_TEXT",
    "CONFIRM_TITLE",
    "CONTEXT_ACTIONS_ELEMENTS",
    "CONTEXT_ELEMENTS",
    "FIELD_TEXT",
    "HEADER_TEXT",
    "MARKDOWN_TEXT",
    "MESSAGE_BLOCKS",
    "MESSAGE_TEXT",
    "SECTION_FIELDS",
    "SECTION_TEXT",
    "URL",
    "VIEW_BLOCKS",
    "VIEW_BYTES",
    "problems",
]

MESSAGE_BLOCKS = 50
VIEW_BLOCKS = 100
"""Blocks in a message, and in a Home tab (or modal) view."""
VIEW_BYTES = 250_000
"""``views.publish`` answers ``view_too_large`` above this much JSON."""
MESSAGE_TEXT = 40_000
"""A message's ``text`` is truncated here (not refused)."""
SECTION_TEXT = 3_000
SECTION_FIELDS = 10
FIELD_TEXT = 2_000
HEADER_TEXT = 150
MARKDOWN_TEXT = 12_000
CONTEXT_ELEMENTS = 10
ACTIONS_ELEMENTS = 25
CONTEXT_ACTIONS_ELEMENTS = 5
BUTTON_TEXT = 75
"""A button's label (also each of ``feedback_buttons``' two)."""
ACTION_VALUE = 2_000
ACTION_ID = 255
BLOCK_ID = 255
URL = 3_000
CONFIRM_TITLE = 100
CONFIRM_TEXT = 300
CONFIRM_BUTTON = 30


def problems(blocks: Any, *, max_blocks: int = MESSAGE_BLOCKS) -> list[str]:
    """What in ``blocks`` breaks Block Kit's limits, one line each; [] if nothing does."""
    if not isinstance(blocks, list):
        return ["blocks is not a list"]
    found = [f"{len(blocks)} blocks, more than {max_blocks}"] if len(blocks) > max_blocks else []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            found.append(f"block {index} has no type")
            continue
        found += [f"block {index} ({block['type']}): {p}" for p in _block(block)]
    return found


def _block(block: dict[str, Any]) -> list[str]:
    kind = block["type"]
    found = _longer("block_id", block.get("block_id"), BLOCK_ID)
    if kind == "section":
        found += _longer("text", _text(block.get("text")), SECTION_TEXT)
        fields = block.get("fields") or []
        found += _more("fields", fields, SECTION_FIELDS)
        for field in fields:
            found += _longer("a field", _text(field), FIELD_TEXT)
        found += _element(block.get("accessory"))
    elif kind == "header":
        found += _longer("text", _text(block.get("text")), HEADER_TEXT)
    elif kind == "markdown":
        found += _longer("text", block.get("text"), MARKDOWN_TEXT)
    elif kind in ("context", "actions", "context_actions"):
        limit = {
            "context": CONTEXT_ELEMENTS,
            "actions": ACTIONS_ELEMENTS,
            "context_actions": CONTEXT_ACTIONS_ELEMENTS,
        }[kind]
        elements = block.get("elements") or []
        found += _more("elements", elements, limit)
        for element in elements:
            found += _element(element)
    return found


def _element(element: Any) -> list[str]:
    """A block element's limits (buttons, feedback buttons, their confirmations)."""
    if not isinstance(element, dict):
        return []
    found = _longer("action_id", element.get("action_id"), ACTION_ID)
    if element.get("type") == "button":
        found += _button(element)
    elif element.get("type") == "feedback_buttons":
        for key in ("positive_button", "negative_button"):
            found += _button(element.get(key) or {})
    confirm = element.get("confirm")
    if isinstance(confirm, dict):
        found += _longer("confirm title", _text(confirm.get("title")), CONFIRM_TITLE)
        found += _longer("confirm text", _text(confirm.get("text")), CONFIRM_TEXT)
        for key in ("confirm", "deny"):
            found += _longer(f"confirm {key}", _text(confirm.get(key)), CONFIRM_BUTTON)
    return found


def _button(button: dict[str, Any]) -> list[str]:
    return [
        *_longer("button text", _text(button.get("text")), BUTTON_TEXT),
        *_longer("value", button.get("value"), ACTION_VALUE),
        *_longer("url", button.get("url"), URL),
    ]


def _text(value: Any) -> Any:
    return value.get("text") if isinstance(value, dict) else value


def _longer(what: str, value: Any, limit: int) -> list[str]:
    if isinstance(value, str) and units(value) > limit:
        return [f"{what} is {units(value):,} characters, more than {limit:,}"]
    return []


def _more(what: str, items: Any, limit: int) -> list[str]:
    if isinstance(items, list) and len(items) > limit:
        return [f"{len(items)} {what}, more than {limit}"]
    return []
