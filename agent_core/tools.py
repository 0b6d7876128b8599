"""Tools: typed Python callables the model can call, with a JSON schema from the signature.

::

    @tool
    async def search(query: str, limit: int = 5) -> str:
        '''Search the wiki.'''

``Annotated[str, pydantic.Field(max_length=...)]`` parameters put their limits in the
schema, and arguments beyond them are refused before the tool runs.

A tool that raises gives the model an error result, never a crash; arguments that are
not valid JSON, or do not match the signature, are reported back to the model the same
way. Every call is bounded by the toolbox's timeout (``TOOL_TIMEOUT``, default 120 s):
after it the call is cancelled and the model reads ``error: <tool> timed out after N s``.
Cancellation is never caught here: an Abort cancels a running tool at once.

Prefer ``async def`` tools. An async tool that is timed out or aborted is really
cancelled: its awaits raise ``CancelledError`` and its HTTP streams close. A sync tool
runs in a thread of :mod:`agent_core.tool_threads` (a small pool of its own, so it cannot
starve DNS look-ups or anything else that uses asyncio's default executor), and a thread
cannot be stopped: on a timeout or Abort the run goes on at once and the thread's result
is dropped, but the thread keeps its pool slot until the function returns. A sync tool
that never returns costs one pool thread for the life of the process. A sync tool that
spends long stretches in one C call (a huge integer power, a giant regex) also holds the
interpreter lock for that whole call, freezing every other task of the process, health
checks and clicks included; so a sync tool must bound the work its arguments can ask for,
as :mod:`agent_core.builtin_tools` does.

Two tools are built into every run and handled by the loop, not executed:
``final_report`` (ends the run with the four-part handoff) and ``ask_user`` (ends it with
one blocking question).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import pydantic
import structlog

from agent_core.ports import ToolCall, ToolSpec
from agent_core.tool_threads import SHARED_TOOL_THREADS, ToolThreads

__all__ = [
    "ASK_USER",
    "DEFAULT_TOOL_TIMEOUT_S",
    "FINAL_REPORT",
    "FinalReport",
    "Tool",
    "ToolOutcome",
    "Toolbox",
    "gather_tools",
    "tool",
]

ToolFn = Callable[..., Any]

DEFAULT_TOOL_TIMEOUT_S = 120.0
"""How long one tool call may take before it is cancelled (SPEC.md: ``TOOL_TIMEOUT``)."""

log = structlog.get_logger("agent_core.tools")


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    fn: ToolFn
    args_model: type[pydantic.BaseModel]

    @property
    def spec(self) -> ToolSpec:
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    async def invoke(
        self, arguments: dict[str, Any], threads: ToolThreads = SHARED_TOOL_THREADS
    ) -> str:
        """Validate ``arguments`` and call the function; sync functions run in ``threads``.

        Cancelling this returns at once even while a sync function still runs; its
        result is then dropped (see the module docstring for what that costs).
        """
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


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    call: ToolCall
    output: str
    ok: bool

    def message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.output}


class Toolbox:
    """The tools of one agent, looked up by name; every call bounded by ``timeout_s``."""

    def __init__(
        self,
        tools: Sequence[Tool] = (),
        *,
        timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
        threads: ToolThreads = SHARED_TOOL_THREADS,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        self.timeout_s = timeout_s
        self._threads = threads
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
    ) -> ToolOutcome:
        """Run one call and turn every ordinary failure into an error result."""
        if on_start is not None:
            on_start(call)
        found = self._tools.get(call.name)
        if found is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolOutcome(
                call, f"error: there is no tool named {call.name!r} (available: {known})", ok=False
            )
        try:
            arguments = json.loads(call.arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return ToolOutcome(
                call,
                f"error: the arguments were not a valid JSON object "
                f"({exc}); call {call.name} again with valid JSON",
                ok=False,
            )
        deadline = asyncio.timeout(self.timeout_s)
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
) -> list[ToolOutcome]:
    """Run a batch of parallel calls; results come back in call order.

    A TaskGroup owns the tasks: cancelling the caller (Abort) cancels every tool.
    """

    async def one(call: ToolCall) -> ToolOutcome:
        outcome = await toolbox.run(call, on_start)
        on_done(outcome)
        return outcome

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(c), name=f"tool:{c.name}") for c in calls]
    return [t.result() for t in tasks]
