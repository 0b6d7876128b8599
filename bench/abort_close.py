"""Abort requested in-process → upstream LLM connection closed: p99 < 5 ms, every
``MODEL_API`` (bench/README.md).

Each trial runs the real loop with the real adapter of one model API against llmock
(Chat Completions, Responses, Anthropic's Messages API; each API in turn, in one run):
the answer streams its first piece of text and then stalls for 30 s. Once the first text
delta reaches the run, the benchmark takes ``t0`` and calls ``run.request_stop(ABORT)``.
Measured, per API:

- server close: llmock's ``ended_at`` for the request (the server saw the connection
  go) - t0. This is the figure judged against the target;
- client close: when this process closed the socket (``bench/_probes.py``) - t0;
- reported: the moment the run emitted ``RunFinished`` - t0, and when ``await run.run()``
  returned to the benchmark - t0;
- order: the run must report its end only *after* the close. Checked twice:
  the socket close against ``RunFinished`` (what the process can promise; judged), and
  llmock's ``ended_at`` against the return of ``run.run()`` (reported, not judged: it
  also includes how late the server thread wakes up to notice a close that has already
  happened, which no client can control).

Usage: ``.venv/bin/python -m bench.abort_close [--trials N] [--api API]``
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core import Agent, ExitCode, ModelAPI, RunFinished, StopReason, TextDelta
from bench._llmock import ProcessUpstream, ThreadUpstream, api_model, llmock_server, stall_point
from bench._probes import SocketCloseProbe
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line

if TYPE_CHECKING:
    from agent_core import RunEvent

STALL_S = 30.0
WARMUP = 20


@dataclass(frozen=True)
class Trial:
    server_close_ms: float
    client_close_ms: float
    finished_ms: float
    returned_ms: float
    socket_closed_before_finished: bool
    server_saw_close_before_return: bool
    aborted: bool
    stream_cut: bool
    """The server saw the stream end early (not completed) and before the stall was over."""


async def one_trial(
    agent: Agent, upstream: ThreadUpstream | ProcessUpstream, probe: SocketCloseProbe
) -> Trial:
    upstream.script()
    run = agent.new_run("write a long answer")
    first_text = asyncio.Event()
    finished_at: list[float] = []

    def on_event(event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            first_text.set()
        elif isinstance(event, RunFinished):
            finished_at.append(time.monotonic())

    run.events.add_listener(on_event)
    task = asyncio.create_task(run.run(), name="bench-run")
    async with asyncio.timeout(10):
        await first_text.wait()
    probe.closed_at.clear()
    t0 = time.monotonic()
    run.request_stop(StopReason.ABORT, "bench")
    result = await task
    returned = time.monotonic()
    record = await upstream.ended()
    assert record is not None, "llmock never saw the aborted request end"
    (finished,) = finished_at
    # No close seen at all counts as "closed never", i.e. after everything.
    client_close = probe.closed_at[0] if probe.closed_at else float("inf")
    return Trial(
        server_close_ms=(record.ended_at - t0) * 1000,
        client_close_ms=(client_close - t0) * 1000,
        finished_ms=(finished - t0) * 1000,
        returned_ms=(returned - t0) * 1000,
        socket_closed_before_finished=client_close <= finished,
        server_saw_close_before_return=record.ended_at <= returned,
        aborted=result.exit_code is ExitCode.USER_ABORT,
        stream_cut=not record.completed and record.duration < STALL_S,
    )


async def measure(trials: int, apis: list[ModelAPI]) -> bool:
    passed = True
    for api in apis:
        passed = await measure_api(api, trials) and passed
    return passed


async def measure_api(api: ModelAPI, trials: int) -> bool:
    with llmock_server() as server, SocketCloseProbe(server.port) as probe:
        model = api_model(api, server.base_url())
        agent = Agent(model)
        upstream = ThreadUpstream(server, STALL_S, stall_point(api))
        try:
            for _ in range(WARMUP):
                await one_trial(agent, upstream, probe)
            results = [await one_trial(agent, upstream, probe) for _ in range(trials)]
        finally:
            await model.aclose()
    client_order = sum(not t.socket_closed_before_finished for t in results)
    server_order = sum(not t.server_saw_close_before_return for t in results)
    wrong = sum(not (t.aborted and t.stream_cut) for t in results)
    rows = [
        Row(
            f"abort → llmock saw close (ended_at), MODEL_API={api.value}",
            [t.server_close_ms for t in results],
            "ms",
            5.0,
            target_id="abort_close",
        ),
        Row("abort → client socket closed", [t.client_close_ms for t in results], "ms"),
        Row("abort → RunFinished emitted", [t.finished_ms for t in results], "ms"),
        Row("abort → run.run() returned", [t.returned_ms for t in results], "ms"),
    ]
    print_table(
        f"abort_close: Abort requested in-process → upstream LLM connection closed "
        f"(MODEL_API={api.value})",
        rows,
        [
            f"order (client): socket closed before RunFinished in "
            f"{trials - client_order}/{trials} trials ({client_order} violation(s))",
            f"order (server view, not judged): llmock ended_at ≤ run.run() returned in "
            f"{trials - server_order}/{trials} trials (it includes the llmock thread's own "
            "wake-up after the client closed)",
            f"trials not ending as an abort with the stream cut short: {wrong}",
            f"{WARMUP} warm-up trials not counted; the real {type(model).__name__} (aiohttp) → "
            "llmock over loopback; llmock runs in a thread of this process (shares the GIL)",
            machine_line(),
            revision_line(),
        ],
    )
    return all(r.verdict != "MISS" for r in rows) and client_order == 0 and wrong == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "abort_close")
    p.add_argument("--trials", type=int, default=1000, help="trials per model API")
    p.add_argument(
        "--api", choices=[a.value for a in ModelAPI], help="only this model API (default: all)"
    )
    args = p.parse_args()
    apis = [ModelAPI(args.api)] if args.api else list(ModelAPI)
    bench_main(args, lambda: measure(args.trials, apis))


if __name__ == "__main__":
    main()
