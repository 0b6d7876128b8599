"""Budgets (docs/stopping.md, Budgets): llmock scripted as a hostile model that never stops
asking for work, and what bounds it. Every test counts the requests llmock received (its
journal) and holds them to the bound the settings imply.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, ToolCall

from agent_core.models.api import ModelAPI, build_model
from agent_core.process.settings_file import settings_text
from agent_core.run.config import AgentConfig
from agent_core.run.delegation import MAX_DEPTH
from agent_core.tools.toolbox import tool
from agent_core.values.budget import Budget, BudgetKind, BudgetLimits, Prices, Spent
from agent_core.values.budget_settings import SETTINGS as BUDGET_SETTINGS
from agent_core.values.budget_settings import limits_from_settings
from agent_core.values.chat import Usage
from agent_core.values.ended import EndedBecause
from agent_core.values.errors import ConfigError
from agent_core.values.events import RunEvent, TextDelta, ToolFinished, TurnFinished
from agent_core.values.outcomes import ExitCode, Outcome
from tests.agent_core.helpers import (
    EventLog,
    base_url_for,
    offered_tools,
    system_messages,
    tool_results,
)
from tests.agent_core.test_cli import Cli

if TYPE_CHECKING:
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.run.loop import Run
    from tests.agent_core.helpers import AgentFactory


class Steps:
    """A tool that counts how often it really ran."""

    def __init__(self) -> None:
        self.ran = 0

        @tool
        async def step() -> str:
            """Take one step."""
            self.ran += 1
            return f"step {self.ran} done"

        self.tool = step


def delegate(task: str, tools: list[str]) -> ToolCall:
    return ToolCall("delegate", {"task": task, "tools": tools})


def all_runs(run: Run) -> list[Run]:
    return [run, *(r for child in run.children for r in all_runs(child))]


# -- per step and per run -------------------------------------------------------------


async def test_a_reply_with_fifty_tool_calls_runs_only_the_per_step_cap(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    steps = Steps()
    llm.add(Reply(tool_calls=(ToolCall("step"),) * 50))
    llm.reply("Done.")
    result = await make_agent([steps.tool]).new_run("take fifty steps").run()

    default_cap = AgentConfig().max_tool_calls_per_step
    assert default_cap == 16
    assert steps.ran == default_cap
    assert len(llm.requests) == 2
    results = tool_results(llm.requests[1])
    assert len(results) == 50  # every call is answered, so the conversation stays valid
    refused = [r for r in results if "MAX_TOOL_CALLS_PER_STEP" in r]
    assert len(refused) == 50 - default_cap
    assert refused[0].startswith("error: not run: one reply may run at most 16 tool calls")
    assert result.outcome is Outcome.FINISHED


async def test_delegate_four_times_a_turn_at_every_depth_is_bounded(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    """Each reply asks for four sub-agents, two that may delegate again and two that may
    not: the tree is as wide and deep as the settings allow, and no wider."""
    max_turns, most = 3, 2
    calls = (*[delegate("fan out", ["delegate"])] * 2, *[delegate("fan out", [])] * 2)
    llm.add(Reply(tool_calls=calls, times=None))
    config = AgentConfig(max_turns=max_turns, max_children_per_run=most)
    run = make_agent(config=config).new_run("fan out")
    await run.run()

    runs = all_runs(run)
    assert max(r.depth for r in runs) == MAX_DEPTH
    assert all(len(r.children) <= most for r in runs)
    run_bound = sum(most**depth for depth in range(MAX_DEPTH + 1))  # 1 + 2 + 4
    assert len(runs) == run_bound
    request_bound = run_bound * (max_turns + 1)  # each run's turns and its final turn
    assert len(llm.requests) == request_bound
    refusals = [r for r in tool_results(llm.requests[-1]) if "MAX_CHILDREN_PER_RUN" in r]
    assert refusals  # the top-level run's last turns were refused more children


async def test_no_sub_agents_allowed_means_delegate_is_not_offered(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.reply("Done alone.")
    await make_agent(config=AgentConfig(max_children_per_run=0)).new_run("work").run()
    assert "delegate" not in offered_tools(llm.requests[0])


# -- the request's budget -------------------------------------------------------------


async def test_a_tool_call_every_turn_ends_when_the_token_budget_is_spent(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    steps = Steps()
    llm.call_tool("step", times=None)  # the final turn too: a model that never reports
    budget = 1_500
    config = AgentConfig(max_turns=100, budget=BudgetLimits(tokens=budget))
    run = make_agent([steps.tool], config=config).new_run("step forever")
    events = EventLog(run)
    result = await run.run()

    replies = [e.reply for e in events.of(TurnFinished)]
    work, final = replies[:-1], replies[-1]
    spent = sum(u.total_tokens for u in work)
    # It stopped at the first reply that reached the budget, not one later.
    assert spent >= budget > spent - work[-1].total_tokens
    assert len(llm.requests) == len(work) + 1
    assert steps.ran == len(work) - 1  # the reply that spent it got no tool run
    last_request = llm.requests[-1]
    assert offered_tools(last_request) == ["final_report"]
    assert "token budget is spent" in system_messages(last_request)[-1]
    assert "token budget is spent" in tool_results(last_request)[-1]
    assert result.exit_code is ExitCode.BUDGET
    assert result.outcome is Outcome.BLOCKED
    assert result.ended_because is EndedBecause.BUDGET_EXHAUSTED
    assert f"{spent:,} tokens used of 1,500 (RUN_TOKEN_BUDGET)" in result.handoff.next_step
    assert run.budget.spent().total_tokens == spent + final.total_tokens


async def test_a_slow_stream_past_the_time_budget_finishes_then_wraps_up(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    steps = Steps()
    text = " ".join(f"word{i}" for i in range(30))
    llm.add(Reply(text=text, tool_calls=(ToolCall("step"),)))
    llm.reply("Stopped at the first step; nothing was run.")
    llm.pace(25)  # 30 words at 25 ms: well past a 0.2 s budget
    config = AgentConfig(budget=BudgetLimits(time_s=0.2))
    run = make_agent([steps.tool], config=config).new_run("work slowly")
    events = EventLog(run)

    def back_to_full_speed(event: RunEvent) -> None:  # for the final turn
        if isinstance(event, TurnFinished):
            llm.pace(0)

    run.events.add_listener(back_to_full_speed)
    result = await run.run()

    streamed = "".join(e.text for e in events.of(TextDelta))
    assert streamed.startswith(text)  # the stream in flight was let finish
    assert steps.ran == 0  # checked before the tool call
    assert len(llm.requests) == 2
    assert "time budget is spent" in system_messages(llm.requests[-1])[-1]
    assert result.exit_code is ExitCode.BUDGET
    assert result.ended_because is EndedBecause.BUDGET_EXHAUSTED
    assert "(RUN_TIME_BUDGET)" in result.handoff.next_step


async def test_the_time_budget_running_out_ends_a_retry_wait_as_a_stop_does(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    steps = Steps()
    llm.call_tool("step")
    config = AgentConfig(budget=BudgetLimits(time_s=0.5))
    run = make_agent([steps.tool], config=config).new_run("work")

    def refuse_for_a_minute(event: RunEvent) -> None:
        if isinstance(event, ToolFinished):  # the next turn is refused, for 60 s
            llm.rate_limit(retry_after=60)
            llm.reply("Out of time; one step done.")

    run.events.add_listener(refuse_for_a_minute)
    result = await run.run()

    assert result.exit_code is ExitCode.BUDGET
    assert result.timings.duration_s < 30  # not the provider's minute
    assert "time budget is spent" in system_messages(llm.requests[-1])[-1]
    assert len(llm.requests) == 3  # the step, the refused turn, the final turn
    assert result.handoff.evidence == "Out of time; one step done."


async def test_a_sub_agent_spends_from_its_parents_budget(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    steps = Steps()
    llm.add(Reply(tool_calls=(delegate("step a lot", ["step"]),)))
    llm.call_tool("step", times=None)
    config = AgentConfig(budget=BudgetLimits(tool_calls=3))
    run = make_agent([steps.tool], config=config).new_run("delegate the stepping")
    result = await run.run()

    # delegate is the first call and the child's two steps spend the rest: then the
    # child's final turn, and the parent's (the child's budget was the parent's).
    assert steps.ran == 2
    (child,) = run.children
    assert child.result is not None and child.result.exit_code is ExitCode.BUDGET
    assert len(llm.requests) == 5
    assert result.exit_code is ExitCode.BUDGET
    assert "tool-call budget is spent: 3 tool calls used of 3" in result.handoff.next_step


async def test_a_continued_request_starts_from_what_it_had_spent(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    before = Spent(prompt_tokens=900, completion_tokens=100, tool_calls=4, elapsed_s=12.5)
    carried = Spent.from_dict(json.loads(json.dumps(before.to_dict())))
    assert carried == before
    agent = make_agent(config=AgentConfig(budget=BudgetLimits(tokens=1_000)))
    result = await agent.new_run("go on", spent=carried).run()

    assert llm.requests == []  # nothing was left: the model is not called
    assert result.exit_code is ExitCode.BUDGET
    assert result.outcome is Outcome.BLOCKED
    assert "1,000 tokens used of 1,000" in result.handoff.next_step


def test_cost_is_priced_per_kind_and_spends_the_cost_budget() -> None:
    prices = Prices(input_per_million=2.0, output_per_million=10.0)
    budget = Budget(BudgetLimits(tokens=None, cost_usd=0.01, prices=prices))
    budget.charge(Usage(prompt_tokens=2_000, completion_tokens=500))  # 0.004 + 0.005
    assert budget.spent().cost_usd == pytest.approx(0.009)
    assert budget.exhaustion() is None
    budget.charge(Usage(prompt_tokens=500, completion_tokens=0))  # + 0.001
    spent = budget.exhaustion()
    assert spent is not None and spent.kind is BudgetKind.COST
    assert spent.sentence() == (
        "The request's cost budget is spent: $0.0100 used of $0.01 (RUN_COST_BUDGET)."
    )


def test_a_summary_made_outside_a_run_is_added_to_what_the_request_spent() -> None:
    before = Spent(prompt_tokens=1_000, completion_tokens=100, tool_calls=3, elapsed_s=9.0)
    prices = Prices(input_per_million=2.0, output_per_million=10.0)

    unpriced = before.with_usage(Usage(prompt_tokens=400, completion_tokens=50), None)
    priced = before.with_usage(Usage(prompt_tokens=400, completion_tokens=50), prices)

    assert (unpriced.total_tokens, unpriced.tool_calls, unpriced.elapsed_s) == (1_550, 3, 9.0)
    assert unpriced.cost_usd is None
    assert priced.cost_usd == pytest.approx(0.0013)  # 400 * 2 + 50 * 10 per million


# -- the settings ---------------------------------------------------------------------


def test_the_settings_defaults_and_zero_turns_a_budget_off() -> None:
    defaults = limits_from_settings({})
    assert defaults.budget == BudgetLimits(tokens=1_000_000, tool_calls=200, time_s=1800)
    assert (defaults.max_tool_calls_per_step, defaults.max_children_per_run) == (16, 8)
    assert defaults.max_output_tokens is None and defaults.context_window is None
    off = limits_from_settings(
        {"RUN_TOKEN_BUDGET": "0", "RUN_TOOL_CALL_BUDGET": "0", "RUN_TIME_BUDGET": "0"}
    )
    assert off.budget == BudgetLimits(tokens=None, tool_calls=None, time_s=None)
    written = limits_from_settings(
        {
            "RUN_TIME_BUDGET": "10m",
            "RUN_COST_BUDGET": "2.50",
            "MODEL_PRICE_INPUT": "3",
            "MODEL_PRICE_OUTPUT": "15",
            "MODEL_CONTEXT_WINDOW": "128000",
            "MODEL_MAX_OUTPUT_TOKENS": "4096",
        }
    )
    assert written.budget.time_s == 600
    assert written.budget.cost_usd == 2.5 and written.budget.prices == Prices(3, 15)
    assert (written.context_window, written.max_output_tokens) == (128_000, 4_096)


def test_an_empty_budget_setting_turns_it_off_and_an_absent_one_is_the_default() -> None:
    empty = limits_from_settings(
        {"RUN_TOKEN_BUDGET": "", "RUN_TOOL_CALL_BUDGET": " ", "RUN_TIME_BUDGET": ""}
    )
    assert empty.budget == BudgetLimits(tokens=None, tool_calls=None, time_s=None)
    # Not a budget: empty is the default (the caps cannot be turned off).
    caps = limits_from_settings({"MAX_TOOL_CALLS_PER_STEP": "", "MAX_CHILDREN_PER_RUN": ""})
    assert (caps.max_tool_calls_per_step, caps.max_children_per_run) == (16, 8)
    assert caps.budget == BudgetLimits()


def test_the_terminal_reads_an_empty_budget_as_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in BUDGET_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RUN_TOKEN_BUDGET", "")
    monkeypatch.setenv("MAX_CHILDREN_PER_RUN", "")
    (tmp_path / ".env").write_text("RUN_TIME_BUDGET=\nMAX_TOOL_CALLS_PER_STEP=\n")

    limits = limits_from_settings(settings_text())

    assert limits.budget == BudgetLimits(tokens=None, tool_calls=200, time_s=None)
    assert (limits.max_tool_calls_per_step, limits.max_children_per_run) == (16, 8)


@pytest.mark.parametrize(
    ("env", "setting", "problem"),
    [
        ({"RUN_COST_BUDGET": "5"}, "RUN_COST_BUDGET", "needs MODEL_PRICE_INPUT and"),
        ({"MODEL_PRICE_INPUT": "3"}, "MODEL_PRICE_OUTPUT", "set it too"),
        ({"RUN_TOKEN_BUDGET": "lots"}, "RUN_TOKEN_BUDGET", "not a whole number"),
        ({"RUN_TIME_BUDGET": "soon"}, "RUN_TIME_BUDGET", "not a duration"),
        ({"MAX_TOOL_CALLS_PER_STEP": "0"}, "MAX_TOOL_CALLS_PER_STEP", "at least 1"),
        ({"MODEL_PRICE_INPUT": "-1", "MODEL_PRICE_OUTPUT": "1"}, "MODEL_PRICE_INPUT", "USD"),
    ],
)
def test_a_bad_budget_setting_is_named(env: dict[str, str], setting: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        limits_from_settings(env)
    assert refused.value.setting == setting
    assert problem in refused.value.problem


# -- the model adapters ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "field"),
    [
        (ModelAPI.OPENAI_CHAT, "max_completion_tokens"),
        (ModelAPI.OPENAI_RESPONSES, "max_output_tokens"),
        (ModelAPI.ANTHROPIC, "max_tokens"),
    ],
)
async def test_every_adapter_caps_each_reply_at_model_max_output_tokens(
    llm: LLMock, api: ModelAPI, field: str
) -> None:
    llm.reply("Short.")
    model = build_model(
        api, model="m", api_key="k", base_url=base_url_for(llm, api), max_output_tokens=321
    )
    try:
        from agent_core.run.agent import Agent

        await Agent(model).new_run("answer").run()
    finally:
        await model.aclose()
    body = llm.requests[-1].body or {}
    assert body[field] == 321


# -- the terminal runner --------------------------------------------------------------


async def test_the_terminal_runner_honours_the_budget_and_reports_the_requests_usage(
    llm: LLMock,
) -> None:
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "6 * 7"}),), times=None))
    env = {"RUN_TOOL_CALL_BUDGET": "2", "MODEL_PRICE_INPUT": "1", "MODEL_PRICE_OUTPUT": "1"}
    cli = await Cli.start(llm, "compute forever", "--json", env=env)
    status, result = await cli.finish_json()

    assert status == 0
    assert result["outcome"] == "blocked"
    assert result["exit_code"] == "EXIT-BUDGET"
    assert result["ended_because"] == "budget_exhausted"
    usage = result["usage"]
    assert usage["tool_calls"] == 2
    assert len(llm.requests) == 3  # two replies whose calls ran, then the final turn
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert usage["cost_usd"] == pytest.approx(usage["total_tokens"] / 1_000_000)


async def test_the_terminal_runners_usage_counts_its_sub_agents(llm: LLMock) -> None:
    delegate = ToolCall("delegate", {"task": "multiply six by seven", "tools": ["calculate"]})
    llm.add(Reply(tool_calls=(delegate,)))
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "6 * 7"}),)))
    llm.reply("42")
    llm.reply("The child says 42.")
    env = {"MODEL_PRICE_INPUT": "1", "MODEL_PRICE_OUTPUT": "1"}
    cli = await Cli.start(llm, "delegate it", "--json", env=env)
    status, result = await cli.finish_json()

    assert status == 0, cli.stderr
    usage = result["usage"]
    (child,) = result["children"]
    # The parent ran delegate, the sub-agent calculate: both are the request's.
    assert usage["tool_calls"] == 2
    # Four replies: the parent's two and the sub-agent's two (its own usage, kept on it).
    assert usage["total_tokens"] > child["usage"]["total_tokens"] > 0
    assert usage["prompt_tokens"] > child["usage"]["prompt_tokens"]
    assert usage["cost_usd"] == pytest.approx(usage["total_tokens"] / 1_000_000)


async def test_the_terminal_runner_wraps_up_at_90_percent_of_model_context_window(
    llm: LLMock,
) -> None:
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "6 * 7"}),)))
    llm.reply("Summary of the work so far.")
    # The system prompt alone is far beyond 90 % of a 60-token window.
    cli = await Cli.start(llm, "compute", "--json", env={"MODEL_CONTEXT_WINDOW": "60"})
    status, result = await cli.finish_json()

    assert status == 0
    assert len(llm.requests) == 2
    assert "context window" in system_messages(llm.requests[-1])[-1]
    assert result["exit_code"] == "EXIT-TOKEN-LIMIT"
    assert result["ended_because"] == "context_exhausted"
