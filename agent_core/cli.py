"""``python -m agent_core run "TASK"``: the agent in a terminal, for trying it without Slack.

Ctrl+C once asks for a Stop (the current step finishes, one final turn reports), twice
for an Abort; SIGTERM and SIGHUP (the terminal closed) are a shutdown. Exit statuses
(docs/stopping.md, In a terminal): 0 finished or stopped, 130 aborted, 143 shutdown (129 when SIGHUP
asked for it), 1 failed, 2 bad usage or configuration. ``--json`` carries
``ended_because`` (:mod:`agent_core.ended`) with the rest of the result.

The answer streams to stdout; with ``--json`` it streams to stderr and stdout carries only
the final JSON object, so scripts can parse it. Tool calls, and sub-agents as they start
and end (at every depth, indented), are shown on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
from typing import TYPE_CHECKING, TextIO

from agent_core.agent import Agent, AgentConfig
from agent_core.builtin_tools import BUILTIN_TOOLS
from agent_core.errors import ConfigError
from agent_core.events import (
    ChildFinished,
    ChildStarted,
    RunEvent,
    TextDelta,
    ToolStarted,
    TurnStarted,
)
from agent_core.logs import configure_logging
from agent_core.model import OpenAIChatModel
from agent_core.outcomes import ExitCode
from agent_core.stop import StopReason
from agent_core.tools import DEFAULT_TOOL_TIMEOUT_S

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agent_core.loop import Run
    from agent_core.outcomes import RunResult

__all__ = ["main"]

EXIT_USAGE = 2
STOPPING_NOTICE = "Stopping after this step; press Ctrl+C again to abort"
HOW_TO_CONTINUE = "run the command again"
"""In a terminal a person carries on by running a new task (the loop's handoff lines)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        model = _model_from_env()
        tool_timeout_s = _tool_timeout_from_env()
        configure_logging("console", os.environ.get("LOG_LEVEL", "WARNING"))
    except (ConfigError, ValueError) as exc:
        print(f"threadpilot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    config = AgentConfig(
        max_turns=args.max_turns,
        final_turn_timeout_s=args.final_turn_timeout,
        tool_timeout_s=tool_timeout_s,
        how_to_continue=HOW_TO_CONTINUE,
    )
    shutdowns: list[signal.Signals] = []
    agent = Agent(model, BUILTIN_TOOLS, config=config)
    result = asyncio.run(_run(agent, args.task, args.json, shutdowns))
    out = sys.stdout
    if args.json:
        out.write(json.dumps(result.to_dict()) + "\n")
    else:
        _print_handoff(result, out)
    out.flush()
    return _process_status(result, shutdowns)


def _process_status(result: RunResult, shutdowns: Sequence[signal.Signals]) -> int:
    """The run's status, except that a shutdown SIGHUP asked for exits 128 + SIGHUP."""
    if result.exit_code is ExitCode.SHUTDOWN and shutdowns[:1] == [signal.SIGHUP]:
        return 128 + signal.SIGHUP
    return result.process_status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent_core")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the agent on one task")
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.add_argument("--max-turns", type=int, default=20, metavar="N")
    run.add_argument(
        "--final-turn-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after a Stop, abort if the final turn takes longer than this",
    )
    return parser


def _model_from_env() -> OpenAIChatModel:
    key = os.environ.get("OPENAI_API_KEY", "").strip()
    if not key:
        raise ConfigError(
            "OPENAI_API_KEY",
            "not set; set it to the key of your model endpoint "
            "(any non-empty value for a local endpoint that needs none)",
        )
    model = os.environ.get("OPENAI_MODEL", "").strip()
    if not model:
        raise ConfigError(
            "OPENAI_MODEL",
            "not set; set it to the model name your endpoint serves, e.g. gpt-4o-mini",
        )
    base_url = os.environ.get("OPENAI_BASE_URL", "").strip() or None
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ConfigError("OPENAI_BASE_URL", f"{base_url!r} is not an http(s) URL")
    return OpenAIChatModel(model=model, api_key=key, base_url=base_url)


def _tool_timeout_from_env() -> float:
    raw = os.environ.get("TOOL_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TOOL_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:  # also refuses nan
        raise ConfigError("TOOL_TIMEOUT", f"{raw!r} is not a positive number of seconds")
    return seconds


async def _run(
    agent: Agent, task: str, as_json: bool, shutdowns: list[signal.Signals]
) -> RunResult:
    run = agent.new_run(task, requester="terminal")
    stream = sys.stderr if as_json else sys.stdout
    run.events.add_listener(lambda event: _show(event, stream))
    _show_children(run)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, _on_interrupt, run)
    for signum in _SHUTDOWN_SIGNALS:
        loop.add_signal_handler(signum, _on_shutdown, run, signum, shutdowns)
    try:
        return await run.run()
    finally:
        for signum in (signal.SIGINT, *_SHUTDOWN_SIGNALS):
            loop.remove_signal_handler(signum)
        assert isinstance(agent.model, OpenAIChatModel)
        await agent.model.aclose()


_SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _on_shutdown(run: Run, signum: signal.Signals, shutdowns: list[signal.Signals]) -> None:
    """SIGTERM or SIGHUP: cancel now, checkpoint, leave the run resumable. The first one
    decides the exit status (143 or 129)."""
    shutdowns.append(signum)
    run.request_stop(StopReason.SHUTDOWN, f"signal:{signum.name}", source="signal")


def _on_interrupt(run: Run) -> None:
    if run.control.stop_requested:
        run.request_stop(StopReason.ABORT, "terminal", source="signal")
        return
    run.request_stop(StopReason.STOP, "terminal", source="signal")
    print(f"\n{STOPPING_NOTICE}", file=sys.stderr, flush=True)


def _show(event: RunEvent, stream: TextIO) -> None:
    match event:
        case TextDelta(text=text):
            stream.write(text)
            stream.flush()
        case ToolStarted(name=name, arguments=arguments):
            print(f"\n-> {name}({arguments})", file=sys.stderr, flush=True)
        case TurnStarted(final=True):
            print("\n-- final turn --", file=sys.stderr, flush=True)
        case _:
            pass


def _show_children(run: Run) -> None:
    """Print on stderr when ``run``'s sub-agents (and theirs) start and end."""

    def show(event: RunEvent) -> None:
        match event:
            case ChildStarted(child_id=child_id, task=task, depth=depth):
                task_line = " ".join(task.split())
                if len(task_line) > _TASK_SHOWN:
                    task_line = task_line[: _TASK_SHOWN - 3] + "..."
                print(
                    f"\n{_indent(depth)}=> sub-agent {child_id[:8]} started: {task_line}",
                    file=sys.stderr,
                    flush=True,
                )
                (child,) = [c for c in run.children if c.id == child_id]
                _show_children(child)
            case ChildFinished(child_id=child_id, result=result):
                print(
                    f"\n{_indent(run.depth + 1)}<= sub-agent {child_id[:8]} ended: "
                    f"{result.label()} [{result.exit_code.value}]",
                    file=sys.stderr,
                    flush=True,
                )
            case _:
                pass

    run.events.add_listener(show)


_TASK_SHOWN = 100


def _indent(depth: int) -> str:
    return "  " * (depth - 1)


def _print_handoff(result: RunResult, out: TextIO) -> None:
    h = result.handoff
    out.write(f"\n\nOutcome: {result.label()} [{result.exit_code.value}]\n")
    out.write(f"Evidence: {h.evidence}\n")
    out.write(f"Artifacts: {', '.join(h.artifacts) or 'none'}\n")
    out.write(f"Handoff: {h.question or h.next_step}\n")
