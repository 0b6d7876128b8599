"""A tool call's arguments are read once, strictly, and shown as the call receives them
(:mod:`agent_core.tools.arguments`; docs/tools.md, Approvals: what the approver sees is what
runs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.tools.arguments import ArgumentsError, parse_arguments, shown_arguments
from agent_core.tools.toolbox import Toolbox, remote_tool
from agent_core.values.chat import ToolCall

REFUSED = [
    ('{"path": "notes/todo.md", "pad": 1, "path": "~/.ssh/authorized_keys"}', "appears"),
    ('{"a": {"b": 1, "c": [{"d": 1, "d": 2}]}}', "appears"),
    ('{"n": NaN}', "NaN"),
    ('{"n": Infinity}', "Infinity"),
    ('{"n": [-Infinity]}', "Infinity"),
    ("[1, 2]", "object"),
    ('"text"', "object"),
    ('{"a": 1} {"a": 2}', "Extra data"),
    ('{"a": 1', "Expecting"),
]


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_anything_but_one_plain_object_is_refused(text: str, why: str) -> None:
    with pytest.raises(ArgumentsError, match=why):
        parse_arguments(text)


def test_an_object_reads_as_json_does_and_empty_text_is_no_arguments() -> None:
    text = '{"a": [1, 2.5, null, true], "b": {"c": "d"}, "e": 1e400}'
    assert parse_arguments(text) == json.loads(text)
    assert parse_arguments("") == {}


def test_invisible_characters_are_shown_as_escapes_and_read_back_the_same() -> None:
    hidden = "ok\u202etxt.exe\u200b\u2066\u00a0\ufe0f\U000e0041\x1b[2J\u2028\ud800"
    text = json.dumps({"path": hidden, "keys": ["k\u200dk"]})

    shown = shown_arguments(text)

    for char in "\u202e\u200b\u2066\u00a0\ufe0f\U000e0041\x1b\u2028\ud800\u200d":
        assert char not in shown
    for escape in ("\\u202e", "\\u200b", "\\u00a0", "\\udb40\\udc41", "\\u001b", "\\ud800"):
        assert escape in shown
    assert json.loads(shown) == parse_arguments(text)  # still JSON, and the same object
    assert shown_arguments('{"word": "naïve café 東京 😀"}') == (
        '{\n  "word": "naïve café 東京 😀"\n}'
    )


def test_text_no_tool_is_given_is_shown_as_it_is_with_escapes() -> None:
    assert shown_arguments('{"a": 1, "a": 2\u200b}') == '{"a": 1, "a": 2\\u200b}'


async def test_a_call_with_a_repeated_key_is_refused_before_approval_and_never_runs() -> None:
    ran: list[dict[str, Any]] = []
    asked: list[ToolCall] = []

    async def write(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        return "written"

    class Gate:
        async def clear(self, call: ToolCall) -> str | None:
            asked.append(call)
            return None

    box = Toolbox([remote_tool("write", "Write.", {}, write, needs_approval=True)], gate=Gate())
    call = ToolCall("c1", "write", '{"path": "a", "path": "b"}')

    outcome = await box.run(call)

    assert not outcome.ok
    assert outcome.output.startswith("error: the arguments were not a valid JSON object")
    assert (ran, asked) == ([], [])
    assert (await box.run(ToolCall("c2", "write", '{"path": "a"}'))).ok
    assert ran == [{"path": "a"}] and len(asked) == 1
