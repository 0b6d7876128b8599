"""What the approver sees is what runs (docs/tools.md, Approvals).

The app runs for real (tests/bot harness) with our own MCP server over streamable HTTP
(:mod:`tests.fakes.mcp_server`), whose ``write_note`` waits for approval and which
records every call it gets. The fake Slack refuses what Slack refuses (a section over
3,000 characters, a modal that breaks Slack's limits).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core import ApprovalRecord, ThreadKey, shown_arguments
from bot import messages
from bot.views import block_limits as limits
from bot.views.approval import (
    ACTION_APPROVE,
    ACTION_SHOW_ALL,
    ARGUMENTS_UNITS,
    arguments_view,
    render_approval,
)
from bot.views.code_text import code_blocks
from tests.bot.approvals.test_approvals import approval_message, tool_messages
from tests.bot.dashboard.test_home import home, open_home, press, says
from tests.bot.harness import WAIT_S, block_text, buttons, buttons_in
from tests.fakes import slack_requests
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_blocks import blocks_text
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot


@pytest.fixture
async def bot(make_bot: BotFactory, fake: FakeMcpServer, tmp_path: Path) -> AsyncIterator[Bot]:
    """The app, with the notes server: every tool but ``read_note`` waits for approval."""
    async with serve_http(fake) as url:
        path = tmp_path / "mcp.json"
        entry = {"url": url, "approval": "unless_read_only"}
        path.write_text(json.dumps({"mcpServers": {"notes": entry}}))
        yield await make_bot(MCP_CONFIG=str(path))


class _Twin(str):
    """A key equal to no other, so a dict can hold the same key twice and json.dumps
    writes it twice: how a model's JSON with a repeated key is made."""

    __slots__ = ()

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


