"""Stop or guidance → next model request sent, once the current step ends: p99 < 10 ms.

Real loop, real :class:`OpenAIChatModel`, llmock over loopback. A Stop never cuts the
step short, so the clock starts when the step ends and stops when llmock sees the
final-turn request arrive (its ``started_at``). Two kinds of step, each ``--trials`` times:

- stream: the model's answer (text + a tool call) stalls for 20 ms after two chunks;
  Stop is requested on the first text delta, mid-stream. The step ends when the stream
  does: the run's ``TurnFinished`` event. The tool call is not run (the user asked to
  stop), so the next request is the final turn.
- tool: the model calls a tool that takes 20 ms; Stop is requested when the tool starts.
  The step ends at the ``ToolFinished`` event.
- guidance: the same 20 ms tool, but a person's reply is queued when it starts instead of
  a Stop; the next request (an ordinary turn) must carry it as a user-role message.

Also shown, for where the time goes: step end → the final turn's ``TurnStarted`` event
(in-process work only, no HTTP).

Usage: ``.venv/bin/python -m bench.stop_final_turn [--trials N]``
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core import (
    Agent,
    ExitCode,
    Guidance,
    Outcome,
    StopReason,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
    tool,
)
from bench._llmock import llmock_server, openai_model, settled_records
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line

if TYPE_CHECKING:
    from llmock.testing import LLMockServer

    from agent_core import RunEvent

Kind = Literal["stream", "tool", "guidance"]
STEP_S = 0.02
GUIDANCE = "Use the other time zone."
WARMUP = 20


@tool
async def slow_step() -> str:
    """A tool that takes 20 ms."""
    await asyncio.sleep(STEP_S)
    return "done"


@dataclass(frozen=True)
class Trial:
    sent_ms: float
    """Step end → llmock saw the next request (the final turn, or the guided turn) start."""
    in_process_ms: float
    """Step end → that turn's TurnStarted event."""
    as_specified: bool
    """Two requests; after a Stop the second offers only final_report and the run ended
    by Stop; after guidance the second carries it as a user message."""


class _Watch:
    """Timestamps of the events a trial needs, taken synchronously as they are emitted."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.stop_now = asyncio.Event()
        self.step_end: float | None = None
        self.next_turn: float | None = None

    def __call__(self, event: RunEvent) -> None:
        match event:
            case TextDelta() if self.kind == "stream":
                self.stop_now.set()
            case ToolStarted() if self.kind in ("tool", "guidance"):
                self.stop_now.set()
            case TurnFinished() if self.kind == "stream" and self.step_end is None:
                self.step_end = time.monotonic()
            case ToolFinished() if self.kind in ("tool", "guidance"):
                self.step_end = time.monotonic()
            case TurnStarted(turn=2):
                self.next_turn = time.monotonic()
            case _:
                pass


def script(server: LLMockServer, kind: Kind) -> None:
    if kind == "stream":
        server.state.scenarios.add(
            Reply(text="Let me check the time first.", tool_calls=(ToolCall("current_time"),)),
            StreamFault("stall", after_chunks=2, stall_seconds=STEP_S),
        )
    else:
        server.state.scenarios.add(Reply(tool_calls=(ToolCall("slow_step"),)))
    server.state.scenarios.add(Reply(text="Done as asked."))


async def one_trial(agent: Agent, server: LLMockServer, kind: Kind) -> Trial:
    script(server, kind)
    run = agent.new_run("what time is it?")
    watch = _Watch(kind)
    run.events.add_listener(watch)
    task = asyncio.create_task(run.run(), name="bench-run")
    async with asyncio.timeout(10):
        await watch.stop_now.wait()
    if kind == "guidance":
        run.add_guidance(Guidance(id="g", author="bench", text=GUIDANCE))
    else:
        run.request_stop(StopReason.STOP, "bench")
    result = await task
    records = await settled_records(server)
    server.state.journal.clear()
    assert watch.step_end is not None and watch.next_turn is not None, "step never ended"
    last = records[-1].body or {}
    if kind == "guidance":
        carried = [m for m in last.get("messages", []) if GUIDANCE in str(m.get("content"))]
        ok = [m["role"] for m in carried] == ["user"] and result.outcome is Outcome.FINISHED
    else:
        final_tools = [t["function"]["name"] for t in last.get("tools", [])]
        ok = final_tools == ["final_report"] and result.exit_code is ExitCode.USER_STOP
    return Trial(
        sent_ms=(records[-1].started_at - watch.step_end) * 1000,
        in_process_ms=(watch.next_turn - watch.step_end) * 1000,
        as_specified=len(records) == 2 and ok,
    )


async def measure(trials: int) -> bool:
    results: dict[Kind, list[Trial]] = {}
    with llmock_server() as server:
        model = openai_model(server.base_url())
        agent = Agent(model, [slow_step])
        try:
            kinds: tuple[Kind, ...] = ("stream", "tool", "guidance")
            for kind in kinds:
                for _ in range(WARMUP):
                    await one_trial(agent, server, kind)
                results[kind] = [await one_trial(agent, server, kind) for _ in range(trials)]
        finally:
            await model.aclose()
    rows: list[Row] = []
    ends: tuple[tuple[Kind, str, str], ...] = (
        ("stream", "Stop, stream end", "final"),
        ("tool", "Stop, ToolFinished", "final"),
        ("guidance", "guidance, ToolFinished", "guided"),
    )
    for kind, ended_by, turn in ends:
        done = results[kind]
        rows += [
            Row(
                f"{ended_by} → {turn} request at llmock",
                [t.sent_ms for t in done],
                "ms",
                10.0,
                target_id="stop_final_turn",
            ),
            Row(f"{ended_by} → {turn} TurnStarted", [t.in_process_ms for t in done], "ms"),
        ]
    wrong = sum(not t.as_specified for trial_list in results.values() for t in trial_list)
    print_table(
        "stop_final_turn: Stop or guidance → next request sent, once the current step ends",
        rows,
        [
            f"trials not ending as specified (2 requests; after Stop the final offers only "
            f"final_report, EXIT-USER-STOP; after guidance it is a user message): {wrong}",
            f"step = a model stream stalled {STEP_S * 1000:g} ms mid-answer, or a "
            f"{STEP_S * 1000:g} ms tool; Stop requested during it; {WARMUP} warm-up trials "
            "per kind not counted",
            "llmock runs in a thread of this process (shares the GIL); started_at is taken "
            "when its ASGI middleware first sees the request",
            machine_line(),
            revision_line(),
        ],
    )
    return all(r.verdict != "MISS" for r in rows) and wrong == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "stop_final_turn")
    p.add_argument("--trials", type=int, default=500, help="trials per kind of step")
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials))


if __name__ == "__main__":
    main()
