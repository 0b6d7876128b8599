"""Clicks sent and timed from a process of their own.

A benchmark that also runs the fake Slack on its event loop (``queue_share``: every
worker's Slack calls for 1,000 runs) cannot time a click on that loop: the response
waits there for its turn, and the figure would be the fake's load, not the worker's. The
real Slack is not on the clicker's machine either. So :class:`Clicker` hands each signed
request to a child process (``python -m bench._clicker``) whose event loop does nothing
else; it sends the POST, reads the response and says how long that took, by its own
clock. The benchmark's loop only decides when to click.

Protocol (one JSON object per line): in ``{"id", "url", "body", "headers"}``, out
``{"id", "ms", "status"}`` (status 0 when the request failed).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from tests.fakes.slack_requests import SignedRequest

__all__ = ["Clicker"]


class Clicker:
    """The child process, and the clicks waiting for its answer."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._waiting: dict[int, asyncio.Future[tuple[float, int]]] = {}
        self._next = 0
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Clicker:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench._clicker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.close()
        await self._proc.wait()
        if self._reader is not None:
            await self._reader

    async def post(self, url: str, request: SignedRequest) -> tuple[float, int]:
        """(ms from sending to the response, HTTP status; 0 if it failed)."""
        assert self._proc is not None and self._proc.stdin is not None
        self._next += 1
        answer = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = answer
        line = {"id": self._next, "url": url, "body": request.text, "headers": request.headers}
        self._proc.stdin.write(json.dumps(line).encode() + b"\n")
        await self._proc.stdin.drain()
        took, status = await answer
        return took, status

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            got = json.loads(line)
            answer = self._waiting.pop(got["id"], None)
            if answer is not None and not answer.done():
                answer.set_result((got["ms"], got["status"]))
        for answer in self._waiting.values():  # the child went: nothing more will come
            if not answer.done():
                answer.set_result((float("nan"), 0))


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout
    pending: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def click(ask: dict[str, Any]) -> None:
            started = time.monotonic()
            try:
                async with http.post(
                    ask["url"], data=ask["body"].encode(), headers=ask["headers"]
                ) as response:
                    await response.read()
                    status = response.status
            except aiohttp.ClientError:
                status = 0
            took = (time.monotonic() - started) * 1000
            out.write(json.dumps({"id": ask["id"], "ms": took, "status": status}) + "\n")
            out.flush()

        while line := await reader.readline():
            task = asyncio.create_task(click(json.loads(line)))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)


if __name__ == "__main__":
    asyncio.run(_serve())
