"""``python -m bot``: run the Slack app until SIGTERM or SIGINT, then shut down in order."""

from __future__ import annotations

import asyncio
import signal
import sys

import structlog

from agent_core import ConfigError, configure_logging
from bot.app import ThreadpilotApp
from bot.settings import Settings, load_settings

log = structlog.get_logger("bot")


def main() -> int:
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"threadpilot: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.LOG_FORMAT, settings.LOG_LEVEL)
    return asyncio.run(serve(settings))


async def serve(settings: Settings) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    app = ThreadpilotApp(settings)
    try:
        await app.start()
    except ConfigError as exc:
        print(f"threadpilot: {exc}", file=sys.stderr)
        await app.shutdown()
        return 2
    await stopping.wait()
    await app.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
