"""What ``GET /metrics`` shows: this process's series, in Prometheus text format.

One :class:`Metrics` per app, with a registry of its own (not the library's global one),
so tests and several apps in one process do not share counters. It is built with the app
and handed to what records into it, and most of it listens to what exists anyway:

- each run's events (:meth:`Metrics.watch_run`, called by the supervisor as it launches a
  run): ``TurnStarted`` and ``Retrying`` are model requests (labelled by ``MODEL_API``),
  ``TurnFinished`` the tokens of a reply (by kind: prompt, completion, and the cached
  and reasoning parts of them where the endpoint says) and, when
  ``MODEL_PRICE_INPUT``/``_OUTPUT`` are set, what they cost in USD, ``Retrying`` is a
  model retry, ``ToolStarted`` of an MCP tool is an MCP call, ``RunFinished`` counts
  the ending by ``outcome`` and ``ended_because``; sub-agents' events are followed too;
- the stop service, once per ask it decided (:meth:`Metrics.stop_asked`);
- the run queue, its length on each tick (:meth:`Metrics.queue_counted`);
- the Slack budget, once per HTTP request it makes, and once per 429;
- the MCP servers' connections, once per call cancelled (Abort, shutdown, ``TOOL_TIMEOUT``);
- the transports, from a control's receipt to its ack (:meth:`Metrics.acked`).

The series are listed in docs/operations.md (Metrics).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agent_core import (
    ChildStarted,
    Retrying,
    RunFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from bot.views.home import ACTION_HOME_ABORT, ACTION_HOME_STOP, ACTION_STOP_ALL
from bot.views.status import ACTION_ABORT, ACTION_DONT_RESUME, ACTION_RESUME_NOW, ACTION_STOP

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agent_core import Prices, Run, RunEvent, StopReason, StopSource

__all__ = ["ACK_BUCKETS_S", "CONTENT_TYPE", "Metrics", "control_of"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

# No ``*_created`` series beside each counter and histogram: Prometheus does not need them
# in the text format, and they would double what every scrape carries. (The library's
# switch is process-wide; this app is the process.)
disable_created_metrics()  # type: ignore[no-untyped-call]

ACK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
"""Fine around the 100 ms target, up to Slack's 3 s limit and past it."""

_CONTROLS = {
    ACTION_STOP: "stop",
    ACTION_ABORT: "abort",
    ACTION_RESUME_NOW: "resume_now",
    ACTION_DONT_RESUME: "dont_resume",
    ACTION_HOME_STOP: "home_stop",
    ACTION_HOME_ABORT: "home_abort",
    ACTION_STOP_ALL: "stop_all",
}


def control_of(body: Mapping[str, Any]) -> str | None:
    """Which control a Slack request is, as the ``control`` label; None if it is none
    (a mention, a message: those are not timed)."""
    if body.get("type") == "block_actions":
        actions = body.get("actions")
        first = actions[0] if isinstance(actions, list) and actions else None
        action_id = first.get("action_id") if isinstance(first, dict) else None
        # Any other button is "other": the label's values stay a short, known list.
        return _CONTROLS.get(action_id, "other") if isinstance(action_id, str) else "other"
    if isinstance(body.get("command"), str):
        return "command"
    event = body.get("event")
    if isinstance(event, dict) and event.get("type") == "agent_session_stopped":
        return "native_stop"
    return None


