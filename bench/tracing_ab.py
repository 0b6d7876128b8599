"""Tracing on (OTLP to a live receiver) vs off, in one run: CPU per streamed chunk within
+2 %, Abort → close and Stop → final-turn request p99 unchanged, ≤ 50 µs CPU per turn.

"On" is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` turns on (agent_core/process/tracing/):
the SDK's batch processor and the OTLP/HTTP exporter, sending to a receiver in a process
of its own (``bench._otlp_serve``, decoding every request with ``opentelemetry-proto``),
so its decoding is not counted here. "Off" is no endpoint: every run gets the no-op
trace. The two alternate, round by round or trial by trial, in one process, so the
machine's load weighs on both alike. Four measures:

- CPU per streamed chunk: ``--streams`` runs at once, each one model answer of
  ``--words`` chunks from llmock in a process of its own (the real ``OpenAIChatModel``),
  this process's CPU time (every thread: the exporter's included, flushed inside the
  round) divided by the chunks. Judged: on / off - 1 < 2 %.
- CPU per turn: runs of ``--turns`` turns each (a tool call per turn, then an answer)
  with the scripted model, no network at all: (CPU on - CPU off) / turns, the spans'
  whole cost (a chat and a tool span per turn, exported). Judged: < 50 µs.
- Abort → close: ``bench.abort_close``'s trial (llmock in a thread, the stream stalls after
  its first text, Abort on the first text delta), on and off alternating. Judged: the
  p99 with tracing on is at most 10 % (and 0.2 ms) above the p99 with it off.
- Stop → final-turn request: ``bench.stop_final_turn``'s stream trial, the same way.

Usage: ``.venv/bin/python -m bench.tracing_ab [--rounds N] [--trials N]``
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agent_core import Agent, ModelAPI
from agent_core.process import tracing
from agent_core.testing import ScriptedChatModel, ScriptedTurn
from agent_core.tools.toolbox import tool
from bench import abort_close, stop_final_turn
from bench._llmock import (
    ThreadUpstream,
    api_model,
    llmock_server,
    openai_model,
    paced_llmock,
    serving_process,
    stall_point,
)
from bench._probes import SocketCloseProbe
from bench._setup import bench_main, parser
from bench._stats import Figure, machine_line, percentile, print_figures, revision_line

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from opentelemetry.sdk.trace import ReadableSpan

CHUNK_TARGET_PCT = 2.0
TURN_TARGET_US = 50.0
P99_SLACK = (0.10, 0.2)
"""How far the p99 with tracing on may sit above the p99 with it off and still count as
unchanged: 10 % of it, and at least 0.2 ms (one scheduler tick on a shared machine)."""


@tool
async def lookup(city: str) -> str:
    """Look up the weather."""
    return f"21C in {city}"


class Switch:
    """Tracing on (a provider exporting to the receiver) or off, between trials.

    The batch processor's timer is off and its queue holds every span: the spans of the
    traced rounds are exported when a batch fills (during a traced round) or by the
    flush at the end of a phase, whose CPU is charged to "on". Nothing of tracing's is
    ever done during an untraced round."""

    def __init__(self, url: str | None) -> None:
        self.provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: "threadpilot-bench"}), shutdown_on_exit=False
        )
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces") if url else _Nowhere()
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=1_000_000, schedule_delay_millis=3.6e6)
        )

    def set(self, on: bool) -> None:
        if on:
            tracing.use_tracer_provider(self.provider)
        else:
            tracing.reset_tracing()


class _Nowhere(SpanExporter):
    """An exporter that sends nothing: what the SDK's spans cost without the OTLP export."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def alternating(
    switch: Switch, rounds: int, work: Callable[[], Awaitable[int]]
) -> tuple[float, float]:
    """CPU µs per unit of ``work`` (it returns its count), untraced and traced, over
    ``rounds`` rounds each way, alternating after one warm-up; the closing flush is
    charged to the traced rounds."""
    await work()
    cpu = {False: 0.0, True: 0.0}
    units = {False: 0, True: 0}
    for index in range(rounds * 2):
        on = index % 2 == 1
        switch.set(on)
        started = time.process_time()
        units[on] += await work()
        cpu[on] += time.process_time() - started
    switch.set(True)  # the flush is the traced rounds' own
    started = time.process_time()
    assert await tracing.flush_traces(30.0), "the spans were not all taken"
    cpu[True] += time.process_time() - started
    switch.set(False)
    return cpu[False] / units[False] * 1e6, cpu[True] / units[True] * 1e6


async def chunk_cpu(switch: Switch, rounds: int, streams: int, words: int) -> tuple[float, float]:
    """CPU µs per streamed chunk, off and on."""
    async with paced_llmock("process", chunk_ms=2, words=words) as base_url:
        model = api_model(ModelAPI.OPENAI_CHAT, base_url)
        agent = Agent(model)

        async def one_round() -> int:
            runs = [agent.new_run("write it all") for _ in range(streams)]
            await asyncio.gather(*(r.run() for r in runs))
            return streams * words

        try:
            return await alternating(switch, rounds, one_round)
        finally:
            await model.aclose()


async def turn_cpu(switch: Switch, rounds: int, runs: int, turns: int) -> tuple[float, float]:
    """CPU µs per turn, off and on (scripted model: the loop and the spans only)."""

    async def one_round() -> int:
        for _ in range(runs):
            model = ScriptedChatModel()
            for index in range(turns - 1):
                model.add(ScriptedTurn(tool_calls=(("lookup", {"city": f"c{index}"}),)))
            model.add(ScriptedTurn("Done."))
            await Agent(model, [lookup]).new_run("weather").run()
        return runs * turns

    return await alternating(switch, rounds, one_round)


