"""The fake Slack in a process of its own: ``python -m bench._fake_slack_serve``.

For the memory benchmark, whose figures must not count the fake's records of every call.
Prints the Web API base URL on the first line of stdout and serves until stdin closes.
``--unknown METHOD`` (repeatable) makes a method answer ``unknown_method``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from tests.fakes.slack_api import FakeSlack


async def serve(unknown: list[str]) -> None:
    async with FakeSlack() as slack:
        for method in unknown:
            slack.make_unknown(method)
        print(slack.api_url, flush=True)
        await asyncio.to_thread(sys.stdin.read)  # until the benchmark closes our stdin


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--unknown", action="append", default=[])
    asyncio.run(serve(p.parse_args().unknown))


if __name__ == "__main__":
    main()