class Metrics:
    """This process's series, and the hooks that record into them."""

    def __init__(self, model_api: str = "openai-chat", *, prices: Prices | None = None) -> None:
        self._api = model_api
        """The ``MODEL_API`` this process's model calls go to (the ``api`` label)."""
        self._prices = prices
        """``MODEL_PRICE_INPUT``/``_OUTPUT``: without them no cost is counted."""
        self.registry = CollectorRegistry()
        registry = self.registry
        self._run_series(registry)
        self._slack_series(registry)
        self._model_series(registry)
        self._tool_series(registry)
        self._mcp_servers: dict[str, str] = {}

    def _run_series(self, registry: CollectorRegistry) -> None:
        """Runs, the queue, the event loop, stop requests and click acks."""
        self.live_runs = Gauge(
            "threadpilot_live_runs",
            "Runs this process holds: running, or writing their ending.",
            registry=registry,
        )
        self.queued_runs = Gauge(
            "threadpilot_queued_runs",
            "Runs waiting in the durable queue for room under MAX_LIVE_RUNS on any worker "
            "(this process's view, read on its periodic tick).",
            registry=registry,
        )
        self.loop_lag = Gauge(
            "threadpilot_event_loop_lag_seconds",
            "How late this process's event loop runs a timer, smoothed; over "
            "BUSY_LOOP_LAG_MS the worker takes no new runs.",
            registry=registry,
        )
        self.runs_ended = Counter(
            "threadpilot_runs_ended",
            "Runs that ended in this process, by outcome and why they ended (a resumed "
            "run counts each time it ends).",
            ["outcome", "ended_because"],
            registry=registry,
        )
        self.stop_requests = Counter(
            "threadpilot_stop_requests",
            "Requests to end a run, by kind (stop, abort), where they came from, and what "
            "the stop service decided (not_recorded: the database did not take it).",
            ["kind", "source", "verdict"],
            registry=registry,
        )
        self.ack_seconds = Histogram(
            "threadpilot_click_ack_seconds",
            "From receipt of a control (Stop, Abort, Resume, App Home, /threadpilot, "
            "Slack's native stop) to its acknowledgement, in seconds.",
            ["control"],
            buckets=ACK_BUCKETS_S,
            registry=registry,
        )

    def _slack_series(self, registry: CollectorRegistry) -> None:
        """Slack Web API calls and rate limits."""
        self.slack_calls = Counter(
            "threadpilot_slack_api_calls",
            "Slack Web API requests sent, by workspace and method (each attempt counts).",
            ["team", "method"],
            registry=registry,
        )
        self.slack_rate_limited = Counter(
            "threadpilot_slack_api_rate_limited",
            "Slack Web API requests answered 429 (rate limited), by workspace and method.",
            ["team", "method"],
            registry=registry,
        )

    def _model_series(self, registry: CollectorRegistry) -> None:
        """Model requests, retries, tokens and cost."""
        self.model_retries = Counter(
            "threadpilot_model_retries",
            "Model requests retried after a failure or a rate limit.",
            registry=registry,
        )
        self.model_requests = Counter(
            "threadpilot_model_requests",
            "Model requests sent (each retry counts), by model API (MODEL_API).",
            ["api"],
            registry=registry,
        )
        self.model_tokens = Counter(
            "threadpilot_model_tokens",
            "Tokens of the model's replies, by model API and kind: prompt, completion, and "
            "the parts of those the endpoint reports, cached (of prompt, read from its "
            "prompt cache) and reasoning (of completion); do not add the kinds up.",
            ["api", "kind"],
            registry=registry,
        )
        self.model_cost = Counter(
            "threadpilot_model_cost_usd",
            "What the model's replies cost in USD, by model API, at MODEL_PRICE_INPUT and "
            "MODEL_PRICE_OUTPUT (nothing is counted while they are not set).",
            ["api"],
            registry=registry,
        )

    def _tool_series(self, registry: CollectorRegistry) -> None:
        """MCP calls, their cancellations, and approvals."""
        self.mcp_calls = Counter(
            "threadpilot_mcp_calls",
            "MCP tool calls started, by server.",
            ["server"],
            registry=registry,
        )
        self.mcp_cancellations = Counter(
            "threadpilot_mcp_cancellations",
            "MCP tool calls cancelled before they answered (Abort, shutdown, "
            "TOOL_TIMEOUT), by server.",
            ["server"],
            registry=registry,
        )
        self.approvals = Counter(
            "threadpilot_approvals",
            "Tool calls held for approval, by how they ended (approved, denied, expired, "
            "cancelled).",
            ["result"],
            registry=registry,
        )
        self.approval_wait_seconds = Histogram(
            "threadpilot_approval_wait_seconds",
            "From a tool call held for approval to its decision, by result.",
            ["result"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200),
            registry=registry,
        )

    def render(self) -> bytes:
        """The exposition text ``GET /metrics`` answers with."""
        return generate_latest(self.registry)

    # -- wiring ------------------------------------------------------------------------

    def count_live_runs(self, count: Callable[[], int]) -> None:
        """Read the live runs from ``count`` at each scrape (the supervisor's own count)."""
        self.live_runs.set_function(lambda: float(count()))

    def mcp_tools(self, servers: Mapping[str, str]) -> None:
        """The MCP tools' names, each with its server's name (once the servers started)."""
        self._mcp_servers = dict(servers)

    def watch_run(self, run: Run) -> None:
        """Count what ``run`` (and each of its sub-agents) does, from its events."""
        run.events.add_listener(lambda event: self._on_event(run, event))

    # -- hooks -------------------------------------------------------------------------

    def queue_counted(self, queued: int) -> None:
        """The durable queue holds ``queued`` runs (counted on the worker's tick)."""
        self.queued_runs.set(queued)

    def stop_asked(self, kind: StopReason, source: StopSource, verdict: str | None) -> None:
        """A request to end a run was decided: ``verdict`` is the policy's (None: it could
        not be recorded)."""
        self.stop_requests.labels(
            kind=kind.value, source=source.value, verdict=verdict or "not_recorded"
        ).inc()

    def acked(self, body: Mapping[str, Any], received: float) -> None:
        """A request received at ``received`` (``time.perf_counter()``) was just
        acknowledged; timed if it is a control."""
        control = control_of(body)
        if control is not None:
            self.ack_seconds.labels(control=control).observe(time.perf_counter() - received)

    def slack_call(self, team: str, method: str) -> None:
        self.slack_calls.labels(team=team, method=method).inc()

    def slack_429(self, team: str, method: str) -> None:
        self.slack_rate_limited.labels(team=team, method=method).inc()

    def mcp_cancelled(self, server: str) -> None:
        self.mcp_cancellations.labels(server=server).inc()

    def approval_decided(self, status: str, waited_s: float) -> None:
        """A held call's approval was decided (by a person, the timeout or a Stop)."""
        self.approvals.labels(result=status).inc()
        self.approval_wait_seconds.labels(result=status).observe(waited_s)

    def _on_event(self, run: Run, event: RunEvent) -> None:
        match event:
            case TurnStarted():
                self.model_requests.labels(api=self._api).inc()
            case TurnFinished(reply=reply) if reply is not None:
                kinds = {
                    "prompt": reply.prompt_tokens,
                    "completion": reply.completion_tokens,
                    "cached": reply.cached_tokens,
                    "reasoning": reply.reasoning_tokens,
                }
                for kind, tokens in kinds.items():
                    self.model_tokens.labels(api=self._api, kind=kind).inc(tokens)
                if self._prices is not None:
                    cost = self._prices.cost(reply.prompt_tokens, reply.completion_tokens)
                    self.model_cost.labels(api=self._api).inc(cost)
            case Retrying():
                self.model_retries.inc()
                self.model_requests.labels(api=self._api).inc()
            case ToolStarted(name=name) if name in self._mcp_servers:
                self.mcp_calls.labels(server=self._mcp_servers[name]).inc()
            case ChildStarted(child_id=child_id):
                # A sub-agent's events go to its own hub: its retries and MCP calls count.
                for child in run.children:
                    if child.id == child_id:
                        self.watch_run(child)
            case RunFinished(result=result) if run.depth == 0:  # a sub-agent's is not a run's
                self.runs_ended.labels(
                    outcome=result.outcome.value, ended_because=result.ended_because.value
                ).inc()