async def abort_p99(switch: Switch, trials: int) -> tuple[float, float]:
    api = ModelAPI.OPENAI_CHAT
    samples: dict[bool, list[float]] = {False: [], True: []}
    with llmock_server() as server, SocketCloseProbe(server.port) as probe:
        model = api_model(api, server.base_url())
        agent = Agent(model)
        upstream = ThreadUpstream(server, abort_close.STALL_S, stall_point(api))
        try:
            for index in range(abort_close.WARMUP + trials * 2):
                on = index % 2 == 1
                switch.set(on)
                trial = await abort_close.one_trial(agent, upstream, probe)
                if index >= abort_close.WARMUP:
                    samples[on].append(trial.server_close_ms)
        finally:
            switch.set(False)
            await model.aclose()
    return percentile(samples[False], 99), percentile(samples[True], 99)


async def stop_p99(switch: Switch, trials: int) -> tuple[float, float]:
    samples: dict[bool, list[float]] = {False: [], True: []}
    with llmock_server() as server:
        model = openai_model(server.base_url())
        agent = Agent(model, [stop_final_turn.slow_step])
        try:
            for index in range(stop_final_turn.WARMUP + trials * 2):
                on = index % 2 == 1
                switch.set(on)
                trial = await stop_final_turn.one_trial(agent, server, "stream")
                if index >= stop_final_turn.WARMUP:
                    samples[on].append(trial.sent_ms)
        finally:
            switch.set(False)
            await model.aclose()
    return percentile(samples[False], 99), percentile(samples[True], 99)


def p99_figure(what: str, off: float, on: float, trials: int) -> Figure:
    allowed = max(off * P99_SLACK[0], P99_SLACK[1])
    return Figure(
        f"{what}: p99 off {off:.3f} ms, on {on:.3f} ms; on - off",
        on - off,
        "ms",
        trials,
        limit=allowed,
        target_id="tracing",
        target_text=f"< {allowed:.2f} ms (unchanged)",
    )


async def measure(args: object) -> bool:
    rounds, trials = getattr(args, "rounds", 6), getattr(args, "trials", 300)
    streams, words = getattr(args, "streams", 10), getattr(args, "words", 400)
    async with serving_process("bench._otlp_serve") as url:
        switch, nowhere = Switch(url), Switch(None)
        try:
            chunk_off, chunk_on = await chunk_cpu(switch, rounds, streams, words)
            turn_off, turn_on = await turn_cpu(switch, rounds, runs=50, turns=8)
            sdk_off, sdk_on = await turn_cpu(nowhere, rounds, runs=50, turns=8)
            abort_off, abort_on = await abort_p99(switch, trials)
            stop_off, stop_on = await stop_p99(switch, trials)
        finally:
            await asyncio.to_thread(switch.provider.shutdown)
            await asyncio.to_thread(nowhere.provider.shutdown)
    chunk_pct = (chunk_on / chunk_off - 1) * 100
    figures = [
        Figure(
            f"CPU per streamed chunk: off {chunk_off:.2f} µs, on {chunk_on:.2f} µs; on / off - 1",
            chunk_pct,
            "%",
            rounds,
            limit=CHUNK_TARGET_PCT,
            target_id="tracing",
            target_text=f"< +{CHUNK_TARGET_PCT:g} %",
        ),
        Figure(
            f"CPU per turn added by tracing (off {turn_off:.1f} µs, on {turn_on:.1f} µs)",
            turn_on - turn_off,
            "µs",
            rounds,
            limit=TURN_TARGET_US,
            target_id="tracing",
        ),
        Figure(
            "of which the SDK's spans alone (an exporter that sends nothing)",
            sdk_on - sdk_off,
            "µs",
            rounds,
        ),
        p99_figure("Abort → close (llmock saw it)", abort_off, abort_on, trials),
        p99_figure("Stop → final-turn request at llmock", stop_off, stop_on, trials),
    ]
    print_figures(
        "tracing_ab: tracing on (OTLP/HTTP to a live receiver) vs off, alternating",
        figures,
        [
            f"chunks: {streams} runs at once x {words} chunks, 2 ms apart, llmock in a "
            f"process; {rounds} rounds each way, alternating, one warm-up round",
            f"turns: {rounds} rounds each way of 50 runs x 8 turns (7 tool calls, an answer), "
            "scripted model (a chat and a tool span per turn, a root per run)",
            "all of tracing's CPU is charged to the traced rounds: the batch processor's "
            "timer is off, batches fill during traced rounds, the closing flush counts as "
            "traced",
            f"Abort and Stop: {trials} trials each way, alternating, llmock in a thread",
            "the receiver runs in a process of its own (bench._otlp_serve)",
            machine_line(),
            revision_line(),
        ],
    )
    return all(f.verdict != "MISS" for f in figures)


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "tracing_ab")
    p.add_argument("--rounds", type=int, default=6, help="CPU rounds each way")
    p.add_argument("--trials", type=int, default=300, help="Abort and Stop trials each way")
    p.add_argument("--streams", type=int, default=10, help="runs streaming at once")
    p.add_argument("--words", type=int, default=400, help="chunks per answer")
    args = p.parse_args()
    bench_main(args, lambda: measure(args))


if __name__ == "__main__":
    main()
