"""One tool call must never freeze a worker (issue 7, class 1; ``TOOL_TIMEOUT``).

The real app runs on a loopback port with llmock streaming a tool call. While the tool
runs, the test probes ``GET /healthz`` back to back, and presses Stop and Abort: all of
them are answered while the tool is still running (the stuck tools run until the test
releases them, so "answered before the tool ended" is the proof, not a stopwatch), and
each click within Slack's own 3 s deadline, whatever the tool does: a hostile
``calculate``, a pure-Python spin, big-integer crunching, or a call that never returns.
How fast they are answered is a benchmark's business, not a unit test's. The tools come
from ``tests.agent_core.stuck_tools`` and are released when each test ends, so no thread
is left spinning.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from agent_core import ConfigError
from agent_core.tools.builtin import calculate
from bot.config.settings import load_settings
from tests.agent_core.stuck_tools import stuck_tools
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, WAIT_S, block_text

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from agent_core.tools.toolbox import Tool
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

SLACK_ACK_S = 3.0
"""Slack gives up on a click that is not acknowledged within 3 s (its contract, not a
speed target): a click answered later is a button that did nothing."""
HOSTILE = "(((9**99)**99)**99)**8"
"""Every exponent is small; the result has about 25 million bits (seconds of CPU)."""


@dataclass
class Pulse:
    worst_gap: float = 0.0
    answers: int = 0
    last_answer: float = 0.0


@contextlib.asynccontextmanager
async def pulse(bot: Bot) -> AsyncIterator[Pulse]:
    """Probe ``/healthz`` back to back while the block runs.

    ``worst_gap`` is the longest time between two answers (or between the last answer
    and the end of the block): a frozen process shows up there even if the freeze began
    between two probes.
    """
    seen = Pulse(last_answer=time.perf_counter())

    async def probe() -> None:
        while True:
            async with asyncio.timeout(WAIT_S):
                assert await bot.get("/healthz") == 200
            now = time.perf_counter()
            seen.worst_gap = max(seen.worst_gap, now - seen.last_answer)
            seen.answers += 1
            seen.last_answer = now

    async with asyncio.TaskGroup() as group:
        prober = group.create_task(probe(), name="healthz-probe")
        try:
            yield seen
        finally:
            seen.worst_gap = max(seen.worst_gap, time.perf_counter() - seen.last_answer)
            prober.cancel()


async def timed_click(bot: Bot, message: Any, action_id: str) -> float:
    """Press a button; seconds until Slack got its acknowledgement (a 200)."""
    started = time.perf_counter()
    async with asyncio.timeout(WAIT_S):
        assert await bot.click(message, action_id) == 200
    return time.perf_counter() - started


async def bot_with(
    make_bot: BotFactory, monkeypatch: pytest.MonkeyPatch, tools: tuple[Tool, ...], **settings: Any
) -> Bot:
    """The real app, with ``tools`` in place of the built-in ones."""
    monkeypatch.setattr("bot.process.assembly.BUILTIN_TOOLS", tools)
    return await make_bot(**settings)


def tool_messages(llm: LLMock, request: int) -> list[str]:
    body: dict[str, Any] = llm.requests[request].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_hostile_calculation_is_refused_without_freezing_the_process(
    make_bot: BotFactory, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stuck_tools() as watched:
        bot = await bot_with(make_bot, monkeypatch, (watched.observed(calculate),))
        llm.call_tool("calculate", {"expression": HOSTILE})
        llm.reply("That number is too large to compute here.")

        async with pulse(bot) as health:
            _, running = await bot.mention("how big is (((9**99)**99)**99)**8?")
            await watched.until_started()
            stop_ack_s = await timed_click(bot, running, ACTION_STOP)
            final = await bot.final(running)

    assert health.answers > 0
    assert health.worst_gap < SLACK_ACK_S
    assert stop_ack_s < SLACK_ACK_S
    (refusal,) = tool_messages(llm, 1)
    assert refusal.startswith("error: calculate")
    assert "bits" in refusal  # says why: the result would be too large
    assert "Evidence" in block_text(final)


@pytest.mark.parametrize("kind", ["spinning", "crunching"])
async def test_a_spinning_tool_leaves_health_checks_and_clicks_answered(
    make_bot: BotFactory, llm: LLMock, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    async with stuck_tools() as stuck:
        spinner: Tool = getattr(stuck, kind)()
        bot = await bot_with(make_bot, monkeypatch, (spinner,))
        llm.call_tool(spinner.name)

        async with pulse(bot) as health:
            _, running = await bot.mention("spin for a while")
            await stuck.until_started()
            # Stop waits for the tool (bounded by TOOL_TIMEOUT); Abort ends the run now.
            stop_ack_s = await timed_click(bot, running, ACTION_STOP)
            abort_ack_s = await timed_click(bot, running, ACTION_ABORT)
            final = await bot.final(running)
            answered_while_spinning = health.answers
            assert stuck.running == 1  # the run ended while its tool thread still spins

    assert answered_while_spinning > 0
    assert health.worst_gap < SLACK_ACK_S
    assert stop_ack_s < SLACK_ACK_S
    assert abort_ack_s < SLACK_ACK_S
    assert "User interlude: aborted by" in block_text(final)
    assert len(llm.requests) == 1  # no final turn after an Abort


async def test_abort_during_a_sync_tool_that_never_returns_ends_the_run_at_once(
    make_bot: BotFactory, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stuck_tools() as stuck:
        bot = await bot_with(make_bot, monkeypatch, (stuck.blocked(),))
        llm.call_tool("wait")
        _, running = await bot.mention("wait for it")
        await stuck.until_started()

        clicked = time.perf_counter()
        assert await bot.click(running, ACTION_ABORT) == 200
        final = await bot.final(running)
        ended_s = time.perf_counter() - clicked
        assert stuck.running == 1  # its thread is still blocked; its result will be dropped

    assert "User interlude: aborted by" in block_text(final)
    assert ended_s < 2.0


async def test_tool_timeout_ends_a_stuck_tool_and_tells_the_model(
    make_bot: BotFactory, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stuck_tools() as stuck:
        bot = await bot_with(make_bot, monkeypatch, (stuck.blocked(),), TOOL_TIMEOUT=0.5)
        llm.call_tool("wait")
        llm.reply("The wait timed out; nothing else to do.")
        _, running = await bot.mention("wait for it")
        final = await bot.final(running)
        assert stuck.running == 1

    assert tool_messages(llm, 1) == ["error: wait timed out after 0.5 s"]
    assert "Finished" in block_text(final)


def test_the_tool_timeout_setting_defaults_to_120_s_and_must_be_positive() -> None:
    required = {
        "SLACK_BOT_TOKEN": "xoxb-unit",
        "SLACK_SIGNING_SECRET": "unit-secret",
        "OPENAI_API_KEY": "unit-key",
        "OPENAI_MODEL": "unit-model",
        "_env_file": None,
    }
    assert load_settings(**required).TOOL_TIMEOUT == 120.0
    assert load_settings(**required, TOOL_TIMEOUT="2.5").TOOL_TIMEOUT == 2.5
    with pytest.raises(ConfigError, match=r"^TOOL_TIMEOUT: "):
        load_settings(**required, TOOL_TIMEOUT="0")
