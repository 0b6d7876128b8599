"""Budget spent → forced final turn request sent, once the step ends: p99 < 10 ms.

Real loop, real :class:`OpenAIChatModel`, llmock over loopback, as ``stop_final_turn``.
Spending a budget never cuts the step short, so the clock starts when the step ends and
stops when llmock sees the final-turn request arrive (its ``started_at``). Two kinds of
step, each ``--trials`` times:

- tool: the model calls a tool that takes 20 ms, and that call is the whole tool-call
  budget (``RUN_TOOL_CALL_BUDGET=1``). The step ends at the ``ToolFinished`` event.
- tokens: the model's answer (text + a tool call) spends the token budget by itself
  (``RUN_TOKEN_BUDGET=1``); its tool call is refused before it runs. The step ends at the
  run's ``TurnFinished`` event.

Also shown, for where the time goes: step end → the final turn's ``TurnStarted`` event
(in-process work only, no HTTP).

Usage: ``.venv/bin/python -m bench.budget_final_turn [--trials N]``
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from llmock.scenarios import Reply, ToolCall

from agent_core import (
    Agent,
    AgentConfig,
    BudgetLimits,
    ExitCode,
    ToolFinished,
    TurnFinished,
    TurnStarted,
)
from bench._llmock import llmock_server, openai_model, settled_records
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line
from bench.stop_final_turn import STEP_S, slow_step

if TYPE_CHECKING:
    from llmock.testing import LLMockServer

    from agent_core import RunEvent

Kind = Literal["tool", "tokens"]
WARMUP = 20
BUDGETS: dict[Kind, BudgetLimits] = {
    "tool": BudgetLimits(tool_calls=1),
    "tokens": BudgetLimits(tokens=1),
}


@dataclass(frozen=True)
class Trial:
    sent_ms: float
    """Step end → llmock saw the final-turn request start."""
    in_process_ms: float
    """Step end → the final turn's TurnStarted event."""
    as_specified: bool
    """Two requests, the second offering only final_report, the run ending EXIT-BUDGET."""


class _Watch:
    """Timestamps of the events a trial needs, taken synchronously as they are emitted."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.step_end: float | None = None
        self.final_turn: float | None = None

    def __call__(self, event: RunEvent) -> None:
        match event:
            case TurnFinished() if self.kind == "tokens" and self.step_end is None:
                self.step_end = time.monotonic()
            case ToolFinished() if self.kind == "tool":
                self.step_end = time.monotonic()
            case TurnStarted(final=True):
                self.final_turn = time.monotonic()
            case _:
                pass


async def one_trial(agents: dict[Kind, Agent], server: LLMockServer, kind: Kind) -> Trial:
    server.state.scenarios.add(
        Reply(text="Let me take a step.", tool_calls=(ToolCall("slow_step"),)),
        Reply(text="Wrapped up as asked."),
    )
    run = agents[kind].new_run("take a step")
    watch = _Watch(kind)
    run.events.add_listener(watch)
    result = await run.run()
    records = await settled_records(server)
    server.state.journal.clear()
    assert watch.step_end is not None and watch.final_turn is not None, "no final turn"
    last = records[-1].body or {}
    final_tools = [t["function"]["name"] for t in last.get("tools", [])]
    return Trial(
        sent_ms=(records[-1].started_at - watch.step_end) * 1000,
        in_process_ms=(watch.final_turn - watch.step_end) * 1000,
        as_specified=len(records) == 2
        and final_tools == ["final_report"]
        and result.exit_code is ExitCode.BUDGET,
    )


async def measure(trials: int) -> bool:
    results: dict[Kind, list[Trial]] = {}
    with llmock_server() as server:
        model = openai_model(server.base_url())
        agents: dict[Kind, Agent] = {
            kind: Agent(model, [slow_step], config=AgentConfig(budget=budget))
            for kind, budget in BUDGETS.items()
        }
        try:
            for kind in BUDGETS:
                for _ in range(WARMUP):
                    await one_trial(agents, server, kind)
                results[kind] = [await one_trial(agents, server, kind) for _ in range(trials)]
        finally:
            await model.aclose()
    rows: list[Row] = []
    for kind, ended_by in (
        ("tool", "tool-call budget, ToolFinished"),
        ("tokens", "token budget, stream end"),
    ):
        done = results[kind]
        rows += [
            Row(
                f"{ended_by} → final request at llmock",
                [t.sent_ms for t in done],
                "ms",
                10.0,
                target_id="budget_final_turn",
            ),
            Row(f"{ended_by} → final TurnStarted", [t.in_process_ms for t in done], "ms"),
        ]
    wrong = sum(not t.as_specified for trial_list in results.values() for t in trial_list)
    print_table(
        "budget_final_turn: budget spent → forced final turn request sent, once the step ends",
        rows,
        [
            "trials not ending as specified (2 requests, the final offers only final_report, "
            f"EXIT-BUDGET): {wrong}",
            f"step = a {STEP_S * 1000:g} ms tool that is the whole tool-call budget, or a "
            f"model answer that spends the token budget; {WARMUP} warm-up trials per kind "
            "not counted",
            "llmock runs in a thread of this process (shares the GIL); started_at is taken "
            "when its ASGI middleware first sees the request",
            machine_line(),
            revision_line(),
        ],
    )
    return all(r.verdict != "MISS" for r in rows) and wrong == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "budget_final_turn")
    p.add_argument("--trials", type=int, default=500, help="trials per kind of step")
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials))


if __name__ == "__main__":
    main()
