"""Abort in-process → LLM connection closed, beside the OpenAI Agents SDK's immediate cancel.

Both sides stream the same llmock answer (two chunks, then a 30 s stall) through the chat
completions API over loopback, in this one process, on the same clock, in alternating
trials (ours, theirs, ours, ...). When the first text delta arrives, ``t0`` is taken
and the stop is requested:

- threadpilot: ``run.request_stop(StopReason.ABORT)`` on a run of the real loop with the
  real :class:`OpenAIChatModel` (the trial of ``bench/abort_close.py``);
- the Agents SDK (``openai-agents``, the ``agents`` module): ``Runner.run_streamed`` with
  an ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI(base_url=llmock)`` client, tracing
  off, then ``result.cancel(mode="immediate")`` from inside the ``stream_events()`` loop,
  which is then read to its end as the SDK's docs ask.

The judged figure on both sides is llmock's ``ended_at`` for the request (the server saw
the connection go) minus ``t0``. Ours passes when its p99 is at most the SDK's p99 and
under 5 ms. Also shown: when this process closed the socket, and when each side
reported its end (``RunFinished``; the end of ``stream_events()`` and the SDK's run task
being done). A peer trial whose request llmock saw run to the end of its stall counts as
"connection not closed".

Needs the bench extra: ``.venv/bin/pip install -e '.[dev,bench]'``.
Usage: ``.venv/bin/python -m bench.abort_peer [--trials N]``
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_core import Agent
from bench._llmock import ProcessUpstream, openai_model, paced_llmock
from bench._probes import SocketCloseProbe
from bench._setup import NOT_RUN, bench_main, parser
from bench._stats import Row, machine_line, percentile, print_table, revision_line
from bench.abort_close import STALL_S, one_trial

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType


WARMUP = 20
WORDS = 400
RATIO = 1.0
ABSOLUTE_MS = 5.0
INSTALL_HINT = (
    "abort_peer: not run: the OpenAI Agents SDK is not installed; "
    "install the bench extra with: .venv/bin/pip install -e '.[dev,bench]'"
)


@dataclass(frozen=True)
class PeerTrial:
    server_close_ms: float
    """inf when llmock never saw the request end before the stall was over."""
    client_close_ms: float
    stream_ended_ms: float
    task_done_ms: float
    closed: bool
    """llmock saw the stream end early (cut short, before the stall was over)."""
    closed_before_end_reported: bool
    """This process closed the socket before ``stream_events()`` ended."""


def load_peer() -> ModuleType | None:
    try:
        return importlib.import_module("agents")
    except ImportError:
        return None


class Peer:
    """The Agents SDK pointed at llmock through the chat completions API."""

    def __init__(self, sdk: ModuleType, base_url: str) -> None:
        import openai

        sdk.set_tracing_disabled(True)
        self.sdk = sdk
        # As ours: the SDK's own retries off, so a cut stream is never retried.
        self.client = openai.AsyncOpenAI(api_key="bench-key", base_url=base_url, max_retries=0)
        model = sdk.OpenAIChatCompletionsModel(model="bench-model", openai_client=self.client)
        self.agent = sdk.Agent(name="bench", instructions="Answer.", model=model)

    async def trial(self, upstream: ProcessUpstream, probe: SocketCloseProbe) -> PeerTrial:
        upstream.script()
        result: Any = self.sdk.Runner.run_streamed(self.agent, "write a long answer")
        t0 = 0.0
        async with asyncio.timeout(10):
            async for event in result.stream_events():
                if t0 == 0.0 and _is_text_delta(event):
                    probe.closed_at.clear()
                    t0 = time.monotonic()
                    result.cancel(mode="immediate")
            stream_ended = time.monotonic()
            task = result.run_loop_task
            if task is not None:
                await asyncio.wait([task])
        task_done = time.monotonic()
        if t0 == 0.0:
            raise RuntimeError("the Agents SDK run streamed no text before it ended")
        record = await upstream.ended(wait_s=2.0)
        closed = record is not None and not record.completed and record.duration < STALL_S
        client_close = probe.closed_at[0] if probe.closed_at else float("inf")
        return PeerTrial(
            server_close_ms=(record.ended_at - t0) * 1000 if closed and record else float("inf"),
            client_close_ms=(client_close - t0) * 1000,
            stream_ended_ms=(stream_ended - t0) * 1000,
            task_done_ms=(task_done - t0) * 1000,
            closed=closed,
            closed_before_end_reported=client_close <= stream_ended,
        )


def _is_text_delta(event: Any) -> bool:
    return bool(
        getattr(event, "type", None) == "raw_response_event"
        and getattr(event.data, "type", None) == "response.output_text.delta"
    )


def cpus_apart() -> tuple[set[int], set[int]] | None:
    """This process's CPUs and llmock's, none shared; None with a single CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    return (set(cpus[:-1]), {cpus[-1]}) if len(cpus) >= 2 else None


