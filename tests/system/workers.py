"""Real ``python -m bot`` worker processes on one database, for the system tests.

A :class:`Cluster` starts N workers in HTTP mode, each with its own free ``PORT`` and
``WORKER_ID``, all pointed at the test's :class:`FakeSlack` (``SLACK_API_URL``) and at
llmock (``OPENAI_BASE_URL``), sharing one ``DATABASE_URL``. Each runs in ``tmp_path`` (so
no ``.env`` is read) with a minimal environment, and writes its JSON log (stdout and
stderr) to ``tmp_path/<name>.log``, kept across restarts, for debugging and for tests
that need to know what a worker did (:meth:`WorkerProcess.wait_log`).

Waiting is done by bounded re-checks of an outside condition (:func:`until`): an HTTP
endpoint, a database row, a log line. Slack-side conditions use the fake's own
event-driven ``wait_until``. Nothing sleeps to give something time to happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from tests.bot.harness import SECRET, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.blocks import revision_text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

__all__ = [
    "LEASE_TTL_S",
    "Cluster",
    "WorkerDied",
    "WorkerProcess",
    "free_port",
    "kill_leftovers",
    "log_time",
    "until",
    "until_async",
]

REPO = Path(__file__).resolve().parents[2]
LEASE_TTL_S = 3.0
STOP_POLL_S = 0.25
READY_S = 30.0
"""Start-up on this 2-core machine takes 1-2 s (imports); a slow CI runner gets slack."""
STOP_S = 20.0
"""SIGTERM -> exit target (docs/operations.md); past it the worker is SIGKILLed."""
WAIT_S = 20.0
RECHECK_S = 0.05

_T = TypeVar("_T")


STARTED_PIDS: set[int] = set()
"""Every worker process started in this session, for :func:`kill_leftovers`."""


def kill_leftovers() -> list[int]:
    """SIGKILL any worker still alive (a teardown that did not finish); their pids."""
    killed = []
    for pid in sorted(STARTED_PIDS):
        try:
            exited, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # already reaped: gone
        if exited == 0:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            with contextlib.suppress(ChildProcessError):  # asyncio's watcher may reap it
                os.waitpid(pid, 0)
    STARTED_PIDS.clear()
    return killed


class WorkerDied(AssertionError):
    """A worker exited while the test was waiting on it; carries its log's tail."""


async def until(
    check: Callable[[], _T | None],
    *,
    what: str,
    timeout: float = WAIT_S,  # noqa: ASYNC109 - a bounded wait is this helper's job
    every: float = RECHECK_S,
) -> _T:
    """Re-check ``check`` every ``every`` seconds until it returns something truthy.

    For conditions outside this process that cannot notify the test: a worker's HTTP
    endpoint, a log file, llmock's journal. Raises ``TimeoutError`` naming ``what``.
    """

    async def checked() -> _T | None:
        return check()

    return await until_async(checked, what=what, timeout=timeout, every=every)


