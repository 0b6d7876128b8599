"""What every benchmark does first: quiet, realistic logging and a bounded event loop.

Logs stay on at INFO, as in production (formatting them is part of the cost of a click or
an abort), but go to /dev/null so the table is readable and a terminal's speed does not
colour the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from agent_core import configure_logging

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from typing import Any

__all__ = ["NOT_RUN", "bench_main", "parser"]

NOT_RUN = 3
"""Exit status of a benchmark that could not run here (a missing extra or service)."""


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--log-level",
        default="INFO",
        help="level of the app's logs, which go to /dev/null (default INFO, as in production)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=110.0,
        help="give up (and fail) after this many seconds (default 110)",
    )
    return p


def bench_main(args: argparse.Namespace, main: Callable[[], Coroutine[Any, Any, bool]]) -> None:
    """Run ``main`` under a deadline; exit 0 when every target passed, 1 otherwise."""
    sink = open(os.environ.get("BENCH_LOG", os.devnull), "w")  # open for the life of the process
    configure_logging("console", args.log_level, stream=sink)

    expired = False

    async def bounded() -> bool:
        nonlocal expired
        deadline = asyncio.timeout(args.time_limit)
        try:
            async with deadline:
                return await main()
        finally:
            expired = deadline.expired()

    try:
        passed = asyncio.run(bounded())
    except TimeoutError:
        if not expired:
            raise  # a wait inside the benchmark gave up: its message says which
        print(f"benchmark gave up after {args.time_limit:g}s", file=sys.stderr)
        sys.exit(2)
    sys.exit(0 if passed else 1)
