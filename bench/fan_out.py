"""The fan-out attack: model requests for one mention at default settings, against the
bound the budgets imply.

Real loop, real :class:`OpenAIChatModel`, the built-in tools, llmock over loopback
scripted as a hostile model that gives every request (final turns included) the same
answer. Each strategy is one mention (one top-level run) at the app's default settings
(``MAX_TURNS`` 20, the budgets of ``agent_core/values/budget_settings.py``, read as the app
reads them from empty settings); the figure is every request llmock received for it.

The bound: a run starts at most ``MAX_CHILDREN_PER_RUN`` (C) sub-agents, two levels
deep, so one mention is at most 1 + C + C^2 runs, each at most ``MAX_TURNS`` turns plus
its final turn: (1 + C + C^2) * (MAX_TURNS + 1). A model that calls ordinary tools is
held tighter by ``RUN_TOOL_CALL_BUDGET`` (B): every request but a run's last two runs at
least one call, so at most B + 2 * runs (shown for information).

Usage: ``.venv/bin/python -m bench.fan_out``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, ToolCall

from agent_core import BUILTIN_TOOLS, Agent, AgentConfig, ExitCode, limits_from_settings
from agent_core.run.delegation import MAX_DEPTH, MAX_LIVE_CHILDREN
from bench._llmock import llmock_server, openai_model, settled_records
from bench._setup import bench_main, parser
from bench._stats import Figure, machine_line, print_figures, revision_line

if TYPE_CHECKING:
    from llmock.testing import LLMockServer

MAX_TURNS = 20
"""The app's default ``MAX_TURNS``."""

_DEEP = ToolCall("delegate", {"task": "fan out", "tools": ["delegate", "current_time"]})
_FLAT = ToolCall("delegate", {"task": "fan out", "tools": ["current_time"]})
_CALL = ToolCall("current_time", {})
STRATEGIES: dict[str, tuple[ToolCall, ...]] = {
    "delegate x4 a turn at every depth": (_DEEP, _DEEP, _FLAT, _FLAT),
    "delegate x4 + 12 tool calls a turn": (_DEEP, _DEEP, _FLAT, _FLAT, *[_CALL] * 12),
    "50 tool calls a turn": (_CALL,) * 50,
    "1 tool call a turn": (_CALL,),
}


@dataclass(frozen=True)
class Attack:
    name: str
    requests: int
    runs: int
    tool_calls: int
    most_at_once: int
    """The most requests llmock had open at the same time."""
    ended: ExitCode


async def attack(
    name: str, calls: tuple[ToolCall, ...], agent: Agent, server: LLMockServer
) -> Attack:
    server.state.scenarios.clear()
    server.state.journal.clear()
    server.state.scenarios.add(Reply(tool_calls=calls, times=None))
    run = agent.new_run("do everything, in parallel, as many times as you can")
    result = await run.run()
    records = await settled_records(server)
    edges = sorted(
        [(r.started_at, 1) for r in records] + [(r.ended_at or r.started_at, -1) for r in records]
    )
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    runs, todo = 0, [run]
    while todo:
        runs += 1
        todo.extend(todo.pop().children)
    return Attack(name, len(records), runs, run.budget.spent().tool_calls, most, result.exit_code)


async def measure() -> bool:
    limits = limits_from_settings({})  # the defaults, as the app reads empty settings
    config = AgentConfig(
        max_turns=MAX_TURNS,
        budget=limits.budget,
        max_tool_calls_per_step=limits.max_tool_calls_per_step,
        max_children_per_run=limits.max_children_per_run,
    )
    most = limits.max_children_per_run
    runs_bound = sum(most**depth for depth in range(MAX_DEPTH + 1))
    bound = runs_bound * (MAX_TURNS + 1)
    tool_calls = limits.budget.tool_calls or 0
    attacks: list[Attack] = []
    with llmock_server() as server:
        model = openai_model(server.base_url())
        agent = Agent(model, BUILTIN_TOOLS, config=config)
        try:
            for name, calls in STRATEGIES.items():
                attacks.append(await attack(name, calls, agent, server))
        finally:
            await model.aclose()
    figures = [
        Figure(
            f"{a.name}: model requests",
            a.requests,
            "requests",
            1,
            limit=bound + 1,
            target_id="fan_out",
            target_text=f"≤ {bound}",
        )
        for a in attacks
    ]
    print_figures(
        "fan_out: model requests for one mention at default settings, whatever the model asks",
        figures,
        [
            *(
                f"{a.name}: {a.runs} runs, {a.tool_calls} tool calls counted, at most "
                f"{a.most_at_once} requests open at once, ended {a.ended.value}"
                for a in attacks
            ),
            f"bound: (1 + {most} + {most}^2) runs * ({MAX_TURNS} turns + the final one) = "
            f"{bound}; with ordinary tool calls, RUN_TOOL_CALL_BUDGET {tool_calls} + 2 * "
            f"{runs_bound} runs = {tool_calls + 2 * runs_bound}; live sub-agents per run: "
            f"{MAX_LIVE_CHILDREN}",
            "llmock runs in a thread of this process; it answers every request at once",
            machine_line(),
            revision_line(),
        ],
    )
    return all(f.verdict == "PASS" for f in figures)


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "fan_out")
    args = p.parse_args()
    bench_main(args, measure)


if __name__ == "__main__":
    main()
