"""Runs the Slack app: start-up, the transports, health endpoints, and orderly shutdown.
The parts that take work are built by :mod:`bot.process.assembly`, the Bolt app by
:mod:`bot.process.bolt_app`.

Transports (docs/slack-setup.md): Socket Mode when ``SLACK_APP_TOKEN`` is set, otherwise
HTTP on ``PORT`` at ``POST /slack/events`` (signature and shape checked by
:mod:`bot.process.http_guard` before Bolt sees a byte, and the signature again by Bolt). Both
serve ``GET /healthz`` (the process is up), ``GET /readyz`` (503 while starting,
shutting down, or, in Socket Mode, disconnected) and ``GET /metrics`` (:mod:`bot.observe.metrics`)
on ``PORT``; with ``METRICS_PORT`` set, the three are served on ``METRICS_HOST`` and that
port too, and ``/metrics`` no longer on ``PORT`` (docs/admin.md, What to expose).

Start-up checks what the app depends on, quickest first, each step bounded in time:
``PORT`` and ``METRICS_PORT`` (bound first, so ``/healthz`` answers during the rest), the
bot token and ``SLACK_API_URL`` (``auth.test``), in Socket Mode the app-level token (the first
``apps.connections.open``), then ``DATABASE_URL`` (connect and migrate). A step that
fails raises :class:`ConfigError` naming the setting, before anything else is logged;
Slack out of reach at its default address is :class:`~bot.errors.SlackUnreachable`
instead, since no setting is at fault.

Every Web API client this process makes uses ``SLACK_API_URL`` (Bolt's, the Socket Mode
handler's, the budgets'): they are all the one :class:`AsyncWebClient` built here.
``auth.test`` is asked once, at start-up: its answer (:class:`~bot.slack_api.identity.AppIdentity`)
also authorizes Bolt's requests, which would otherwise ask again, once for every request
that arrives before its first answer.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING

import aiohttp
import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import (
    BUILTIN_TOOLS,
    ConfigError,
    HTTPChatModel,
    StorageError,
    build_model,
    flush_traces,
)
from agent_core.run.delegation import DELEGATE
from agent_core.stores.factory import open_store
from agent_core.tools.mcp import McpManager
from agent_core.values.redact import public_url
from bot.installs.oauth import INSTALL_PATH, REDIRECT_PATH, OAuthRoutes
from bot.installs.rotation import ROTATION, Rotation, RotationTiming
from bot.installs.setup import oauth_mode, token_rotation
from bot.observe.metrics import CONTENT_TYPE, Metrics
from bot.process.assembly import assemble
from bot.process.bolt_app import bolt_app
from bot.process.http_guard import Refusal, SlackRequestGuard
from bot.process.slack_silence import SILENCE_S, SlackSilence
from bot.process.start_up import (
    OAUTH_IDENTITY,
    TimedSocketMode,
    bind,
    slack_fault,
    socket_url,
    step,
    who_am_i,
)
from bot.runs.tools import SLACK_READ_THREAD

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

    from agent_core import ChatModel
    from agent_core.ports import Store
    from bot.approvals.clicks import ApprovalClicks
    from bot.config.settings import Settings
    from bot.dashboard.refresh import HomeRefresher
    from bot.handlers.context import BotContext
    from bot.handlers.late_admissions import LateAdmissions
    from bot.installs.lookup import InstallationLookup
    from bot.observe.loop_load import LoopLoad
    from bot.process.bolt_app import ListenerParts
    from bot.runs.supervisor import Supervisor
    from bot.runs.uninstall import Uninstaller
    from bot.slack_api.identity import AppIdentity
    from bot.slack_api.surface import Workspaces
    from bot.workers.worker import Worker

__all__ = ["SHUTDOWN_BUDGET_S", "ThreadpilotApp"]

log = structlog.get_logger("bot.process.app")

SHUTDOWN_BUDGET_S = 15.0
"""Everything after SIGTERM fits in this, well inside the 20 s target (docs/operations.md)."""

MCP_CLOSE_S = 5.0
"""Closing the MCP servers at shutdown: a stdio server that ignores its closed stdin is
SIGTERMed after 2 s. One still running past this ends on its own when we exit (its stdin
closes)."""

TRACE_FLUSH_S = 2.0
"""Sending the spans still buffered at shutdown, when traces are on; a receiver that is
down costs at most this."""


class ThreadpilotApp:
    """The Slack app of one process: :meth:`start` it, then :meth:`shutdown` it.

    ``metrics`` is this app's series, served at ``GET /metrics``; ``mcp`` the MCP servers
    of ``MCP_CONFIG``, started by :meth:`start` and closed by :meth:`shutdown` whatever
    happened in between; ``silence``, in HTTP mode, warns once if Slack sends nothing at
    all (:mod:`bot.process.slack_silence`). ``port`` is where ``PORT``'s listener is bound,
    ``metrics_port`` where ``METRICS_PORT``'s is (None without it).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        model: ChatModel | None = None,
        listen_port: int | None = None,
        listen_host: str = "0.0.0.0",
        silence_after_s: float = SILENCE_S,
        rotation: RotationTiming = ROTATION,
    ) -> None:
        """``rotation``: when OAuth mode refreshes tokens (tests shorten it)."""
        self.settings = settings
        self._rotation_timing = rotation
        self._rotation: Rotation | None = None
        self.silence = SlackSilence(silence_after_s)
        self._model = model
        self._listen = (listen_host, settings.PORT if listen_port is None else listen_port)
        self._ready = False
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._socket: TimedSocketMode | None = None
        self._owned_model: HTTPChatModel | None = None
        self._store: Store | None = None
        self._home: HomeRefresher | None = None
        self._late: LateAdmissions | None = None
        self._load: LoopLoad | None = None
        self._guard: SlackRequestGuard | None = None
        self._started = False
        self.metrics = Metrics(
            model_api=settings.MODEL_API.value, prices=settings.run_limits.budget.prices
        )
        self.mcp = _mcp_servers(settings, self.metrics)
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.ctx: BotContext | None = None
        # What shutdown closes of the context's parts, held once the context is built.
        self._supervisor: Supervisor | None = None
        self._clicks: ApprovalClicks | None = None
        self._worker: Worker | None = None
        self._workspaces: Workspaces | None = None
        self._uninstaller: Uninstaller | None = None
        """A workspace's uninstall (:mod:`bot.runs.uninstall`)."""
        self.bolt: AsyncApp | None = None
        self._installs: InstallationLookup | None = None
        """OAuth mode: the installations, cached (None with a bot token)."""
        self._oauth_routes: OAuthRoutes | None = None

    # -- start -------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the settings that can only be checked by using them, then take work.

        Raises :class:`ConfigError` naming the setting at fault; call :meth:`shutdown`
        afterwards either way (it releases whatever was opened, quietly if start failed).
        """
        settings = self.settings
        await self._listen_http()
        self._session = session = aiohttp.ClientSession()
        client = AsyncWebClient(
            token=settings.SLACK_BOT_TOKEN, base_url=settings.SLACK_API_URL, session=session
        )
        me, socket_url = await self._ask_slack(client)
        self._store = store = await self._open_database()
        if settings.oauth_mode:
            self._installs, self._oauth_routes = oauth_mode(
                self.settings, store, session, installed=self._reinstalled
            )
        await self._start_mcp()
        ctx, listeners = self._assemble(client, me, store)
        self.ctx = ctx
        await self._start_background(store, session)
        bolt, self._late = bolt_app(settings, client, ctx, listeners)
        self.bolt = bolt
        if socket_url is not None:
            await self._connect_socket(bolt, client, socket_url)
        self._ready = self._started = True
        if not settings.socket_mode:
            self.silence.start()
        self._say_ready(me)

    async def _ask_slack(self, client: AsyncWebClient) -> tuple[AppIdentity, str | None]:
        """Who this app is (``auth.test``) and, in Socket Mode, a connection URL: each
        proves its token works. In OAuth mode there is no token to ask with: each
        request is authorised from its installation (:mod:`bot.installs.lookup`)."""
        settings = self.settings
        unreachable = slack_fault(settings)
        at = public_url(settings.SLACK_API_URL)
        if settings.oauth_mode:
            me = OAUTH_IDENTITY
        else:
            me = await step(
                unreachable, f"Slack at {at} (auth.test)", who_am_i(client, unreachable)
            )
        if settings.SLACK_APP_TOKEN is None:
            return me, None
        url = await step(
            unreachable,
            f"Slack at {at} (apps.connections.open)",
            socket_url(client, settings.SLACK_APP_TOKEN, unreachable),
        )
        return me, url

    async def _open_database(self) -> Store:
        """``DATABASE_URL``, connected and migrated, within start-up's step time."""
        settings = self.settings
        return await step(
            partial(ConfigError, "DATABASE_URL"),
            "the database",
            _open_store(
                settings.DATABASE_URL, settings.DATABASE_POOL_SIZE, settings.MIGRATION_TIMEOUT
            ),
        )

    async def _start_mcp(self) -> None:
        """Start the MCP servers and count their tools in the metrics. A server that does
        not start is logged once and left out; the others serve."""
        await self.mcp.start()
        self.metrics.mcp_tools({t: s.name for s in self.mcp.status() for t in s.tools})

    async def _start_background(self, store: Store, session: aiohttp.ClientSession) -> None:
        """Start what runs beside the listeners: the worker, OAuth mode's token rotation,
        the Home refresher and the event loop's load sampler.

        Leases, the stop watcher and the reconciler run before we take any work: a run
        started here must be heartbeated, and a click landing elsewhere must reach it.
        """
        worker = self._worker
        assert worker is not None and self._home is not None
        await worker.start()
        if self._installs is not None:
            self._rotation = token_rotation(
                self.settings, self._installs, store, session, worker.id, self._rotation_timing
            )
            self._rotation.start()
        await self._home.start()
        if self._load is not None:
            self._load.start()

    def _say_ready(self, me: AppIdentity) -> None:
        """The one line saying the app takes work, and how it is reached."""
        settings = self.settings
        log.info(
            "app.ready",
            transport="socket_mode" if settings.socket_mode else "http",
            port=self.port,
            metrics_port=self.metrics_port,
            bot_user_id=me.user_id,
            api_url=public_url(settings.SLACK_API_URL),
            mcp_tools=len(self.mcp.tools),
        )

    def _assemble(
        self, client: AsyncWebClient, me: AppIdentity, store: Store
    ) -> tuple[BotContext, ListenerParts]:
        """Build the parts that take work (:mod:`bot.process.assembly`); hold those this
        app starts and closes itself."""
        model = self._model or self._own_model()
        parts = assemble(
            self.settings,
            client,
            me,
            store,
            model=model,
            tools=self.mcp.tools,
            metrics=self.metrics,
            installs=self._installs,
        )
        ctx, listeners = parts.ctx, parts.listeners
        self._load = parts.load
        self._home = listeners.home
        self._uninstaller = listeners.uninstaller
        # What shutdown closes of the context's parts, each in its turn.
        self._supervisor = ctx.supervisor
        self._clicks = ctx.approvals
        self._worker = ctx.worker
        self._workspaces = ctx.workspaces
        return ctx, listeners

    async def _connect_socket(self, bolt: AsyncApp, client: AsyncWebClient, url: str) -> None:
        """Open the Socket Mode connection, at the URL start-up already got (its token is
        known to work)."""
        token = self.settings.SLACK_APP_TOKEN
        assert token is not None
        self._socket = TimedSocketMode(
            bolt, token, url=url, web_client=client, metrics=self.metrics
        )
        await step(
            partial(ConfigError, "SLACK_APP_TOKEN"),
            "the Socket Mode connection",
            self._socket.connect_async(),  # type: ignore[no-untyped-call]
        )

    def _own_model(self) -> HTTPChatModel:
        """The adapter of ``MODEL_API``, closed by :meth:`shutdown`."""
        endpoint = self.settings.model_endpoint
        self._owned_model = build_model(
            endpoint.api,
            model=endpoint.model,
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            reply_timeout_s=self.settings.MODEL_REPLY_TIMEOUT,
            max_output_tokens=self.settings.run_limits.max_output_tokens,
        )
        return self._owned_model

    async def _listen_http(self) -> None:
        """Bind ``PORT``: ``/healthz``, ``/readyz``, ``/metrics`` unless ``METRICS_PORT``
        has it, and (HTTP mode) ``/slack/events``, which answers 503 until the app is
        ready. Then ``METRICS_PORT``, if set, with the first three."""
        settings = self.settings
        public = self._health_app(metrics=settings.METRICS_PORT is None)
        if not settings.socket_mode:
            assert settings.SLACK_SIGNING_SECRET  # settings require it in HTTP mode
            self._guard = SlackRequestGuard(settings.SLACK_SIGNING_SECRET)
            public.router.add_post("/slack/events", self._slack_events)
        if settings.oauth_mode:  # in both transports: the browser comes here, not Slack
            public.router.add_get(INSTALL_PATH, self._oauth_route)
            public.router.add_get(REDIRECT_PATH, self._oauth_route)
        self._runner, self.port = await bind(public, *self._listen, setting="PORT")
        if settings.METRICS_PORT is not None:
            self._metrics_runner, self.metrics_port = await bind(
                self._health_app(metrics=True),
                settings.METRICS_HOST,
                settings.METRICS_PORT,
                setting="METRICS_PORT",
            )

    def _health_app(self, *, metrics: bool) -> web.Application:
        web_app = web.Application()
        web_app.router.add_get("/healthz", self._healthz)
        web_app.router.add_get("/readyz", self._readyz)
        if metrics:
            web_app.router.add_get("/metrics", self._serve_metrics)
        return web_app

    async def _slack_events(self, request: web.Request) -> web.Response:
        received = time.perf_counter()
        assert self._guard is not None
        admitted = self._guard.admit(await request.read(), request.headers)
        if isinstance(admitted, Refusal):
            log.warning("slack_request.refused", status=admitted.status, reason=admitted.reason)
            return web.json_response({"error": admitted.reason}, status=admitted.status)
        self.silence.heard()
        if not self._ready or self.bolt is None:
            return web.json_response({"error": "not ready"}, status=503)
        acked = await self.bolt.async_dispatch(admitted)
        self.metrics.acked(admitted.body, received)
        return await to_aiohttp_response(acked)

    async def _oauth_route(self, request: web.Request) -> web.Response:
        routes = self._oauth_routes
        if not self._ready or routes is None:
            return web.Response(text="starting, try again in a moment", status=503)
        if request.path == INSTALL_PATH:
            return await routes.install(request)
        return await routes.redirect(request)

    def _reinstalled(self, team: str) -> None:
        """A workspace installed the app (again): its payloads are served again here."""
        if self._uninstaller is not None:
            self._uninstaller.reinstalled(team)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def _readyz(self, request: web.Request) -> web.Response:
        ready = self._ready
        if ready and self._socket is not None:
            ready = await self._socket.connected()
        status = 200 if ready else 503
        return web.json_response({"ready": ready}, status=status)

    # -- stop --------------------------------------------------------------------------

    async def shutdown(self, timeout_s: float = SHUTDOWN_BUDGET_S) -> None:
        """Stop taking work, end live runs with reason ``shutdown``, flush Slack, close.

        After a failed :meth:`start` this only releases what start opened, and says
        nothing: the start-up error is the one line the operator needs.
        """
        self._ready = False
        self.silence.close()
        say = log.info if self._started else log.debug
        say("app.shutting_down")
        if self._load is not None:
            self._load.close()
        try:
            async with asyncio.timeout(timeout_s + 2):
                await self._stop_taking_work()
                await self._end_runs(timeout_s)
                await self._release(timeout_s)
        finally:
            # Whatever failed or ran out of time above: no stdio server outlives us.
            # (A second close is quick: it finds every server ended.)
            await _bounded(self.mcp.close(), MCP_CLOSE_S, "mcp.close")
        say("app.stopped")

    async def _stop_taking_work(self) -> None:
        """Nothing new is recorded, no token refreshed, no payload read from the socket."""
        if self._late is not None:  # first: nothing new is recorded from here on
            await self._late.shutdown()
        if self._rotation is not None:
            await self._rotation.close()
        if self._socket is not None:
            await _bounded(
                self._socket.close_async(),  # type: ignore[no-untyped-call]
                2.0,
                "socket_mode.close",
            )

    async def _end_runs(self, timeout_s: float) -> None:
        """End the live runs (reason ``shutdown``), then send their spans and close the MCP
        servers their calls used."""
        if self._supervisor is not None:
            await self._supervisor.shutdown(timeout_s * 0.6)
        # The runs are checkpointed and their spans ended: send what is buffered.
        await flush_traces(TRACE_FLUSH_S)
        # The runs have ended (their MCP calls were cancelled with them).
        await _bounded(self.mcp.close(), MCP_CLOSE_S, "mcp.close")

    async def _release(self, timeout_s: float) -> None:
        """Close what outlived the runs: the Home refresher, late approval clicks, the
        worker, Slack's queued writes (flushed), the database, the model, the listeners,
        the HTTP session."""
        if self._home is not None:
            await self._home.close()
        if self._clicks is not None:
            await self._clicks.close()  # clicks whose decision is still late
        if self._worker is not None:
            await self._worker.close()
        if self._workspaces is not None:
            await _bounded(self._workspaces.close(), timeout_s * 0.25, "slack.flush")
        if self._store is not None:
            await self._store.close()
        if self._owned_model is not None:
            await self._owned_model.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        if self._session is not None:
            await self._session.close()


def _mcp_servers(settings: Settings, metrics: Metrics) -> McpManager:
    """The MCP servers of ``MCP_CONFIG``; their tools may not take the names of the app's
    own (the built-in tools, ``slack_read_thread``, ``delegate``)."""
    return McpManager(
        settings.mcp_servers,
        reserved=[*(t.name for t in BUILTIN_TOOLS), SLACK_READ_THREAD, DELEGATE],
        on_cancel=metrics.mcp_cancelled,
    )


async def _open_store(database_url: str, pool_size: int, migration_timeout_s: float) -> Store:
    """The database, migrated; a start-up error naming DATABASE_URL if it cannot be used."""
    try:
        return await open_store(
            database_url, pool_size=pool_size, migration_timeout_s=migration_timeout_s
        )
    except StorageError as exc:
        raise ConfigError("DATABASE_URL", f"cannot open the database ({exc})") from exc


async def _bounded(work: object, timeout_s: float, what: str) -> None:
    assert asyncio.iscoroutine(work)
    try:
        async with asyncio.timeout(timeout_s):
            await work
    except TimeoutError:
        log.error("shutdown.step_timed_out", step=what, timeout_s=timeout_s)
