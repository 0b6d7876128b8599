"""``python -m bot``: run the Slack app until SIGTERM or SIGINT, then shut down in order.

Exit status: 0 after a signal (at any moment, start-up included), 2 when start-up fails.
A start-up failure is one line on stderr per problem naming what to fix (every bad setting
at once), and nothing else: no traceback, no shutdown chatter. ``--check`` checks the
installation and starts nothing (:mod:`bot.process.check`); ``--forget-user UXXXX`` deletes one
person's ended runs and starts nothing (:mod:`bot.process.forget`); ``--help`` prints the usage.

First thing, the process makes itself not dumpable, so the tool servers it starts cannot
read its secrets through ``/proc``; once started as root, it warns that they could
(:mod:`agent_core.process.isolation`).

The settings are read before the rest of the app is imported (a second or so of SDKs and
drivers), so a settings mistake is answered at once.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

import structlog

from agent_core import (
    ConfigError,
    configure_logging,
    configure_tracing,
    make_undumpable,
    warn_if_root,
)
from bot.config.settings import Settings, load_settings
from bot.config.unknown_settings import UnknownSetting, unknown_settings
from bot.errors import SlackUnreachable

if TYPE_CHECKING:
    from bot.process.app import ThreadpilotApp

log = structlog.get_logger("bot")

START_DRAIN_S = 5.0
"""How long a start-up interrupted by a signal may take to unwind once cancelled."""


USAGE = """\
Runs threadpilot, the Slack app: an LLM agent in a Slack thread with Stop and Abort.

Settings come from the environment and from .env in the working directory
(cp .env.example .env, then fill it in; every setting is described there). Socket Mode
when SLACK_APP_TOKEN is set (as the shipped manifest.yml expects), otherwise HTTP on
PORT (POST /slack/events). Both serve GET /healthz, GET /readyz and GET /metrics on
PORT; with METRICS_PORT set, /metrics moves to METRICS_HOST:METRICS_PORT, which serves
/healthz and /readyz too (PORT keeps those two). SIGTERM or SIGINT shuts down in order.

exit status: 0 after a signal, 2 when start-up (or --check, --forget-user) fails"""


def main(argv: list[str] | None = None) -> int:
    # First thing: the tool servers it will start must not read its secrets from /proc.
    make_undumpable()
    args = _parser().parse_args(argv)
    if args.check:
        # Each check reports what it found in its own line: log lines would only repeat it.
        configure_logging("console", "CRITICAL")
        from bot.process.check import run_checks  # only this mode needs it (and its imports)

        return asyncio.run(run_checks())
    unknown = unknown_settings()
    try:
        settings = load_settings()
    except ConfigError as exc:
        return _failed("\n".join([*map(str, unknown), str(exc)]))
    configure_logging(settings.LOG_FORMAT, settings.LOG_LEVEL)
    if args.forget_user is not None:
        from bot.process.forget import forget_user

        return asyncio.run(forget_user(settings, args.forget_user, team=args.team))
    try:
        traced = configure_tracing()  # the OTEL_* settings, read by the SDK itself
    except ConfigError as exc:
        return _failed(str(exc))
    if traced:
        log.info("traces.exporting")
    _warn_unknown(unknown)
    for name, use in settings.deprecated.items():
        log.warning("settings.deprecated", name=name, use_instead=use)
    return asyncio.run(serve(settings))


def _parser() -> argparse.ArgumentParser:
    """The command line: ``--check``, ``--forget-user`` (with ``--team``), ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m bot",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the settings, the database, the Slack tokens, the model endpoint and "
        "each MCP server, one line each on stdout; start nothing, write nothing",
    )
    parser.add_argument(
        "--forget-user",
        metavar="USER_ID",
        help="delete the ended runs this Slack user started, and what they wrote in other "
        "runs, from the database; start nothing",
    )
    parser.add_argument(
        "--team",
        metavar="TEAM_ID",
        help="with --forget-user: only in this workspace (Slack team id); without it, "
        "in every workspace",
    )
    return parser


def _warn_unknown(unknown: list[UnknownSetting]) -> None:
    for name in unknown:
        log.warning(
            "settings.unknown_name_ignored",
            name=name.name,
            source=name.source,
            did_you_mean=name.nearest,
        )


async def serve(settings: Settings) -> int:
    # The app, its SDKs and drivers: imported once the settings are known to be good.
    from bot.process.app import ThreadpilotApp
    from bot.process.heap import freeze_start_up_heap
    from bot.process.http_guard import raised_at

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before start-up, which can wait on Slack or the database: a signal must end it too.
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    app = ThreadpilotApp(settings)
    try:
        started = await _start_unless_stopped(app, stopping)
    except (ConfigError, SlackUnreachable) as exc:
        await app.shutdown()
        return _failed(str(exc))
    except Exception as exc:  # a start-up bug still ends in one line, and status 2
        await app.shutdown()
        return _failed(f"start-up failed: {type(exc).__name__}: {exc} (at {raised_at(exc)})")
    if started:
        warn_if_root()  # once started: a start-up that fails says only what to fix
        log.debug("app.heap_frozen", objects=freeze_start_up_heap())
        await stopping.wait()
    else:
        log.info("app.start_interrupted")
    await app.shutdown()
    return 0


async def _start_unless_stopped(app: ThreadpilotApp, stopping: asyncio.Event) -> bool:
    """Start the app; False if a signal came first (start-up is then cancelled)."""
    start = asyncio.create_task(app.start(), name="app.start")
    signalled = asyncio.create_task(stopping.wait(), name="app.start.signal")
    try:
        await asyncio.wait({start, signalled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
    if start.done():
        start.result()  # raises start-up's error
        return True
    start.cancel()
    # Let it unwind (bounded); its CancelledError is ours, so not re-raised here, and an
    # error it met on the way out no longer matters.
    done, _ = await asyncio.wait({start}, timeout=START_DRAIN_S)
    if start in done and not start.cancelled():
        start.exception()
    return False


def _failed(problem: str) -> int:
    for line in problem.splitlines():
        print(f"threadpilot: {line}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
