"""Continuing a run whose context filled up: one summary request, then a new run from it.

When a run ends ``context_exhausted`` (the model refused the prompt as too long, or the
context guard forced the final turn), its checkpointed conversation is summarised by
:class:`Compaction`, and :func:`continue_from` starts a new run in the same thread whose
history is that summary, linked to the old run (``RunResult.continued_from``).

:class:`Compaction` is a run-like task, not a :class:`~agent_core.run.loop.Run`: it makes
exactly one model request (no tools, no retries: a failure is a value, and the caller's
resume policy decides whether to try again) and has its own
:class:`~agent_core.values.stop.RunControl`, so the stop service reaches it like any run. Every
request ends it at once, a Stop included: there is no step boundary inside a single
request and no final turn to take, and the previous run's handoff already stands. The
cancellation closes the model's HTTP stream like an Abort does in a run.

The summary request has to fit the very window that overflowed, so the conversation is
rendered as a transcript within a budget: the request itself is kept whole, every other
message is cut to a few hundred words, and when that is still too long the oldest
messages after the request are left out (the newest, with the latest state, stay). The
window to budget for: ``AgentConfig.context_window`` when set, else what the overflow
error names (:func:`window_from_error` on ``RunResult.error``), else
:data:`DEFAULT_SUMMARY_WINDOW`.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agent_core.values.chat import ModelRequest
from agent_core.values.errors import ModelError
from agent_core.values.prompts import SUMMARY_INSTRUCTION, continuation_note
from agent_core.values.stop import RunControl, StopReason, StopSource

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core.ports import ChatModel, TextSink
    from agent_core.run.agent import Agent
    from agent_core.run.loop import Run
    from agent_core.values.budget import Spent
    from agent_core.values.chat import ChatMessage, Usage
    from agent_core.values.records import ThreadKey
    from agent_core.values.stop import StopRequest

__all__ = [
    "DEFAULT_SUMMARY_WINDOW",
    "Compacted",
    "Compaction",
    "CompactionFailed",
    "CompactionOutcome",
    "CompactionStopped",
    "continuation_history",
    "continue_from",
    "transcript",
    "window_from_error",
]

log = structlog.get_logger("agent_core.run.compaction")

DEFAULT_SUMMARY_WINDOW = 8_000
"""Tokens assumed when neither the config nor the overflow error names the window."""
_REQUEST_SHARE = 0.6
"""The share of the window the summary request may use; the rest is for the answer."""
_CHARS_PER_TOKEN = 3
"""Conservative: English prose is about 4 characters a token, code and JSON fewer."""
_TASK_CHARS = 4_000
_MESSAGE_CHARS = 1_500
_ARGUMENT_CHARS = 300


@dataclass(frozen=True, slots=True)
class Compacted:
    """The summary, ready for :func:`continue_from`."""

    summary: str
    usage: Usage
    left_out: int
    """Messages of the old conversation that did not fit the summary request."""


@dataclass(frozen=True, slots=True)
class CompactionStopped:
    """A person (or a shutdown) ended the summarisation: no continuation starts."""

    request: StopRequest


@dataclass(frozen=True, slots=True)
class CompactionFailed:
    """The one summary request failed; the error says why."""

    error: ModelError


CompactionOutcome = Compacted | CompactionStopped | CompactionFailed


class Compaction:
    """One stoppable summarisation of ``messages`` (see the module). Call :meth:`run` once.

    ``compaction_id``: how the stop service addresses it (the Slack side uses the id the
    continuation run will have, so a Stop in the thread reaches whichever is live).
    ``context_window``: the model's window in tokens (:func:`window_from_error` reads it
    from the overflow error when the config does not say). ``on_text``: receives the
    summary as it streams (a progress sign; the summary is only usable whole).
    """

    def __init__(
        self,
        model: ChatModel,
        messages: Sequence[ChatMessage],
        *,
        compaction_id: str,
        context_window: int = DEFAULT_SUMMARY_WINDOW,
        on_text: TextSink | None = None,
    ) -> None:
        self.id = compaction_id
        self.control = RunControl(compaction_id)
        self._model = model
        self._on_text = on_text or _ignore
        self._messages = tuple(messages)
        budget = int(context_window * _REQUEST_SHARE) * _CHARS_PER_TOKEN
        self._budget_chars = max(1_000, budget - len(SUMMARY_INSTRUCTION))
        self._started = False
        self.control.add_listener(self._on_request)

    def request_stop(
        self, reason: StopReason, requested_by: str, *, source: StopSource = StopSource.LOCAL
    ) -> bool:
        """End the summarisation (any reason ends it at once); see :class:`RunControl`."""
        return self.control.request_stop(reason, requested_by, source=source)

    async def run(self) -> CompactionOutcome:
        if self._started:
            raise RuntimeError(f"compaction {self.id} was already started")
        self._started = True
        if self._requested():  # stopped before it began: the model is not called
            return self._stopped()
        summarising = self.control.start(self._summarise(), name=f"compaction:{self.id}")
        try:
            return await summarising
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if (task is not None and task.cancelling() > 0) or not self._requested():
                raise  # cancelled from outside (the awaited task went with it): propagate
            return self._stopped()

    def _requested(self) -> bool:
        # A method, not the property: a request can arrive across the await above.
        return self.control.stop_requested

    def _stopped(self) -> CompactionStopped:
        request = self.control.request
        assert request is not None
        self.control.mark_honoured()
        log.info("compaction.stopped", id=self.id, reason=request.reason.value)
        return CompactionStopped(request)

    async def _summarise(self) -> CompactionOutcome:
        text, left_out = transcript(self._messages, self._budget_chars)
        request = ModelRequest(
            [
                {"role": "system", "content": SUMMARY_INSTRUCTION},
                {"role": "user", "content": text},
            ]
        )
        log.info("compaction.started", id=self.id, chars=len(text), left_out=left_out)
        try:
            response = await self._model.complete(request, self._on_text)
        except ModelError as exc:
            log.warning("compaction.failed", id=self.id, error=str(exc))
            return CompactionFailed(exc)
        summary = response.text.strip()
        if not summary:
            return CompactionFailed(ModelError("the model answered the summary request empty"))
        log.info("compaction.finished", id=self.id, summary_chars=len(summary))
        return Compacted(summary, response.usage, left_out)

    def _on_request(self, request: StopRequest) -> None:
        # Stop does not cancel a run's task (it waits for the step boundary); here the
        # one request is the whole job, so every request cancels it (a cancelling one,
        # the control cancels itself).
        if not request.reason.cancels:
            self.control.cancel_for(request)


def _ignore(_text: str) -> None:
    """By default the summary is not streamed anywhere: it is only useful whole."""


def continuation_history(summary: str, previous_run_id: str) -> list[ChatMessage]:
    """The history a continuation run starts from: a note, then the summary as the agent's
    own account of its work (it was written by the model, from user text: never system)."""
    return [
        {"role": "system", "content": continuation_note(previous_run_id)},
        {"role": "assistant", "content": summary},
    ]


def continue_from(
    agent: Agent,
    compacted: Compacted,
    *,
    task: str,
    previous_run_id: str,
    run_id: str | None = None,
    requester: str = "local",
    thread: ThreadKey | None = None,
    spent: Spent | None = None,
    trace_links: Sequence[str] = (),
) -> Run:
    """A new run that continues ``previous_run_id`` from its summary; ``task`` is the
    original request (repeated after the summary, and what the run record shows).
    ``spent``: what the request had spent so far (the same request: its budget goes on,
    the summary's own request counted in). ``trace_links``: the previous run's trace,
    which this run's (a new one) links to."""
    if spent is not None:
        spent = spent.with_usage(compacted.usage, agent.config.budget.prices)
    return agent.new_run(
        task,
        run_id=run_id,
        requester=requester,
        thread=thread,
        history=continuation_history(compacted.summary, previous_run_id),
        continued_from=previous_run_id,
        spent=spent,
        trace_links=trace_links,
    )


_WINDOW = re.compile(r"maximum context length is (\d+)|(\d+) (?:tokens )?maximum", re.IGNORECASE)


def window_from_error(text: str | None) -> int | None:
    """The context window an overflow error names ("maximum context length is 8192
    tokens", "... > 200000 maximum"), if it names one."""
    match = _WINDOW.search(text or "")
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


# -- the transcript -------------------------------------------------------------------


def transcript(messages: Sequence[ChatMessage], budget_chars: int) -> tuple[str, int]:
    """The conversation as plain text within about ``budget_chars``, and how many messages
    were left out. System messages (the loop's own instructions) are not part of it.

    Pinned, and cut less: every message up to the first person's message (the request,
    and in a continuation the summary before it). Then as many of the newest messages as
    fit, each cut to :data:`_MESSAGE_CHARS`; older ones are left out, and counted.
    """
    names = _tool_names(messages)
    talk = [m for m in messages if m.get("role") != "system"]
    first_user = next((i for i, m in enumerate(talk) if m.get("role") == "user"), 0)
    pinned_limit = min(_TASK_CHARS, budget_chars // 2)
    pinned = [e for m in talk[: first_user + 1] if (e := _entry(m, names, pinned_limit))]
    rest = [e for m in talk[first_user + 1 :] if (e := _entry(m, names, _MESSAGE_CHARS))]
    kept: list[str] = []
    used = sum(len(e) + 2 for e in pinned)
    for entry in reversed(rest):  # newest first: the latest state matters most
        if used + len(entry) + 2 > budget_chars:
            break
        kept.append(entry)
        used += len(entry) + 2
    left_out = len(rest) - len(kept)
    gap = [f"[... {left_out} earlier messages left out ...]"] if left_out else []
    return "\n\n".join([*pinned, *gap, *reversed(kept)]), left_out


def _entry(message: ChatMessage, names: dict[str, str], limit: int) -> str:
    role = message.get("role")
    text = _text(message.get("content"))
    if role == "user":
        return f"Person: {_cut(text, limit)}"
    if role == "tool":
        name = names.get(str(message.get("tool_call_id")), "a tool")
        return f"Result of {name}: {_cut(text, limit)}"
    calls = [
        f"Agent called {c['function']['name']}({_cut(c['function']['arguments'], _ARGUMENT_CHARS)})"
        for c in message.get("tool_calls") or ()
    ]
    said = [f"Agent: {_cut(text, limit)}"] if text.strip() else []
    return "\n".join([*said, *calls])


def _tool_names(messages: Sequence[ChatMessage]) -> dict[str, str]:
    return {
        str(c["id"]): str(c["function"]["name"])
        for m in messages
        for c in m.get("tool_calls") or ()
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} characters cut]"