async def test_a_repeated_key_is_refused_before_anyone_is_asked_and_nothing_runs(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    # Before: the message showed the harmless first "text" and the call ran the second.
    hidden = {_Twin("text"): "notes/todo.md", "pad": " " * 800, _Twin("text"): "~/.ssh/keys"}
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", hidden),)))
    llm.reply("The call was refused.")

    _, status = await bot.mention("update the note")
    final = await bot.final(status)

    assert "The call was refused." in block_text(final)
    assert fake.notes == []
    assert status.thread_ts is not None
    thread = bot.slack.thread(status.channel, status.thread_ts)
    assert not [m for m in thread if ACTION_APPROVE in buttons(m)]
    [result] = tool_messages(llm.requests[1])
    assert result.startswith("error: the arguments were not a valid JSON object")
    assert '"text" appears more than once' in result


async def test_arguments_full_of_ampersands_are_posted_and_can_be_approved(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    # Before: 600 '&' escaped to 3,000+ characters, Slack refused the post, the call
    # waited unseen until it expired.
    text = "&" * 2_000
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", {"text": text}),)))
    llm.reply("Wrote it.")

    _, status = await bot.mention("update the note")
    approval = await approval_message(bot, status)
    assert "&amp;" * 500 in block_text(approval)
    assert ACTION_SHOW_ALL in buttons(approval)
    assert await bot.click(approval, ACTION_APPROVE) == 200
    await bot.final(status)

    assert fake.notes == [("write_note", text)]


async def test_show_all_shows_every_character_the_call_gets(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    # Before: the message stopped at 600 characters; the rest ran unseen.
    text = "".join(f"line {n}: <@U0TPOTHER02> ``` \u202e & more\n" for n in range(600))
    arguments = {"text": text}
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", arguments),)))
    llm.reply("Wrote it.")

    _, status = await bot.mention("update the note")
    approval = await approval_message(bot, status)
    shown = shown_arguments(json.dumps(arguments))
    assert messages.arguments_left_out(0).split(" ", 1)[1] in block_text(approval)
    assert "<@U0TPOTHER02>" not in block_text(approval)

    assert await bot.click(approval, ACTION_SHOW_ALL) == 200
    opened = await bot.slack.wait_until(lambda s: s.state.modals() or None, timeout=WAIT_S)
    assert opened is not None
    [modal] = opened
    seen = unfenced(modal["blocks"])
    assert seen == shown
    assert "\\u202e" in seen and "\u202e" not in seen
    assert "do not fit" not in blocks_text(modal["blocks"])
    assert fake.notes == []  # Show all decides nothing


async def test_show_all_on_app_home_and_never_for_a_press_from_elsewhere(
    bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    arguments = {"text": "x" * 5_000 + " the end"}
    llm.add(Reply(tool_calls=(ToolCall("notes__write_note", arguments),)))
    llm.reply("Wrote it.")
    _, status = await bot.mention("update the note")
    approval = await approval_message(bot, status)

    # The same button, pressed on another message of another channel: nothing opens.
    forged = slack_requests.click_button(approval, ACTION_SHOW_ALL)
    forged["container"]["channel_id"] = forged["channel"]["id"] = "C0TPOTHER01"
    assert await press(bot, forged) == 200
    [refused] = await bot.ephemerals(DEFAULT_USER, channel="C0TPOTHER01")
    assert refused == messages.APPROVAL_NOT_FOUND

    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says(messages.HEADING_APPROVALS))
    assert await press(bot, slack_requests.home_click(view, ACTION_SHOW_ALL)) == 200
    opened = await bot.slack.wait_until(lambda s: s.state.modals() or None, timeout=WAIT_S)
    assert opened is not None
    [modal] = opened
    assert unfenced(modal["blocks"]) == shown_arguments(json.dumps(arguments))
    assert fake.notes == []


# -- the views alone: within Block Kit's limits whatever the arguments hold ------------


def held(arguments: str) -> ApprovalRecord:
    return ApprovalRecord(
        id="a1",
        run_id="r1",
        thread=ThreadKey("T1", "C1", "1.000001"),
        requester="U1",
        tool="notes__write_note",
        arguments=arguments,
    )


HOSTILE_TEXTS = [
    ("&" * 20_000, True),  # five units each once escaped
    ("&" * 60_000, False),
    ("<" * 3_000 + ">" * 3_000, True),
    ("`" * 10_000, True),
    ("\U0001f600" * 8_000, True),  # two UTF-16 units each, 12 bytes in JSON
    ("\u202e\u200b" * 5_000, True),  # six characters each once shown as escapes
    ("x" * 1_000_000, False),
]


@pytest.mark.parametrize(("text", "fits"), HOSTILE_TEXTS, ids=lambda t: f"{str(t)[:1]!r}")
def test_the_message_and_the_modal_stay_within_block_kits_limits(text: str, fits: bool) -> None:
    record = held(json.dumps({"text": text}))
    shown = shown_arguments(record.arguments)

    _, blocks = render_approval(record)
    view = arguments_view(record)

    assert limits.problems(blocks) == []
    assert limits.problems(view["blocks"], max_blocks=limits.VIEW_BLOCKS) == []
    assert len(json.dumps(view).encode()) <= limits.VIEW_BYTES
    left_out = code_blocks(shown, budget=ARGUMENTS_UNITS).left_out
    assert messages.arguments_left_out(left_out) in blocks_text(blocks)
    seen = unfenced(view["blocks"])
    assert shown.startswith(seen)
    if fits:
        assert seen == shown
        assert view["blocks"][-1]["type"] == "section"
    else:  # more than Slack holds: the modal says how much is missing
        assert blocks_text(view["blocks"][-1:]) == messages.arguments_too_long(
            len(shown) - len(seen)
        )


def unfenced(blocks: list[dict[str, Any]]) -> str:
    """The text the code blocks of a modal hold, as a person reads it."""
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"][1:]
    together = "".join(s.removeprefix("```").removesuffix("```") for s in sections)
    return (
        together.replace("\u200b", "")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
    )


def test_a_short_call_is_shown_whole_with_no_show_all() -> None:
    record = held('{"path": "notes/todo.md"}')

    _, blocks = render_approval(record)

    assert blocks_text(blocks).count('"path": "notes/todo.md"') == 1
    assert ACTION_SHOW_ALL not in buttons_in(blocks)
