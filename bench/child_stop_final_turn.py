"""Stop on a sub-agent → that child's forced final-turn request sent, once its step ends:
p99 < 10 ms; the parent's next request carries the child's handoff.

Real loop, real :class:`OpenAIChatModel`, llmock over loopback. A run delegates one task;
the sub-agent calls a tool that takes 20 ms, and a Stop is asked of the sub-agent's own
run (as its menu on the status message does) when the tool starts. A Stop never cuts the
step short, so the clock starts when the sub-agent's step ends (its ``ToolFinished``)
and stops when llmock sees the sub-agent's final-turn request arrive (its
``started_at``). Each trial checks that the final turn offers only ``final_report``, the
sub-agent ends ``EXIT-USER-STOP``, the parent is not stopped, and the parent's next
request carries the sub-agent's report, led by "Stopped by".

Also shown, for where the time goes: step end → the sub-agent's final ``TurnStarted``
event (in-process work only, no HTTP).

Usage: ``.venv/bin/python -m bench.child_stop_final_turn [--trials N]``
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, ToolCall

from agent_core import (
    Agent,
    ChildStarted,
    ExitCode,
    StopReason,
    StopSource,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    tool,
)
from bench._llmock import llmock_server, openai_model, settled_records
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line

if TYPE_CHECKING:
    from llmock.testing import LLMockServer

    from agent_core import Run, RunEvent

STEP_S = 0.02
WARMUP = 20
TASK = "Read the release notes."


@tool
async def slow_step() -> str:
    """A tool that takes 20 ms."""
    await asyncio.sleep(STEP_S)
    return "done"


class _Watch:
    """Timestamps of the sub-agent's events a trial needs, taken as they are emitted."""

    def __init__(self, parent: Run) -> None:
        self.parent = parent
        self.child: Run | None = None
        self.stop_now = asyncio.Event()
        self.step_end: float | None = None
        self.final_turn: float | None = None
        parent.events.add_listener(self._on_parent)

    def _on_parent(self, event: RunEvent) -> None:
        if isinstance(event, ChildStarted):
            self.child = next(c for c in self.parent.children if c.id == event.child_id)
            self.child.events.add_listener(self._on_child)

    def _on_child(self, event: RunEvent) -> None:
        match event:
            case ToolStarted():
                self.stop_now.set()
            case ToolFinished():
                self.step_end = time.monotonic()
            case TurnStarted(final=True):
                self.final_turn = time.monotonic()
            case _:
                pass


def script(server: LLMockServer) -> None:
    delegate = ToolCall("delegate", {"task": TASK, "tools": ["slow_step"]})
    server.state.scenarios.add(Reply(tool_calls=(delegate,)))  # the parent delegates
    server.state.scenarios.add(Reply(tool_calls=(ToolCall("slow_step"),)))  # the child's step
    server.state.scenarios.add(Reply(text="Child report: read half of them."))  # its final
    server.state.scenarios.add(Reply(text="Done, with the sub-agent's report."))  # the parent


async def one_trial(agent: Agent, server: LLMockServer) -> tuple[float, float, bool]:
    script(server)
    parent = agent.new_run("summarise the release")
    watch = _Watch(parent)
    task = asyncio.create_task(parent.run(), name="bench-run")
    async with asyncio.timeout(10):
        await watch.stop_now.wait()
    assert watch.child is not None
    watch.child.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    result = await task
    records = await settled_records(server)
    server.state.journal.clear()
    assert watch.step_end is not None and watch.final_turn is not None, "step never ended"
    final = records[2].body or {}
    final_tools = [t["function"]["name"] for t in final.get("tools", [])]
    parent_next = records[3].body or {}
    messages = parent_next.get("messages", [])
    reports = [str(m.get("content")) for m in messages if m["role"] == "tool"]
    ok = (
        len(records) == 4
        and final_tools == ["final_report"]
        and result.exit_code is ExitCode.FINAL_ANSWER
        and [c.exit_code for c in result.children] == [ExitCode.USER_STOP]
        and len(reports) == 1
        and reports[0].startswith("Stopped by U1")
    )
    sent_ms = (records[2].started_at - watch.step_end) * 1000
    return sent_ms, (watch.final_turn - watch.step_end) * 1000, ok


async def measure(trials: int) -> bool:
    with llmock_server() as server:
        model = openai_model(server.base_url())
        agent = Agent(model, [slow_step])
        try:
            for _ in range(WARMUP):
                await one_trial(agent, server)
            done = [await one_trial(agent, server) for _ in range(trials)]
        finally:
            await model.aclose()
    rows = [
        Row(
            "sub-agent's ToolFinished → its final request at llmock",
            [d[0] for d in done],
            "ms",
            10.0,
            target_id="child_stop_final_turn",
        ),
        Row("sub-agent's ToolFinished → its final TurnStarted", [d[1] for d in done], "ms"),
    ]
    wrong = sum(not d[2] for d in done)
    print_table(
        "child_stop_final_turn: Stop on a sub-agent → its final-turn request, once its step ends",
        rows,
        [
            f"trials not ending as specified (4 requests; the sub-agent's final offers only "
            f"final_report, it ends EXIT-USER-STOP, the parent finishes and its next request "
            f"carries the report led by 'Stopped by'): {wrong}",
            f"step = the sub-agent's {STEP_S * 1000:g} ms tool; Stop asked of the sub-agent's "
            f"own run when the tool starts; {WARMUP} warm-up trials not counted",
            "llmock runs in a thread of this process (shares the GIL); started_at is taken "
            "when its ASGI middleware first sees the request",
            machine_line(),
            revision_line(),
        ],
    )
    return all(r.verdict != "MISS" for r in rows) and wrong == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "child_stop_final_turn")
    p.add_argument("--trials", type=int, default=500, help="trials")
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials))


if __name__ == "__main__":
    main()
