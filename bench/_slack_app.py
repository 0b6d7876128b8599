"""The real Slack app under load: ThreadpilotApp + the local fake Slack + llmock.

Wired as ``tests/bot/conftest.py`` wires it: the app listens on a loopback port, its Web
API calls go to :class:`FakeSlack` (same process, same event loop), its model calls go
to llmock (wherever the benchmark started it) through the real :class:`OpenAIChatModel`.
The one addition is :class:`StreamWatch`, a pass-through wrapper around that model which
tells the benchmark which runs are streaming right now; the app is given the wrapped
model through ``ThreadpilotApp(model=...)``, which is otherwise what it would build.

Two Slack details shape the set-up (both are the app's behaviour under Slack's limits,
not shortcuts): every run gets a channel of its own, because ``chat.postMessage`` is
budgeted at about one a second per channel; and the fake answers
``agents.sessions.setStatus`` with ``unknown_method``, because at Tier 3 (about 40 calls a
minute after a burst of 7) opening 200 agent sessions in one workspace would take 4 minutes.
The first run starts alone, so its refusal switches the feature off before the others
queue for it. Chat streaming stays on: its Tier 2 budget makes most runs wait for
``chat.startStream``, and meanwhile their answer is rendered into the status message.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import aiohttp

from agent_core import HTTPChatModel, StopReason, ThreadKey, current_run
from bench._llmock import openai_model
from bot.config.settings import Settings
from bot.process.app import ThreadpilotApp
from bot.process.heap import freeze_start_up_heap
from bot.views.status import ACTION_ABORT, ACTION_STOP
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import DEFAULT_USER, DEFAULT_WORKSPACE
from tests.fakes.waiting import Changes

if TYPE_CHECKING:
    from agent_core import Run
    from agent_core.ports import TextSink
    from agent_core.values.chat import ModelRequest, ModelResponse
    from bot.handlers.context import BotContext
    from bot.runs.supervisor import LiveRun

__all__ = [
    "ACTION_ABORT",
    "ACTION_STOP",
    "SECRET",
    "LoadedApp",
    "StreamWatch",
    "Target",
    "Transport",
    "app_settings",
    "mention_envelope",
]

Transport = Literal["http", "socket"]
SECRET = "bench-signing-secret"
DATABASE_FILE = "threadpilot.db"


class StreamWatch:
    """A pass-through ChatModel that records which runs are mid-stream (first text seen,
    turn not yet over). ``changes`` wakes waiters whenever that set changes; ``chunks``
    counts the text chunks the model delivered, all runs together; ``cancelled_at`` is
    when each run's model call returned cancelled (an Abort): the model closes its
    connection before it returns, so this bounds the close from above."""

    def __init__(self, inner: HTTPChatModel) -> None:
        self.inner = inner
        self.streaming: set[str] = set()
        self.changes = Changes()
        self.chunks = 0
        self.cancelled_at: dict[str, float] = {}

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        run_id = current_run().id
        seen = False

        def text(chunk: str) -> None:
            nonlocal seen
            self.chunks += 1
            if not seen:
                seen = True
                self.streaming.add(run_id)
                self.changes.notify()
            on_text(chunk)

        try:
            return await self.inner.complete(request, text)
        except asyncio.CancelledError:
            self.cancelled_at[run_id] = time.monotonic()
            raise
        finally:
            if seen:
                self.streaming.discard(run_id)
                self.changes.notify()


def app_settings(
    api_url: str,
    llm_url: str,
    files_dir: str,
    *,
    socket_mode: bool,
    max_live_runs: int | None = None,
) -> Settings:
    """The app's settings, as ``tests/bot/conftest.py`` makes them (plus Socket Mode, and
    ``MAX_LIVE_RUNS`` for a benchmark that holds more runs than its default)."""
    values: dict[str, Any] = {
        "SLACK_BOT_TOKEN": "xoxb-bench-token",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": api_url,
        "OPENAI_API_KEY": "bench-key",
        "OPENAI_BASE_URL": llm_url,
        "OPENAI_MODEL": "bench-model",
        "DATABASE_URL": f"sqlite:///{files_dir}/{DATABASE_FILE}",
        # Off: every benchmark mention comes from one person, standing in for many.
        "MAX_RUNS_PER_USER": 0,
    }
    if socket_mode:
        values |= {"SLACK_APP_TOKEN": "xapp-bench-token", "SLACK_SIGNING_SECRET": ""}
    if max_live_runs is not None:
        values["MAX_LIVE_RUNS"] = max_live_runs
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def mention_envelope(index: int, channel: str | None = None) -> tuple[dict[str, Any], ThreadKey]:
    """An @mention (by default in a channel of its own: see the module doc), and the run's
    thread."""
    channel = channel or f"CBENCH{index:05d}"
    envelope = slack_requests.app_mention(f"bench task {index}", channel=channel)
    return envelope, ThreadKey(DEFAULT_WORKSPACE.team_id, channel, envelope["event"]["ts"])


@dataclass(frozen=True)
class Target:
    """What a click needs: the run and its status message."""

    run_id: str
    task: str
    channel: str
    status_ts: str


class LoadedApp:
    """One ThreadpilotApp (HTTP or Socket Mode) with runs kept streaming from llmock."""

    def __init__(
        self,
        llm_base_url: str,
        transport: Transport,
        *,
        slack: FakeSlack | None = None,
        agent_sessions: bool = False,
    ) -> None:
        """``slack``: a fake of one's own (e.g. with rate limits on); ``agent_sessions``:
        keep ``agents.sessions.setStatus`` (see the module doc for why it is off)."""
        self.llm_base_url = llm_base_url
        self.transport = transport
        self.slack = slack or FakeSlack()
        self.agent_sessions = agent_sessions
        self.watch = StreamWatch(openai_model(llm_base_url))
        self.app: ThreadpilotApp | None = None
        self.http: aiohttp.ClientSession | None = None
        self._files = tempfile.TemporaryDirectory(prefix="threadpilot-bench-")
        self._mentions = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.slack.start()
        if not self.agent_sessions:
            self.slack.make_unknown("agents.sessions.setStatus")
        settings = app_settings(
            self.slack.api_url,
            self.llm_base_url,
            self._files.name,
            socket_mode=self.transport == "socket",
        )
        self.app = ThreadpilotApp(
            settings, model=self.watch, listen_port=0, listen_host="127.0.0.1"
        )
        self.http = aiohttp.ClientSession()
        await self.app.start()
        freeze_start_up_heap()  # as python -m bot does once started
        if self.transport == "socket":
            await self.slack.socket.wait_connected()

    async def close(self) -> None:
        # Not measured: a short budget, so 200 runs waiting on Slack's limits end quickly.
        if self.app is not None:
            await self.app.shutdown(timeout_s=3.0)
        await self.watch.inner.aclose()
        if self.http is not None:
            await self.http.close()
        await self.slack.close()
        self._files.cleanup()

    # -- runs --------------------------------------------------------------------------

    async def fill(self, n: int, timeout_s: float = 60.0) -> None:
        """Start runs until ``n`` are streaming (the first alone: see the module doc)."""
        first = await self.mention()
        await self.wait_streaming_thread(first)
        for _ in range(n - len(self.watch.streaming)):
            await self.mention()
        await self.watch.changes.until(
            lambda: len(self.watch.streaming) >= n or None,
            timeout=timeout_s,
            describe=lambda: f"{len(self.watch.streaming)} of {n} runs streaming",
        )

    async def mention(self, channel: str | None = None) -> ThreadKey:
        """@mention the app in ``channel`` (default: a fresh one); returns the thread the
        run will have."""
        self._mentions += 1
        envelope, thread = mention_envelope(self._mentions, channel)
        event = envelope["event"]
        self.slack.seed_message(thread.channel, event["text"], user=DEFAULT_USER, ts=event["ts"])
        if self.transport == "socket":
            await self.slack.socket.send_envelope("events_api", envelope)
        else:
            request = slack_requests.event_request(envelope, SECRET)
            assert self.http is not None
            async with self.http.post(
                self.events_url, data=request.body, headers=request.headers
            ) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"mention refused: HTTP {response.status}")
        return thread

    async def wait_streaming_thread(self, thread: ThreadKey, timeout_s: float = 30.0) -> Target:
        """The run started in ``thread``, once it is streaming."""

        def streaming() -> Target | None:
            live = self.ctx.supervisor.live_in_thread(thread)
            if live is None or live.run.id not in self.watch.streaming:
                return None
            return self.target(live)

        return await self.watch.changes.until(
            streaming, timeout=timeout_s, describe=lambda: f"no streaming run in {thread}"
        )

    def streaming_targets(self) -> list[Target]:
        lives = (self.ctx.supervisor.get(run_id) for run_id in list(self.watch.streaming))
        return [self.target(live) for live in lives if live is not None]

    def target(self, live: LiveRun) -> Target:
        assert live.session.status_ts is not None
        return Target(live.run.id, live.run.task, live.session.channel, live.session.status_ts)

    async def uncommitted(self, clicks: list[tuple[str, StopReason]]) -> int:
        """How many ``(run id, kind)`` clicks have no stop request in the database.

        The rule: a stop request is committed before the click is acknowledged.
        The handler awaits the commit before it acks, and a commit it gives up on is
        rolled back, so a click whose row is missing afterwards was acked uncommitted.
        Read with a connection of our own, in a thread: through the app's store each
        query would queue behind the app's own writes, which is what is being measured.
        """
        stored = await asyncio.to_thread(_stop_rows, self.database_path)
        return sum((run_id, kind.value) not in stored for run_id, kind in clicks)

    def run(self, run_id: str) -> Run | None:
        live = self.ctx.supervisor.get(run_id)
        return live.run if live is not None else None

    # -- clicks ------------------------------------------------------------------------

    def click_payload(self, target: Target, action_id: str) -> dict[str, Any]:
        """A block_actions payload for a button the app actually shows on the message."""
        message = self.slack.message(target.channel, target.status_ts)
        response_url = self.slack.new_response_url(target.channel, target.status_ts)
        return slack_requests.click_button(
            message, action_id, user=DEFAULT_USER, response_url=response_url
        )

    async def click_http(self, payload: dict[str, Any]) -> float:
        """POST a signed click; seconds from sending it to the app's HTTP response."""
        request = slack_requests.interaction_request(payload, SECRET)
        assert self.http is not None
        t0 = time.monotonic()
        async with self.http.post(
            self.events_url, data=request.body, headers=request.headers
        ) as response:
            await response.read()
        elapsed = time.monotonic() - t0
        if response.status != 200:
            raise RuntimeError(f"click refused: HTTP {response.status}")
        return elapsed

    async def click_socket(self, payload: dict[str, Any]) -> float:
        """Push an ``interactive`` envelope; seconds from sending it to the app's ack."""
        envelope_id = await self.slack.socket.send_envelope("interactive", payload)
        ack = await self.slack.socket.wait_for_ack(envelope_id, timeout=30.0)
        return ack.latency

    # -- plumbing ----------------------------------------------------------------------

    @property
    def ctx(self) -> BotContext:
        assert self.app is not None and self.app.ctx is not None
        return self.app.ctx

    @property
    def database_path(self) -> str:
        return f"{self._files.name}/{DATABASE_FILE}"

    @property
    def events_url(self) -> str:
        assert self.app is not None
        return f"http://127.0.0.1:{self.app.port}/slack/events"


def _stop_rows(path: str) -> set[tuple[str, str]]:
    """Every ``(run_id, kind)`` in the ``stop_requests`` table."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {(str(r), str(k)) for r, k in db.execute("SELECT run_id, kind FROM stop_requests")}