async def until_async(
    check: Callable[[], Awaitable[_T | None]],
    *,
    what: str,
    timeout: float = WAIT_S,  # noqa: ASYNC109
    every: float = RECHECK_S,
) -> _T:
    """:func:`until` for a check that awaits (a database read, an HTTP request)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if loop.time() >= deadline:
            raise TimeoutError(f"gave up after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_time(record: Mapping[str, Any]) -> datetime:
    """When a worker wrote a log record (structlog's ISO timestamp, UTC)."""
    return datetime.fromisoformat(str(record["timestamp"]))


@dataclass
class WorkerProcess:
    """One ``python -m bot`` process; :meth:`restart` brings it back with the same id."""

    name: str
    env: dict[str, str]
    cwd: Path
    http: aiohttp.ClientSession
    process: asyncio.subprocess.Process | None = None
    starts: int = 0
    user: tuple[int, int] | None = None
    """Run as this (uid, gid), without supplementary groups; None: as the test runs."""

    @property
    def port(self) -> int:
        return int(self.env["PORT"])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.cwd / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        assert not self.running, f"{self.name} is already running"
        with self.log_path.open("ab") as log:
            log.write(f"--- start #{self.starts + 1} of {self.name}\n".encode())
            log.flush()
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot",
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                user=None if self.user is None else self.user[0],
                group=None if self.user is None else self.user[1],
                extra_groups=None if self.user is None else [],
            )
        STARTED_PIDS.add(self.process.pid)
        self.starts += 1

    async def wait_ready(self, timeout: float = READY_S) -> None:  # noqa: ASYNC109
        async def ready() -> bool:
            self._check_alive("starting")
            try:
                async with self.http.get(f"{self.url}/readyz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await until_async(ready, what=f"{self.name} to be ready", timeout=timeout)

    async def kill(self, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` and wait (bounded) for the process to exit; its exit status."""
        process = self.process
        assert process is not None and process.returncode is None, f"{self.name} not running"
        process.send_signal(sig)
        async with asyncio.timeout(STOP_S):
            return await process.wait()

    async def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it is not gone within STOP_S. None if not running."""
        process = self.process
        if process is None or process.returncode is not None:
            return None if process is None else process.returncode
        process.terminate()
        try:
            async with asyncio.timeout(STOP_S):
                return await process.wait()
        except TimeoutError:
            process.kill()
            return await process.wait()

    async def restart(self, **settings: str) -> None:
        """Stop (if running), apply ``settings``, start again and wait until ready."""
        await self.stop()
        self.env.update(settings)
        await self.start()
        await self.wait_ready()

    def _check_alive(self, doing: str) -> None:
        if self.process is not None and self.process.returncode is not None:
            raise WorkerDied(
                f"{self.name} exited with {self.process.returncode} while {doing}; "
                f"log tail:\n{self.log_tail()}"
            )

    # -- requests, as Slack sends them -------------------------------------------------

    async def post(self, request: slack_requests.SignedRequest) -> int:
        async with self.http.post(
            f"{self.url}/slack/events", data=request.body, headers=request.headers
        ) as response:
            await response.read()
            return response.status

    async def event(self, envelope: Json) -> int:
        return await self.post(slack_requests.event_request(envelope, SECRET))

    async def click(self, message: Message, action_id: str, *, user: str = DEFAULT_USER) -> int:
        """Press a button this message shows (as rendered now, in the fake)."""
        payload = slack_requests.click_button(message, action_id, user=user)
        return await self.click_payload(payload)

    async def click_payload(self, payload: Json) -> int:
        return await self.post(slack_requests.interaction_request(payload, SECRET))

    # -- the log -----------------------------------------------------------------------

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON record this worker logged, over all its starts, in order."""
        if not self.log_path.exists():
            return []
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by SIGKILL
        return records

    def logged(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        return [
            r
            for r in self.logs()
            if r.get("event") == event and all(r.get(k) == v for k, v in fields.items())
        ]

    async def wait_log(
        self,
        event: str,
        *,
        timeout: float = WAIT_S,  # noqa: ASYNC109
        count: int = 1,
        **fields: Any,
    ) -> dict[str, Any]:
        """The ``count``-th record of ``event`` (with ``fields``), once it is logged."""

        def found() -> dict[str, Any] | None:
            hits = self.logged(event, **fields)
            return hits[count - 1] if len(hits) >= count else None

        return await until(found, what=f"{self.name} to log {event} {fields}", timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Cluster:
    """Worker processes sharing one database, one fake Slack and one llmock."""

    slack: FakeSlack
    model_url: str
    database_url: str
    cwd: Path
    http: aiohttp.ClientSession
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    busy_loop_lag_ms: str = "0"
    """Off in the tests: they send each mention to the worker that must run it, and a
    worker starting on a CI machine shared with other jobs may find its loop late for a
    moment and queue the run for the other (tests/bot/observe/test_loop_load.py tests it). The
    benchmarks give the app's default."""

    def settings(self, name: str, **overrides: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            "SLACK_BOT_TOKEN": "xoxb-test-token",
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.slack.api_url,
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": self.model_url,
            "OPENAI_MODEL": "test-model",
            "DATABASE_URL": self.database_url,
            "PORT": str(free_port()),
            "WORKER_ID": name,
            "LEASE_TTL": str(LEASE_TTL_S),
            "STOP_POLL_INTERVAL": str(STOP_POLL_S),
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "INFO",
            "BUSY_LOOP_LAG_MS": self.busy_loop_lag_ms,
            # Off: the tests' and benchmarks' mentions all come from one person.
            "MAX_RUNS_PER_USER": "0",
            **overrides,
        }

    async def start(self, *names: str, **settings: str) -> list[WorkerProcess]:
        """Start workers (together) and wait until every one is ready."""
        started = []
        for name in names:
            assert name not in self.workers, f"worker {name} exists; use restart()"
            worker = WorkerProcess(name, self.settings(name, **settings), self.cwd, self.http)
            self.workers[name] = worker
            started.append(worker)
        await asyncio.gather(*(w.start() for w in started))
        await asyncio.gather(*(w.wait_ready() for w in started))
        return started

    async def close(self) -> None:
        """End every worker: SIGTERM, SIGKILL whatever is left after STOP_S."""
        results = await asyncio.gather(
            *(w.stop() for w in self.workers.values()), return_exceptions=True
        )
        for worker, result in zip(self.workers.values(), results, strict=True):
            if isinstance(result, BaseException) and worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()

    # -- Slack-side helpers ------------------------------------------------------------

    async def mention(self, worker: WorkerProcess, text: str) -> tuple[str, Message]:
        """@mention the app through ``worker``; the thread ts and the status message."""
        envelope = slack_requests.app_mention(f"<@{self.slack.workspace.bot_user_id}> {text}")
        event = envelope["event"]
        self.slack.seed_message(event["channel"], event["text"], user=event["user"], ts=event["ts"])
        assert await worker.event(envelope) == 200
        return event["ts"], await self.status_message(event["channel"], event["ts"])

    async def status_message(self, channel: str, thread_ts: str) -> Message:
        def find(slack: FakeSlack) -> Message | None:
            for message in slack.thread(channel, thread_ts):
                if message.is_bot and message.stream is None and message.ts != thread_ts:
                    return message
            return None

        found = await self.slack.wait_until(find, timeout=WAIT_S)
        assert found is not None
        return found

    async def until_message(
        self,
        message: Message,
        predicate: Callable[[Message], bool],
        timeout: float = WAIT_S,  # noqa: ASYNC109
    ) -> Message:
        """The stored version of ``message``, once ``predicate`` holds for it."""

        def check(slack: FakeSlack) -> Message | None:
            current = slack.message(message.channel, message.ts)
            return current if predicate(current) else None

        found = await self.slack.wait_until(check, timeout=timeout)
        assert found is not None
        return found

    async def final(self, message: Message, timeout: float = WAIT_S) -> Message:  # noqa: ASYNC109
        return await self.until_message(message, is_final, timeout)

    def current(self, message: Message) -> Message:
        return self.slack.message(message.channel, message.ts)

    async def revision_saying(
        self,
        message: Message,
        text: str,
        timeout: float = WAIT_S,  # noqa: ASYNC109
    ) -> float:
        """When (test-process ``time.monotonic()``) the fake first stored a version of
        ``message`` whose blocks say ``text``; waits for one."""

        def check(slack: FakeSlack) -> float | None:
            for revision in slack.message(message.channel, message.ts).history:
                if text in revision_text(revision):
                    return revision.at
            return None

        at = await self.slack.wait_until(check, timeout=timeout)
        assert at is not None
        return at
