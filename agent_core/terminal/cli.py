"""``python -m agent_core run "TASK"``: the agent in a terminal, for trying it without Slack.

Ctrl+C once asks for a Stop (the current step finishes, one final turn reports), twice
for an Abort; SIGTERM and SIGHUP (the terminal closed) are a shutdown. Exit statuses
(docs/stopping.md, In a terminal): 0 finished or stopped, 130 aborted, 143 shutdown (129 when SIGHUP
asked for it), 1 failed, 2 bad usage or configuration. ``--json`` carries
``ended_because`` (:mod:`agent_core.values.ended`) with the rest of the result, ``sub_agents``
(each sub-agent at every depth: its task, outcome and who stopped it), and ``usage`` is
the whole request's (the run and its sub-agents: tokens by kind, tool calls, wall time,
and ``cost_usd`` when prices are set). The app's budgets apply here too
(:mod:`agent_core.values.budget`): a spent one ends the run ``blocked`` with ``EXIT-BUDGET``,
exit status 0.

Settings are read as the app reads them (:mod:`agent_core.process.settings_file`): the
environment, then ``.env`` in the working directory (the environment wins, even when it
is empty; an empty value means the default). Every missing or bad setting is named at
once, one line each, in the app's words (exit status 2); ``run --help`` says so.
``LOG_LEVEL`` is the exception: only the environment's counts, WARNING by default,
because a ``.env`` written for the app asks for INFO and its lines would bury the answer.

The agent has the app's tools, less Slack's: the built-in ones, ``delegate``, and the
tools of every MCP server ``MCP_CONFIG`` lists, started and closed here with the app's
:class:`~agent_core.tools.mcp.McpManager` (a server that does not start is logged and left
out). A Stop lets their calls finish; an Abort or a shutdown cancels them.

A tool call that ``MCP_CONFIG`` marks for approval asks ``Approve TOOL {arguments}?
[y/N]`` on the terminal (:mod:`agent_core.terminal.approvals`); when stdin is not a
terminal the call is denied, and ``--yes`` approves every call without asking.

The answer streams to stdout; with ``--json`` it streams to stderr and stdout carries only
the final JSON object, so scripts can parse it. Tool calls as they start (``-> name
{arguments}``) and end (``<- name ok: result`` or ``error:``), and sub-agents as they start
and end, at every depth, indented, are shown on stderr: in colour when stderr is a
terminal and ``NO_COLOR`` is not set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, overload

from agent_core.models.api import HTTPChatModel, ModelAPI, build_model
from agent_core.models.http_exchange import DEFAULT_REPLY_TIMEOUT_S
from agent_core.process.isolation import make_undumpable
from agent_core.process.logs import configure_logging
from agent_core.process.settings_file import (
    ENV_FILE,
    REQUIRED_WITH_API,
    SettingsInvalid,
    missing,
    raise_all,
    settings_text,
)
from agent_core.process.tracing import configure_tracing, flush_traces
from agent_core.run.agent import Agent
from agent_core.run.config import AgentConfig
from agent_core.run.delegation import DELEGATE, stopped_here
from agent_core.terminal.approvals import TerminalApprovals
from agent_core.tools.builtin import BUILTIN_TOOLS
from agent_core.tools.mcp import SETTING as MCP_SETTING
from agent_core.tools.mcp import McpManager, load_mcp_config
from agent_core.tools.toolbox import DEFAULT_TOOL_TIMEOUT_S
from agent_core.values.approvals import APPROVAL_TIMEOUT, parse_approval_timeout
from agent_core.values.budget_settings import RunLimits, limits_from_settings
from agent_core.values.errors import ConfigError
from agent_core.values.events import (
    ChildFinished,
    ChildStarted,
    RunEvent,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from agent_core.values.outcomes import ExitCode
from agent_core.values.redact import public_url
from agent_core.values.stop import StopReason, StopSource

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from agent_core.run.loop import Run
    from agent_core.tools.mcp import ServerConfig
    from agent_core.values.budget import Spent
    from agent_core.values.outcomes import RunResult

__all__ = ["main"]

_T = TypeVar("_T")

EXIT_USAGE = 2
STOPPING_NOTICE = "Stopping after this step; press Ctrl+C again to abort"
HOW_TO_CONTINUE = "run the command again"
"""In a terminal a person carries on by running a new task (the loop's handoff lines)."""


def main(argv: Sequence[str] | None = None) -> int:
    make_undumpable()  # first thing: what the tools start cannot read its secrets (/proc)
    args = _parser().parse_args(argv)
    try:
        model, servers, config = _configure(settings_text(), args)
        configure_logging("console", os.environ.get("LOG_LEVEL", "").strip() or "WARNING")
        configure_tracing()  # the same OTEL_* settings as the app
    except SettingsInvalid as exc:
        for problem in exc.problems:
            print(f"threadpilot: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except (ConfigError, ValueError) as exc:
        print(f"threadpilot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    shutdowns: list[signal.Signals] = []
    try:
        result, spent, sub_agents = asyncio.run(_session(model, servers, config, args, shutdowns))
    except KeyboardInterrupt:  # Ctrl+C while the MCP servers started: no run yet
        return 128 + signal.SIGINT
    except ConfigError as exc:  # found as the MCP servers started: no run yet
        print(f"threadpilot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = sys.stdout
    if args.json:
        # The whole request's usage, sub-agents included, in place of the run's own.
        # Each sub-agent, at every depth: how it ended, and who stopped it.
        whole = {**result.to_dict(), "usage": spent.to_dict(), "sub_agents": sub_agents}
        out.write(json.dumps(whole) + "\n")
    else:
        _print_handoff(result, out)
    out.flush()
    return _process_status(result, shutdowns)


def _configure(
    env: Mapping[str, str], args: argparse.Namespace
) -> tuple[HTTPChatModel, tuple[ServerConfig, ...], AgentConfig]:
    """The model, the MCP servers and the run's configuration, from the settings and the
    command line. Every setting is read before any problem is raised, so one
    :class:`SettingsInvalid` names all that are missing or wrong (one, a ConfigError)."""
    problems: list[ConfigError] = []

    def read(setting: Callable[[], _T], default: _T) -> _T:
        try:
            return setting()
        except SettingsInvalid as exc:
            problems.extend(exc.problems)
        except ConfigError as exc:
            problems.append(exc)
        return default

    limits = read(lambda: limits_from_settings(env), RunLimits())
    model = read(lambda: _model_from_env(env, limits.max_output_tokens), None)
    servers: tuple[ServerConfig, ...] = read(lambda: _mcp_servers(env), ())
    tool_timeout_s = read(lambda: _seconds(env, "TOOL_TIMEOUT", DEFAULT_TOOL_TIMEOUT_S), 0.0)
    approval_timeout_s = read(lambda: parse_approval_timeout(env.get(APPROVAL_TIMEOUT)), 0.0)
    max_turns = read(lambda: _turns(env), 0) if args.max_turns is None else args.max_turns
    final_turn_timeout_s = (
        read(lambda: _seconds(env, "FINAL_TURN_TIMEOUT"), None)
        if args.final_turn_timeout is None
        else args.final_turn_timeout
    )
    raise_all(problems)
    assert model is not None  # else a problem was raised
    config = AgentConfig(
        max_turns=max_turns,
        final_turn_timeout_s=final_turn_timeout_s,
        tool_timeout_s=tool_timeout_s,
        approval_timeout_s=approval_timeout_s,
        how_to_continue=HOW_TO_CONTINUE,
        budget=limits.budget,
        max_tool_calls_per_step=limits.max_tool_calls_per_step,
        max_children_per_run=limits.max_children_per_run,
        context_window=limits.context_window,
    )
    return model, servers, config


def _process_status(result: RunResult, shutdowns: Sequence[signal.Signals]) -> int:
    """The run's status, except that a shutdown SIGHUP asked for exits 128 + SIGHUP."""
    if result.exit_code is ExitCode.SHUTDOWN and shutdowns[:1] == [signal.SIGHUP]:
        return 128 + signal.SIGHUP
    return result.process_status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent_core")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run the agent on one task",
        description=RUN_USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.add_argument(
        "--max-turns",
        type=int,
        default=None,
        metavar="N",
        help=f"model turns before it must report (default: MAX_TURNS, else {DEFAULT_MAX_TURNS})",
    )
    run.add_argument(
        "--final-turn-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after a Stop, abort if the final turn takes longer than this "
        "(default: FINAL_TURN_TIMEOUT, else no limit)",
    )
    run.add_argument(
        "--yes",
        action="store_true",
        help="approve every tool call that MCP_CONFIG says needs approval, without asking "
        "(otherwise the terminal asks y/N, and denies when stdin is not a terminal)",
    )
    return parser


DEFAULT_MAX_TURNS = 20
RUN_USAGE = """\
Runs the agent on one task in this terminal, with the app's tools less Slack's.

Settings are read as the app reads them: from the environment and from .env in the
working directory (the environment wins; an empty value means the default). The model:
MODEL_API, with OPENAI_API_KEY, OPENAI_MODEL and OPENAI_BASE_URL (or the ANTHROPIC_*
ones); also MAX_TURNS, FINAL_TURN_TIMEOUT, TOOL_TIMEOUT, MCP_CONFIG and the budgets
(.env.example describes each). LOG_LEVEL comes from the environment alone (WARNING).
Every missing or bad setting is named at once.

Ctrl+C once stops after the current step and prints the handoff; twice aborts.
exit status: 0 finished or stopped, 130 aborted, 143 shutdown (129 after SIGHUP),
1 failed, 2 bad usage or configuration"""


def _model_from_env(env: Mapping[str, str], max_output_tokens: int | None = None) -> HTTPChatModel:
    """The adapter of ``MODEL_API`` with the key, model and URL of that API's settings,
    its replies capped at ``max_output_tokens`` (``MODEL_MAX_OUTPUT_TOKENS``)."""
    raw_api = env.get("MODEL_API", "").strip() or ModelAPI.OPENAI_CHAT.value
    try:
        api = ModelAPI(raw_api)
    except ValueError:
        known = ", ".join(a.value for a in ModelAPI)
        raise ConfigError("MODEL_API", f"{raw_api!r} is not one of {known}") from None
    prefix = "ANTHROPIC" if api is ModelAPI.ANTHROPIC else "OPENAI"
    key, model, base = (
        env.get(f"{prefix}_{n}", "").strip() for n in ("API_KEY", "MODEL", "BASE_URL")
    )
    why = REQUIRED_WITH_API.format(api=api.value)
    problems = [
        ConfigError(f"{prefix}_{name}", missing(ENV_FILE, why))
        for name, value in (("API_KEY", key), ("MODEL", model))
        if not value
    ]
    if base and not base.startswith(("http://", "https://")):
        problems.append(
            ConfigError(f"{prefix}_BASE_URL", f"{public_url(base)!r} is not an http(s) URL")
        )
    try:
        reply_s = _seconds(env, "MODEL_REPLY_TIMEOUT", DEFAULT_REPLY_TIMEOUT_S)
    except ConfigError as exc:
        problems.append(exc)
    raise_all(problems)
    return build_model(
        api,
        model=model,
        api_key=key,
        base_url=base or None,
        reply_timeout_s=reply_s,
        max_output_tokens=max_output_tokens,
    )


@overload
def _seconds(env: Mapping[str, str], name: str, default: float) -> float: ...
@overload
def _seconds(env: Mapping[str, str], name: str, default: None = None) -> float | None: ...
def _seconds(env: Mapping[str, str], name: str, default: float | None = None) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):  # also refuses nan
        raise ConfigError(name, f"{raw!r} is not a positive number of seconds")
    return seconds


def _turns(env: Mapping[str, str]) -> int:
    raw = env.get("MAX_TURNS", "").strip()
    if not raw:
        return DEFAULT_MAX_TURNS
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError("MAX_TURNS", f"{raw!r} is not a whole number of turns, at least 1")
    return int(raw)


def _mcp_servers(env: Mapping[str, str]) -> tuple[ServerConfig, ...]:
    """The servers ``MCP_CONFIG`` lists, read as the app reads them (none without it)."""
    path = env.get(MCP_SETTING, "").strip()
    if not path:
        return ()
    try:
        return load_mcp_config(path)
    except ConfigError as exc:
        if path in exc.problem:
            raise
        raise ConfigError(exc.setting, f"{exc.problem} (in {path})") from None


async def _session(
    model: HTTPChatModel,
    servers: Sequence[ServerConfig],
    config: AgentConfig,
    args: argparse.Namespace,
    shutdowns: list[signal.Signals],
) -> tuple[RunResult, Spent, list[dict[str, Any]]]:
    """Start the MCP servers, run the task with their tools and the built-in ones, then
    close the servers and the model's connections, whatever happened (a Ctrl+C while the
    servers start included). The result, what the whole request spent, and its
    sub-agents (:func:`sub_agents_of`)."""
    mcp = McpManager(servers, reserved=[*(t.name for t in BUILTIN_TOOLS), DELEGATE])
    try:
        await mcp.start()
        approvals = TerminalApprovals(approve_all=args.yes, stdin=sys.stdin, prompt=sys.stderr)
        agent = Agent(model, [*BUILTIN_TOOLS, *mcp.tools], config=config, approvals=approvals)
        return await _run(agent, args.task, args.json, shutdowns)
    finally:
        # The run is over (checkpointed, its spans ended): send its trace, bounded.
        await flush_traces()
        await asyncio.shield(mcp.close())
        await model.aclose()


async def _run(
    agent: Agent, task: str, as_json: bool, shutdowns: list[signal.Signals]
) -> tuple[RunResult, Spent, list[dict[str, Any]]]:
    run = agent.new_run(task, requester="terminal")
    answer = sys.stderr if as_json else sys.stdout
    run.events.add_listener(lambda event: _show(event, answer))
    _Progress(sys.stderr, _colour(sys.stderr)).follow(run)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, _on_interrupt, run)
    for signum in _SHUTDOWN_SIGNALS:
        loop.add_signal_handler(signum, _on_shutdown, run, signum, shutdowns)
    try:
        result = await run.run()
        return result, run.budget.spent(), sub_agents_of(run)
    finally:
        for signum in (signal.SIGINT, *_SHUTDOWN_SIGNALS):
            loop.remove_signal_handler(signum)


_SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def sub_agents_of(run: Run) -> list[dict[str, Any]]:
    """Every sub-agent ``run`` started, at every depth, parent before child: its task,
    how it ended, and who stopped it (``stopped_by``), with whether that was asked of it
    alone (``stopped_on_its_own``) or passed down by its parent."""
    found: list[dict[str, Any]] = []
    for child in run.children:
        result = child.result
        own = stopped_here(child.control)
        found.append(
            {
                "run_id": child.id,
                "parent_id": run.id,
                "task": child.task,
                "outcome": result.outcome.value if result is not None else None,
                "label": result.label() if result is not None else None,
                "exit_code": result.exit_code.value if result is not None else None,
                "stopped_by": result.handoff.stopped_by if result is not None else None,
                "stopped_on_its_own": own is not None,
            }
        )
        found += sub_agents_of(child)
    return found


def _on_shutdown(run: Run, signum: signal.Signals, shutdowns: list[signal.Signals]) -> None:
    """SIGTERM or SIGHUP: cancel now, checkpoint, leave the run resumable. The first one
    decides the exit status (143 or 129)."""
    shutdowns.append(signum)
    run.request_stop(StopReason.SHUTDOWN, f"signal:{signum.name}", source=StopSource.SIGNAL)


def _on_interrupt(run: Run) -> None:
    if run.control.stop_requested:
        run.request_stop(StopReason.ABORT, "terminal", source=StopSource.SIGNAL)
        return
    run.request_stop(StopReason.STOP, "terminal", source=StopSource.SIGNAL)
    print(f"\n{STOPPING_NOTICE}", file=sys.stderr, flush=True)


def _show(event: RunEvent, stream: TextIO) -> None:
    """The top-level run's answer, as it streams."""
    match event:
        case TextDelta(text=text):
            stream.write(text)
            stream.flush()
        case _:
            pass


def _colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and not when ``NO_COLOR`` is set (no-color.org)."""
    if os.environ.get("NO_COLOR", ""):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


_SHOWN = 100
"""Longest task, argument list or result shown on one progress line (characters)."""
_BOLD, _DIM, _GREEN, _RED, _YELLOW, _RESET = (
    "\x1b[1m",
    "\x1b[2m",
    "\x1b[32m",
    "\x1b[31m",
    "\x1b[33m",
    "\x1b[0m",
)


class _Progress:
    """What a run does besides writing its answer, one line each on ``stream`` as it
    happens: tool calls and their results, the final turn, sub-agents (followed at every
    depth, indented under their parent)."""

    def __init__(self, stream: TextIO, colour: bool) -> None:
        self._stream = stream
        self._colour = colour

    def follow(self, run: Run) -> None:
        run.events.add_listener(lambda event: self._on_event(run, event))

    def _on_event(self, run: Run, event: RunEvent) -> None:
        indent = "  " * run.depth
        match event:
            case ToolStarted(name=name, arguments=arguments):
                self._line(
                    f"{indent}{self._paint('->', _DIM)} {self._paint(name, _BOLD)} "
                    f"{_one_line(arguments)}"
                )
            case ToolFinished(name=name, ok=ok, output=output):
                verdict = self._paint("ok", _GREEN) if ok else self._paint("error", _RED)
                # The model reads "error: ..."; here the verdict already says so.
                output = output if ok else output.removeprefix("error: ")
                self._line(
                    f"{indent}{self._paint('<-', _DIM)} {name} {verdict}: {_one_line(output)}"
                )
            case TurnStarted(final=True):
                self._line(f"{indent}{self._paint('-- final turn --', _YELLOW)}")
            case ChildStarted(child_id=child_id, task=task):
                (child,) = [c for c in run.children if c.id == child_id]
                self.follow(child)
                self._line(
                    f"{indent}{self._paint('=>', _DIM)} sub-agent {child_id[:8]} "
                    f"started: {_one_line(task)}"
                )
            case ChildFinished(child_id=child_id, result=result):
                self._line(
                    f"{indent}{self._paint('<=', _DIM)} sub-agent {child_id[:8]} "
                    f"ended: {result.label()} [{result.exit_code.value}]"
                )
            case _:
                pass

    def _paint(self, text: str, style: str) -> str:
        return f"{style}{text}{_RESET}" if self._colour else text

    def _line(self, text: str) -> None:
        self._stream.write(f"\n{text}\n")
        self._stream.flush()


def _one_line(text: str) -> str:
    """``text`` on one line, whitespace collapsed, cut to :data:`_SHOWN` characters."""
    line = " ".join(text.split())
    return line if len(line) <= _SHOWN else line[: _SHOWN - 3] + "..."


def _print_handoff(result: RunResult, out: TextIO) -> None:
    h = result.handoff
    out.write(f"\n\nOutcome: {result.label()} [{result.exit_code.value}]\n")
    out.write(f"Evidence: {h.evidence}\n")
    out.write(f"Artifacts: {', '.join(h.artifacts) or 'none'}\n")
    out.write(f"Handoff: {h.question or h.next_step}\n")
