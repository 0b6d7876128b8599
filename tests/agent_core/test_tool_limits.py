"""Every tool call is bounded (issue 7, class 1; ``TOOL_TIMEOUT``).

- ``TOOL_TIMEOUT`` ends a stuck async tool (cancelled) and a stuck sync tool (abandoned
  in its thread), and the model reads ``error: <tool> timed out after N s``.
- An Abort during a sync tool that never returns ends the run at once.
- Sync tools run in a bounded pool of their own: a pool full of stuck tools neither
  starves asyncio's default executor nor keeps the process from exiting.
- ``calculate`` refuses, quickly and with a reason, any expression whose work would blow
  up (checked against hostile examples and a hypothesis search over nested powers and
  products).

Stuck tools come from :mod:`tests.agent_core.stuck_tools` and are released when each test
ends; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core.run.config import AgentConfig
from agent_core.tools.builtin import MAX_EXPRESSION_CHARS, MAX_RESULT_BITS, calculate
from agent_core.tools.threads import ToolThreads
from agent_core.tools.toolbox import Toolbox, tool
from agent_core.values.chat import ToolCall
from agent_core.values.outcomes import ExitCode
from agent_core.values.stop import StopReason
from tests.agent_core.stuck_tools import stuck_tools

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

ROOT = Path(__file__).resolve().parents[2]
PROMPT_S = 1.0
"""An Abort or a refusal that takes longer than this is not "at once"."""


def tool_messages(llm: LLMock, request: int) -> list[str]:
    body: dict[str, Any] = llm.requests[request].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


# -- TOOL_TIMEOUT ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["awaiting", "blocked", "spinning"])
async def test_tool_timeout_ends_a_stuck_tool_and_the_model_is_told(
    llm: LLMock, make_agent: AgentFactory, kind: str
) -> None:
    async with stuck_tools() as stuck:
        stuck_tool = getattr(stuck, kind)()
        llm.call_tool(stuck_tool.name)
        llm.reply("The tool timed out, so I could not finish.")
        agent = make_agent([stuck_tool], config=AgentConfig(tool_timeout_s=0.3))

        started = time.perf_counter()
        result = await agent.new_run("use the tool").run()
        took = time.perf_counter() - started
        # An async tool is really cancelled; a sync one is left to its thread.
        assert stuck.running == (0 if kind == "awaiting" else 1)

    assert tool_messages(llm, 1) == [f"error: {stuck_tool.name} timed out after 0.3 s"]
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert 0.3 <= took < 0.3 + PROMPT_S


async def test_a_tools_own_timeout_error_is_not_mistaken_for_tool_timeout() -> None:
    @tool
    async def fetch() -> str:
        """Fetch something slow."""
        raise TimeoutError("the upstream took too long")

    outcome = await Toolbox([fetch], timeout_s=30).run(ToolCall("c1", "fetch", "{}"))

    assert outcome.output == "error: fetch raised TimeoutError: the upstream took too long"


def test_the_tool_timeout_defaults_to_120_s_and_must_be_positive() -> None:
    assert AgentConfig().tool_timeout_s == 120.0
    assert Toolbox().timeout_s == 120.0
    with pytest.raises(ValueError, match="tool_timeout_s"):
        AgentConfig(tool_timeout_s=0)
    with pytest.raises(ValueError, match="timeout_s"):
        Toolbox(timeout_s=-1)


async def test_the_terminal_runner_refuses_a_bad_tool_timeout(llm: LLMock) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_core",
        "run",
        "anything",
        env={
            **os.environ,
            "OPENAI_BASE_URL": llm.base_url(),
            "OPENAI_API_KEY": "test-key",
            "OPENAI_MODEL": "test-model",
            "TOOL_TIMEOUT": "soon",
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(15):
        _, err = await process.communicate()

    assert process.returncode == 2
    assert err.decode() == (
        "threadpilot: TOOL_TIMEOUT: 'soon' is not a positive number of seconds\n"
    )
    assert llm.requests == []


# -- Abort -------------------------------------------------------------------------------


async def test_abort_during_a_sync_tool_that_never_returns_ends_the_run_at_once(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    async with stuck_tools() as stuck:
        llm.call_tool("wait")
        run = make_agent([stuck.blocked()]).new_run("wait for it")
        async with asyncio.TaskGroup() as group:
            running = group.create_task(run.run())
            await stuck.until_started()

            aborted = time.perf_counter()
            run.request_stop(StopReason.ABORT, "U1")
            async with asyncio.timeout(PROMPT_S):
                result = await running
            took = time.perf_counter() - aborted
        assert stuck.running == 1  # the thread is still blocked; its result will be dropped

    assert result.exit_code is ExitCode.USER_ABORT
    assert took < PROMPT_S
    assert len(llm.requests) == 1


# -- the pool ----------------------------------------------------------------------------


async def test_sync_tools_wait_for_a_slot_in_their_own_pool_and_never_starve_the_loop() -> None:
    pool = ToolThreads(max_threads=2, name="test-tool")
    async with stuck_tools() as stuck:
        box = Toolbox([stuck.blocked()], timeout_s=0.5, threads=pool)
        calls = [box.run(ToolCall(f"c{i}", "wait", "{}")) for i in range(3)]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(call) for call in calls]
            await stuck.until_started(2)
            assert pool.busy == 2
            # asyncio's default executor (DNS look-ups, to_thread) is untouched.
            async with asyncio.timeout(PROMPT_S):
                assert await asyncio.to_thread(lambda: "free") == "free"
        outcomes = [t.result() for t in tasks]

    assert [o.output for o in outcomes] == ["error: wait timed out after 0.5 s"] * 3
    assert stuck.started == 2  # the third waited in line, timed out, and never ran


async def test_a_sync_tool_calling_sys_exit_ends_neither_the_process_nor_its_thread() -> None:
    pool = ToolThreads(max_threads=1, name="test-tool")

    @tool
    def leave() -> str:
        """Tries to end the process."""
        raise SystemExit(3)

    @tool
    def answer() -> str:
        """Answers."""
        return "42"

    box = Toolbox([leave, answer], timeout_s=5, threads=pool)
    left = await box.run(ToolCall("c1", "leave", "{}"))
    answered = await box.run(ToolCall("c2", "answer", "{}"))

    assert left.output == "error: leave raised RuntimeError: the tool called sys.exit(3)"
    assert answered.output == "42"


STUCK_AT_EXIT = """
import asyncio, threading
from agent_core.run.agent import Agent
from agent_core.values.stop import StopReason
from agent_core.testing import ScriptedChatModel, ScriptedTurn
from agent_core.tools.toolbox import tool

