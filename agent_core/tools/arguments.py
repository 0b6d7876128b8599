"""A tool call's arguments: read once, strictly, and shown as the call receives them.

The model sends a call's arguments as JSON text. :func:`parse_arguments` is the one
reader every call goes through (:class:`~agent_core.tools.toolbox.Toolbox`), before any person is
asked to approve it and before any tool runs. It accepts exactly one JSON object and
refuses what JSON readers disagree on, since a person approving a call must see what
the tool will get:

- a key repeated in one object, at any depth (``{"path": "a", ..., "path": "b"}``: most
  readers keep the last, a person reading the text sees the first);
- ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON and which other readers
  refuse or read differently.

:func:`shown_arguments` is what a person is shown (the approval message, its **Show
all**, the terminal's y/N prompt): the parsed object written out again, indented, with
every character that shows as nothing, or reorders the text around it (zero-width
characters, bidirectional controls, other format and control characters, unusual
spaces, variation selectors), written as its ``\\uXXXX`` escape. It is still JSON, and
reads back to the very same object.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

__all__ = ["ArgumentsError", "parse_arguments", "shown_arguments"]


class ArgumentsError(ValueError):
    """The arguments are not one JSON object a tool may be given (the message says why)."""


def parse_arguments(text: str) -> dict[str, Any]:
    """The arguments object in ``text`` (empty text is ``{}``). Raises
    :class:`ArgumentsError` for anything but one JSON object with no repeated key and no
    ``NaN`` / ``Infinity``."""
    try:
        value = json.loads(text or "{}", object_pairs_hook=_unique, parse_constant=_no_constant)
    except ArgumentsError:
        raise
    except ValueError as exc:  # json.JSONDecodeError, and a lone surrogate's UnicodeError
        raise ArgumentsError(str(exc)) from None
    if not isinstance(value, dict):
        raise ArgumentsError(f"arguments must be a JSON object, not {type(value).__name__}")
    return value


def shown_arguments(text: str) -> str:
    """The arguments in ``text`` as a person is shown them: indented JSON, invisible
    characters escaped (module docstring). Text :func:`parse_arguments` refuses (which
    no tool is given) is shown as it is, its invisible characters escaped all the same."""
    try:
        text = json.dumps(parse_arguments(text), indent=2, ensure_ascii=False)
    except ArgumentsError:
        pass
    return "".join(c if " " <= c < "\x7f" or c == "\n" else _escaped(c) for c in text)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ArgumentsError(f"the key {json.dumps(key)[:80]} appears more than once")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ArgumentsError(f"{name} is not a JSON number")


_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
"""Control and format characters (zero-width, bidi, tags), lone surrogates, private and
unassigned code points, and separators and spaces other than the plain one."""
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
"""Hangul fillers: letters by category, shown as nothing."""


def _invisible(char: str) -> bool:
    if char in " \n":  # the plain space, and the lines of the indentation
        return False
    if char in _INVISIBLE_LETTERS or _variation_selector(char):
        return True
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES


def _variation_selector(char: str) -> bool:
    return "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def _escaped(char: str) -> str:
    """``char`` as it is, or as its JSON escape if it would not show."""
    if not _invisible(char):
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # as JSON writes it: a surrogate pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
