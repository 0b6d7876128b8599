"""Tools: typed Python callables the model can call, with a JSON schema from the signature.

::

    @tool
    async def search(query: str, limit: int = 5) -> str:
        '''Search the wiki.'''

``Annotated[str, pydantic.Field(max_length=...)]`` parameters put their limits in the
schema, and arguments beyond them are refused before the tool runs.

A tool that raises gives the model an error result, never a crash; arguments that are
not one JSON object (:func:`~agent_core.tools.arguments.parse_arguments`: no repeated key,
no ``NaN``), or do not match the signature, are reported back to the model the same way,
before anyone is asked to approve the call and before the tool runs. Every call is
bounded by the toolbox's timeout (``TOOL_TIMEOUT``, default 120 s): after it the call is
cancelled and the model reads ``error: <tool> timed out after N s``. The one exception
is a tool that bounds itself (:attr:`Tool.bounded` false): ``delegate``, whose child run
has limits of its own. Cancellation is never caught here: an Abort cancels a running
tool at once.

Prefer ``async def`` tools. An async tool that is timed out or aborted is really
cancelled: its awaits raise ``CancelledError`` and its HTTP streams close. A sync tool
runs in a thread of :mod:`agent_core.tools.threads` (a small pool of its own, so it cannot
starve DNS look-ups or anything else that uses asyncio's default executor), and a thread
cannot be stopped: on a timeout or Abort the run goes on at once and the thread's result
is dropped, but the thread keeps its pool slot until the function returns. A sync tool
that never returns costs one pool thread for the life of the process. A sync tool that
spends long stretches in one C call (a huge integer power, a giant regex) also holds the
interpreter lock for that whole call, freezing every other task of the process, health
checks and clicks included; so a sync tool must bound the work its arguments can ask for,
as :mod:`agent_core.tools.builtin` does.

A tool can also be carried out elsewhere: :func:`remote_tool` wraps ``async fn(arguments)``
with a JSON schema given as is (an MCP server's tool, see :mod:`agent_core.tools.mcp`). Both kinds
go through the same :class:`Toolbox` path: the same timeout, the same error results, the
same cut of results longer than :data:`MAX_TOOL_RESULT_CHARS` (with a note saying so, so
one tool cannot blow the context). A tool that can explain its failure raises
:class:`ToolError`; the model reads ``error: <tool>: <message>``. A tool may call
:func:`agent_core.tools.progress.report_progress` while it works; the run shows it as the
call's progress.

Two tools are built into every run and handled by the loop, not executed:
``final_report`` (ends the run with the four-part handoff) and ``ask_user`` (ends it with
one blocking question). A third, ``delegate``, is a real tool each run makes for itself
(:mod:`agent_core.run.delegation`): it starts a sub-agent.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import pydantic
import structlog

from agent_core.tools.arguments import ArgumentsError, parse_arguments
from agent_core.tools.progress import OnProgress, reporting_progress
from agent_core.tools.threads import SHARED_TOOL_THREADS, ToolThreads
from agent_core.values.chat import ToolCall, ToolSpec
from agent_core.values.errors import ThreadpilotError

__all__ = [
    "ASK_USER",
    "DEFAULT_TOOL_TIMEOUT_S",
    "FINAL_REPORT",
    "MAX_TOOL_RESULT_CHARS",
    "CallLog",
    "FinalReport",
    "Tool",
    "ToolError",
    "ToolOutcome",
    "Toolbox",
    "gather_tools",
    "remote_tool",
    "tool",
]

ToolFn = Callable[..., Any]

DEFAULT_TOOL_TIMEOUT_S = 120.0
"""How long one tool call may take before it is cancelled (the ``TOOL_TIMEOUT`` setting)."""

MAX_TOOL_RESULT_CHARS = 20_000
"""The most of one tool result the model reads (about 5,000 tokens); the rest is cut with
a note. A constant, not a setting: it protects the context window, whatever the tool."""

log = structlog.get_logger("agent_core.tools.toolbox")


class ToolError(ThreadpilotError):
    """A tool failed and can say why in a sentence: the model reads
    ``error: <tool>: <message>`` (no exception class name)."""


@functools.cache
def _json_schema(args_model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The arguments' JSON schema as offered to the model, built once per model class:
    pydantic takes a while, and some tools (``delegate``) are made for every run."""
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    return schema


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model can call: a Python function, or a tool carried out elsewhere.

    A Python function (made by :func:`tool`) has an ``args_model``: its arguments are
    validated here and passed as keywords. A remote tool (made by :func:`remote_tool`, e.g.
    an MCP server's) has none: ``fn`` is ``async fn(arguments) -> str`` taking the
    arguments object whole, and ``parameters`` is the JSON schema offered to the model (the
    server checks the arguments against it).
    """

    name: str
    description: str
    fn: ToolFn
    args_model: type[pydantic.BaseModel] | None = None
    parameters: Mapping[str, Any] | None = None
    bounded: bool = True
    """False for a tool that bounds itself, so the toolbox's ``TOOL_TIMEOUT`` does not
    apply: ``delegate``, whose child run has its own limits (turns, each of its tool
    calls, the model's idle timeout) and obeys its parent's Stop and Abort."""
    needs_approval: bool = False
    """A person approves each call before it runs (an MCP tool marked in ``MCP_CONFIG``,
    :mod:`agent_core.values.approvals`); the wait does not count against ``TOOL_TIMEOUT``."""

    spec: ToolSpec = field(init=False, repr=False, compare=False)
    """The tool as the model sees it, made once: every model request offers it."""

    def __post_init__(self) -> None:
        if (self.args_model is None) == (self.parameters is None):
            raise TypeError(f"tool {self.name}: give exactly one of args_model and parameters")
        if self.parameters is not None:
            schema = dict(self.parameters)
        else:
            assert self.args_model is not None
            schema = _json_schema(self.args_model)
        object.__setattr__(self, "spec", ToolSpec(self.name, self.description, schema))

    @property
    def is_async(self) -> bool:
        return self.args_model is None or inspect.iscoroutinefunction(self.fn)

    async def invoke(
        self, arguments: dict[str, Any], threads: ToolThreads = SHARED_TOOL_THREADS
    ) -> str:
        """Validate ``arguments`` and call the function; sync functions run in ``threads``.

        Cancelling this returns at once even while a sync function still runs; its
        result is then dropped (see the module docstring for what that costs).
        """
        if self.args_model is None:
            return _as_text(await self.fn(arguments))
        args = self.args_model.model_validate(arguments)
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.is_async:
            return _as_text(await self.fn(**kwargs))
        call = functools.partial(_call_as_text, self.fn, kwargs)
        # Like asyncio.to_thread: the tool sees the caller's context (e.g. current_run()).
        future = threads.submit(contextvars.copy_context().run, call)
        return typing.cast("str", await asyncio.wrap_future(future))


def _call_as_text(fn: ToolFn, kwargs: dict[str, Any]) -> str:
    # Serialised in the tool's thread: a large result must not hold up the event loop.
    return _as_text(fn(**kwargs))


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


@overload
def tool(fn: ToolFn, /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[ToolFn], Tool]: ...
def tool(
    fn: ToolFn | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[ToolFn], Tool]:
    """Turn a function into a :class:`Tool`. Usable bare (``@tool``) or with arguments."""

    def wrap(f: ToolFn) -> Tool:
        return Tool(
            name=name or f.__name__,
            description=description or _first_paragraph(inspect.getdoc(f) or f.__name__),
            fn=f,
            args_model=_args_model(f),
        )

    return wrap(fn) if fn is not None else wrap


def remote_tool(
    name: str,
    description: str,
    parameters: Mapping[str, Any],
    fn: Callable[[dict[str, Any]], typing.Awaitable[str]],
    *,
    needs_approval: bool = False,
) -> Tool:
    """A tool carried out elsewhere: ``await fn(arguments)`` with the arguments object
    whole; ``parameters`` is its JSON schema, offered to the model as is."""
    return Tool(
        name=name,
        description=description,
        fn=fn,
        parameters=parameters,
        needs_approval=needs_approval,
    )


def _first_paragraph(doc: str) -> str:
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ")


def _args_model(fn: ToolFn) -> type[pydantic.BaseModel]:
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args and **kwargs cannot be described")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model: type[pydantic.BaseModel] = pydantic.create_model(
        f"{fn.__name__}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model


# -- the loop's own tools -------------------------------------------------------------


class FinalReport(pydantic.BaseModel):
    """End the run and report to the person who asked: the four-part handoff."""

    model_config = pydantic.ConfigDict(extra="ignore")

    outcome: Literal["finished", "blocked", "failed"] = pydantic.Field(
        description="finished: the request is done. blocked: something outside your "
        "control is missing. failed: the work or its verification failed."
    )
    evidence: str = pydantic.Field(
        description="What was done and verified, or the error / missing prerequisite."
    )
    artifacts: list[str] = pydantic.Field(
        default_factory=list, description="Files, links or ids produced."
    )
    handoff: str = pydantic.Field(
        description="Who acts next and exactly what remains. No optional offers."
    )


class AskUser(pydantic.BaseModel):
    """Ask the person one blocking question and end the run until they answer."""

    question: str = pydantic.Field(description="One concrete question.")


def _builtin_spec(name: str, model: type[pydantic.BaseModel]) -> ToolSpec:
    schema = model.model_json_schema()
    schema.pop("title", None)
    description = _first_paragraph(model.__doc__ or name)
    return ToolSpec(name, description, schema)


FINAL_REPORT = _builtin_spec("final_report", FinalReport)
ASK_USER = _builtin_spec("ask_user", AskUser)


# -- running a batch of calls ---------------------------------------------------------


class Gate(typing.Protocol):
    """Holds a call until it may run (:class:`~agent_core.run.approval_gate.ApprovalGate`)."""

    async def clear(self, call: ToolCall) -> str | None:
        """None when ``call`` may run; otherwise the error the model reads instead."""
        ...


class CallLog(typing.Protocol):
    """Told when a call starts and when its result arrives, each awaited before the
    call goes on (the run's :class:`~agent_core.run.step_log.StepLog`, which checkpoints
    them so a resume never runs a started call twice)."""

    async def started(self, call: ToolCall) -> None:
        """``call`` cleared its approval (if any) and its tool is about to be invoked."""
        ...

    async def finished(self, outcome: ToolOutcome) -> None:
        """``outcome``, the call's result (an error one too), arrived."""
        ...


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    call: ToolCall
    output: str
    ok: bool

    def message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.output}


class Toolbox:
    """The tools of one agent, looked up by name; every call bounded by ``timeout_s``,
    every result by ``max_result_chars``."""

    def __init__(
        self,
        tools: Sequence[Tool] = (),
        *,
        timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
        threads: ToolThreads = SHARED_TOOL_THREADS,
        max_result_chars: int = MAX_TOOL_RESULT_CHARS,
        gate: Gate | None = None,
        calls: CallLog | None = None,
    ) -> None:
        """``gate``: holds each call of a tool that :attr:`Tool.needs_approval` until a
        person decides (the run's :class:`~agent_core.run.approval_gate.ApprovalGate`); without
        one, such calls are refused. ``calls``: told of each call's start and result."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        if max_result_chars < 1:
            raise ValueError(f"max_result_chars must be positive, not {max_result_chars}")
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self._threads = threads
        self._gate = gate
        self._calls = calls
        self._tools = {t.name: t for t in tools}
        reserved = {FINAL_REPORT.name, ASK_USER.name} & set(self._tools)
        if reserved:
            raise ValueError(f"tool names reserved by the loop: {sorted(reserved)}")

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    async def run(
        self,
        call: ToolCall,
        on_start: Callable[[ToolCall], None] | None = None,
        on_progress: OnProgress | None = None,
    ) -> ToolOutcome:
        """Run one call and turn every ordinary failure into an error result."""
        if on_start is not None:
            on_start(call)
        with reporting_progress(call, on_progress):
            outcome = _cut(await self._run(call), self.max_result_chars)
        if self._calls is not None:
            await self._calls.finished(outcome)
        return outcome

    async def _run(self, call: ToolCall) -> ToolOutcome:
        found = self._tools.get(call.name)
        if found is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolOutcome(
                call, f"error: there is no tool named {call.name!r} (available: {known})", ok=False
            )
        try:
            arguments = parse_arguments(call.arguments)
        except ArgumentsError as exc:
            return ToolOutcome(
                call,
                f"error: the arguments were not a valid JSON object "
                f"({exc}); call {call.name} again with valid JSON",
                ok=False,
            )
        if found.needs_approval:
            refusal = (
                await self._gate.clear(call)
                if self._gate is not None
                else f"error: {call.name}: not run: it needs a person's approval, "
                "and nobody can give it here"
            )
            if refusal is not None:
                return ToolOutcome(call, refusal, ok=False)
        if self._calls is not None:
            await self._calls.started(call)
        deadline = asyncio.timeout(self.timeout_s if found.bounded else None)
        try:
            async with deadline:
                return ToolOutcome(call, await found.invoke(arguments, self._threads), ok=True)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own timeout, not ours
                return ToolOutcome(call, _raised(call, exc), ok=False)
            return self._timed_out(call, found)
        except pydantic.ValidationError as exc:
            return ToolOutcome(
                call, f"error: invalid arguments for {call.name}: {_brief(exc)}", ok=False
            )
        except ToolError as exc:
            return ToolOutcome(call, f"error: {call.name}: {exc}", ok=False)
        except Exception as exc:
            return ToolOutcome(call, _raised(call, exc), ok=False)

    def _timed_out(self, call: ToolCall, found: Tool) -> ToolOutcome:
        if found.is_async:
            log.warning("tool.timed_out", tool=call.name, timeout_s=self.timeout_s)
        else:
            log.warning(
                "tool.timed_out",
                tool=call.name,
                timeout_s=self.timeout_s,
                # The thread runs on until the function returns; this shows the cost.
                tool_threads_busy=self._threads.busy,
                tool_threads_max=self._threads.max_threads,
            )
        return ToolOutcome(
            call, f"error: {call.name} timed out after {self.timeout_s:g} s", ok=False
        )


def _cut(outcome: ToolOutcome, budget: int) -> ToolOutcome:
    """At most ``budget`` characters of the result, and a note when some were cut."""
    size = len(outcome.output)
    if size <= budget:
        return outcome
    log.info("tool.result_cut", tool=outcome.call.name, chars=size, kept=budget)
    note = (
        f"\n\n[threadpilot cut this result: it had {size:,} characters and only the first "
        f"{budget:,} are shown. If you need more, ask the tool for less at a time.]"
    )
    return ToolOutcome(outcome.call, outcome.output[:budget] + note, outcome.ok)


def _raised(call: ToolCall, exc: Exception) -> str:
    return f"error: {call.name} raised {type(exc).__name__}: {exc}"


def _brief(exc: pydantic.ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
    )


async def gather_tools(
    toolbox: Toolbox,
    calls: Sequence[ToolCall],
    on_start: Callable[[ToolCall], None],
    on_done: Callable[[ToolOutcome], None],
    on_progress: OnProgress | None = None,
) -> list[ToolOutcome]:
    """Run a batch of parallel calls; results come back in call order.

    A TaskGroup owns the tasks: cancelling the caller (Abort) cancels every tool.
    """

    async def one(call: ToolCall) -> ToolOutcome:
        outcome = await toolbox.run(call, on_start, on_progress)
        on_done(outcome)
        return outcome

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(c), name=f"tool:{c.name}") for c in calls]
    return [t.result() for t in tasks]