never = threading.Event()

async def main():
    loop = asyncio.get_running_loop()
    entered = asyncio.Event()

    @tool
    def wait() -> str:
        '''Never returns.'''
        loop.call_soon_threadsafe(entered.set)
        never.wait()
        return "never"

    model = ScriptedChatModel([ScriptedTurn(tool_calls=(("wait", {}),))])
    run = Agent(model, [wait]).new_run("wait")
    task = asyncio.create_task(run.run())
    await entered.wait()
    run.request_stop(StopReason.ABORT, "U1")
    print((await task).exit_code.value, flush=True)

asyncio.run(main())
"""


async def test_a_sync_tool_that_never_returns_does_not_keep_the_process_alive() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STUCK_AT_EXIT,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(15):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert process.returncode == 0, err.decode()
    assert out.decode().strip().splitlines()[-1] == ExitCode.USER_ABORT.value


# -- calculate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "answer"),
    [("2 + 3 * 4", "14"), ("(1 + 2) ** 10", "59049"), ("7 / 2", "3.5"), ("-2 ** 2", "-4")],
)
async def test_calculate_answers_ordinary_arithmetic(expression: str, answer: str) -> None:
    outcome = await Toolbox([calculate]).run(_calculate_call(expression))
    assert (outcome.ok, outcome.output) == (True, answer)


async def test_calculate_reaches_its_limit_exactly() -> None:
    largest = await Toolbox([calculate]).run(_calculate_call(f"2 ** {MAX_RESULT_BITS - 1}"))
    one_more = await Toolbox([calculate]).run(_calculate_call(f"2 ** {MAX_RESULT_BITS}"))

    assert int(largest.output) == 2 ** (MAX_RESULT_BITS - 1)
    assert not one_more.ok


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("((9**99)**99)**99", "the result would have about"),
        ("(((9**99)**99)**99)**8", "the result would have about"),
        ("9**99**99", "the result would have more than"),
        ("2**4000 * 2**4000", "the result would have about"),
        ("(10**1000)**(10**1000)", "the result would have more than"),
        ("1e308 * 10", "too large for a floating-point number"),
        ("1e999", "too large for a floating-point number"),
        ("(-8) ** 0.5", "not a real number"),
        ("-" * 450 + "1", "parts; the limit is"),
        ("__import__('os')", "not arithmetic"),
    ],
)
async def test_calculate_refuses_hostile_expressions_at_once(expression: str, reason: str) -> None:
    started = time.perf_counter()
    outcome = await Toolbox([calculate]).run(_calculate_call(expression))
    took = time.perf_counter() - started

    assert not outcome.ok
    assert outcome.output.startswith("error: calculate raised ValueError: ")
    assert reason in outcome.output
    assert took < PROMPT_S


async def test_calculate_refuses_a_gigantic_expression_before_parsing_it() -> None:
    outcome = await Toolbox([calculate]).run(_calculate_call("1+" * 500_000 + "1"))

    assert outcome.output == (
        "error: invalid arguments for calculate: expression: "
        f"String should have at most {MAX_EXPRESSION_CHARS} characters"
    )
    assert calculate.spec.parameters["properties"]["expression"]["maxLength"] == (
        MAX_EXPRESSION_CHARS
    )
    with pytest.raises(ValueError, match="characters; the limit is"):
        calculate.fn("1+" * 500_000 + "1")  # called directly, past the schema


def _calculate_call(expression: str) -> ToolCall:
    return ToolCall("c1", "calculate", json.dumps({"expression": expression}))


_numbers = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(lambda n: f"({n})"),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"({x!r})"),
)
_expressions = st.recursive(
    _numbers,
    lambda inner: st.tuples(inner, st.sampled_from(["**", "*", "**", "//", "%", "+"]), inner).map(
        lambda parts: f"({parts[0]}{parts[1]}{parts[2]})"
    ),
    max_leaves=16,
)


@settings(max_examples=400, deadline=timedelta(seconds=1))
@given(_expressions)
def test_nested_powers_and_products_are_computed_small_or_refused_fast(expression: str) -> None:
    # The deadline is the property: no example may take long, whatever it asks for (the
    # hostile ones took seconds to minutes before; a refusal takes microseconds).
    try:
        answer = calculate.fn(expression)
    except (ValueError, ArithmeticError):
        return  # refused (too large, not real, division by zero, float overflow)
    try:
        assert int(answer).bit_length() <= MAX_RESULT_BITS
    except ValueError:  # not an integer: a float
        assert math.isfinite(float(answer))