@contextmanager
def on_cpus(cpus: set[int] | None) -> Iterator[None]:
    """This process on ``cpus`` only, for the duration."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


async def measure(sdk: ModuleType, trials: int) -> bool:
    apart = cpus_apart()
    ours_cpus, llmock_cpus = apart if apart is not None else (None, None)
    with on_cpus(ours_cpus):
        return await _measure(sdk, trials, llmock_cpus, apart)


async def _measure(
    sdk: ModuleType,
    trials: int,
    llmock_cpus: set[int] | None,
    apart: tuple[set[int], set[int]] | None,
) -> bool:
    stalled = paced_llmock("process", chunk_ms=0, words=WORDS, stall_s=STALL_S, cpus=llmock_cpus)
    async with stalled as url:
        upstream = ProcessUpstream(url)
        async with upstream:
            with SocketCloseProbe(upstream.port) as probe:
                model = openai_model(url)
                agent = Agent(model)
                peer = Peer(sdk, url)
                try:
                    for _ in range(WARMUP):
                        await one_trial(agent, upstream, probe)
                        await peer.trial(upstream, probe)
                    ours = []
                    theirs = []
                    for _ in range(trials):
                        ours.append(await one_trial(agent, upstream, probe))
                        theirs.append(await peer.trial(upstream, probe))
                finally:
                    await model.aclose()
                    await peer.client.close()

    peer_p99 = percentile([t.server_close_ms for t in theirs], 99)
    limit = min(ABSOLUTE_MS, peer_p99 * RATIO)
    ours_p99 = percentile([t.server_close_ms for t in ours], 99)
    not_closed = sum(not t.closed for t in theirs)
    peer_order = sum(not t.closed_before_end_reported for t in theirs)
    our_order = sum(not t.socket_closed_before_finished for t in ours)
    wrong = sum(not (t.aborted and t.stream_cut) for t in ours)
    rows = [
        Row(
            "threadpilot abort → llmock saw close",
            [t.server_close_ms for t in ours],
            "ms",
            limit,
            target_id="abort_close",
            target_text=f"p99 ≤ SDK's, < {ABSOLUTE_MS:g} ms",
        ),
        Row("Agents SDK cancel → llmock saw close", [t.server_close_ms for t in theirs], "ms"),
        Row("threadpilot abort → client socket closed", [t.client_close_ms for t in ours], "ms"),
        Row("Agents SDK cancel → client socket closed", [t.client_close_ms for t in theirs], "ms"),
        Row("threadpilot abort → RunFinished emitted", [t.finished_ms for t in ours], "ms"),
        Row("Agents SDK cancel → stream_events() ended", [t.stream_ended_ms for t in theirs], "ms"),
        Row("Agents SDK cancel → run task done", [t.task_done_ms for t in theirs], "ms"),
    ]
    print_table(
        "abort_peer: Abort in-process → LLM connection closed, beside the Agents SDK's cancel",
        rows,
        [
            f"ratio of p99s (threadpilot / Agents SDK): {ours_p99 / peer_p99:.3f} "
            f"(PASS needs ≤ {RATIO:g}, and threadpilot's p99 < {ABSOLUTE_MS:g} ms)",
            f"Agents SDK trials whose upstream connection llmock did not see closed early: "
            f"{not_closed}/{trials}",
            f"order: threadpilot closed the socket before RunFinished in "
            f"{trials - our_order}/{trials}; the Agents SDK closed it before stream_events() "
            f"ended in {trials - peer_order}/{trials}",
            f"threadpilot trials not ending as an abort with the stream cut short: {wrong}",
            f"alternating trials, {WARMUP} warm-up pairs not counted; openai-agents "
            f"{_version('openai-agents')}, openai {_version('openai')}; llmock runs in a "
            "process of its own (its journal read over HTTP; its monotonic clock is this "
            "one's), so it notices a close when the FIN reaches it, not when this process "
            "next lets go of the GIL",
            (
                f"CPUs: this process on {sorted(apart[0])}, llmock on {sorted(apart[1])}, as "
                "a remote server shares no CPU with its client (on loopback the FIN wakes "
                "the server on the client's CPU, where it waits for whatever the client "
                "does next)"
                if apart is not None
                else "CPUs: one, shared by this process and llmock"
            ),
            machine_line(),
            revision_line(),
        ],
    )
    return rows[0].verdict == "PASS" and our_order == 0 and wrong == 0


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "abort_peer")
    p.add_argument("--trials", type=int, default=1000)
    args = p.parse_args()
    sdk = load_peer()
    if sdk is None:
        print(INSTALL_HINT)
        sys.exit(NOT_RUN)
    bench_main(args, lambda: measure(sdk, args.trials))


if __name__ == "__main__":
    main()
