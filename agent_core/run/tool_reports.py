"""What a run says of its tool calls as they start, progress and finish: its events (the
Slack surface and the terminal hear them), its log, its trace's ``execute_tool`` spans, and
its tally's current activity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core.values.events import ToolFinished, ToolProgress, ToolStarted

if TYPE_CHECKING:
    from agent_core.process.tracing import RunTrace
    from agent_core.run.tally import RunTally
    from agent_core.tools.toolbox import ToolOutcome
    from agent_core.values.chat import ToolCall
    from agent_core.values.events import EventHub

__all__ = ["ToolReports"]


class ToolReports:
    """The callbacks a run's tool batch reports through
    (:func:`agent_core.tools.toolbox.gather_tools`)."""

    def __init__(
        self, run_id: str, *, tally: RunTally, events: EventHub, trace: RunTrace, log: Any
    ) -> None:
        self._run_id = run_id
        self._tally = tally
        self._events = events
        self._trace = trace
        self._log = log

    def started(self, call: ToolCall) -> None:
        # In the call's own task: a sub-agent it starts puts its trace under this span.
        self._trace.tool_started(call)
        self._tally.activity = f"running the tool {call.name}"
        self._log.info("tool.started", tool=call.name, call_id=call.id)
        self._events.emit(ToolStarted(self._run_id, call.id, call.name, call.arguments))

    def progress(
        self, call: ToolCall, progress: float, total: float | None, message: str | None
    ) -> None:
        self._events.emit(ToolProgress(self._run_id, call.id, call.name, progress, total, message))

    def done(self, outcome: ToolOutcome) -> None:
        call = outcome.call
        self._trace.tool_ended(call, outcome.ok)
        self._tally.tool_finished(call.name, ok=outcome.ok)
        self._log.info("tool.finished", tool=call.name, call_id=call.id, ok=outcome.ok)
        self._events.emit(
            ToolFinished(self._run_id, call.id, call.name, outcome.ok, outcome.output)
        )
