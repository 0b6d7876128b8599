"""The span of a wait for a person's decision on a held call (``threadpilot.approval``),
under the span of its call: the approval gate opens it around the wait, in the call's own
task, so a cancelled wait still ends it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.process.tracing.setup import state
from agent_core.process.tracing.shapes import fail
from agent_core.process.tracing.spans import tool_span

if TYPE_CHECKING:
    from types import TracebackType

    from opentelemetry.trace import Span

    from agent_core.values.approvals import ApprovalDecision, ApprovalRequest

__all__ = ["ApprovalSpan", "approval_wait"]


class ApprovalSpan:
    """The wait for a person's decision on one call; the no-op one is :data:`_NO_WAIT`.
    Used as ``with`` around the wait, in the call's own task."""

    def decided(self, decision: ApprovalDecision) -> None:
        """The wait ended with ``decision``."""

    def __enter__(self) -> ApprovalSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NO_WAIT = ApprovalSpan()


def approval_wait(request: ApprovalRequest) -> ApprovalSpan:
    """The span of the wait for ``request``, under the span of its call (the call running
    in this task); the no-op one when the call is not traced."""
    tool = tool_span.get()
    tracer = state.tracer
    if tool is None or tracer is None:
        return _NO_WAIT
    from opentelemetry import trace

    span = tracer.start_span(
        "threadpilot.approval",
        context=trace.set_span_in_context(tool),
        attributes={
            "gen_ai.tool.name": request.tool,
            "gen_ai.tool.call.id": request.call_id,
            "threadpilot.approval.id": request.id,
        },
    )
    return _OpenWait(span)


class _OpenWait(ApprovalSpan):
    def __init__(self, span: Span) -> None:
        self._span = span

    def decided(self, decision: ApprovalDecision) -> None:
        self._span.set_attribute("threadpilot.approval.decision", decision.status.value)
        if decision.decided_by:
            self._span.set_attribute("threadpilot.approval.decided_by", decision.decided_by)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            fail(self._span, type(error).__name__, str(error))
        elif error is not None:
            self._span.set_attribute("threadpilot.cancelled", True)
        self._span.end()
