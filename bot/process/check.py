"""``python -m bot --check``: is this installation ready to run? One line per check.

Checks, in order: the settings (and names given that are not settings); in HTTP mode,
what Slack must be told for events to arrive; the database (reachable, and at the current schema or
migratable to it); the Slack tokens (``auth.test`` for the bot token, ``apps.connections.open``
for the app token in Socket Mode); the model endpoint of ``MODEL_API`` (it lists its
models with the key; the line names the API);
each MCP server in ``MCP_CONFIG`` (it starts and lists its tools, and each per-tool
approval rule names one of them). A check whose
prerequisite failed is skipped and says so. Nothing is started for good and nothing is
written: the database is read, never migrated, and a missing SQLite file is not created.

Exit status 0 when every check passed, 2 otherwise.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import openai
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import ConfigError, ModelAPI
from agent_core.models.anthropic_messages import DEFAULT_BASE_URL as ANTHROPIC_API_URL
from agent_core.models.anthropic_messages import VERSION as ANTHROPIC_VERSION
from agent_core.stores.factory import parse_database_url
from agent_core.stores.migrations import VERSION_TABLE, head_revision
from agent_core.tools.mcp import McpManager
from agent_core.values.redact import public_url, redact
from bot.config.settings import load_settings
from bot.config.unknown_settings import unknown_settings
from bot.installs.health import read_summary

if TYPE_CHECKING:
    from bot.config.settings import Settings

__all__ = ["Check", "run_checks"]

CHECK_TIMEOUT_S = 10.0
"""Each network check gets this long: a silent server is a failed check, not a hang."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False
    """Passed, but something deserves the operator's attention (the exit status is 0)."""

    def line(self) -> str:
        label = "FAIL" if not self.ok else "warn" if self.warn else "ok  "
        return f"{label} {self.name}: {self.detail}"


async def run_checks(out: TextIO = sys.stdout) -> int:
    """Run every check, print one line each, and return the process exit status."""
    results: list[Check] = []

    def report(check: Check) -> None:
        results.append(check)
        print(check.line(), file=out, flush=True)

    unknown = [Check("settings", False, str(name)) for name in unknown_settings()]
    try:
        settings = load_settings()
    except ConfigError as exc:
        for problem in str(exc).splitlines():
            report(Check("settings", False, problem))
        for misnamed in unknown:
            report(misnamed)
        report(Check("the rest", False, "skipped until the settings are fixed"))
        return 2
    limits = f"MAX_LIVE_RUNS={settings.MAX_LIVE_RUNS}"
    report(Check("settings", True, f"read ({_transport(settings)}, {limits})"))
    for misnamed in unknown:
        report(misnamed)
    if not settings.socket_mode:
        report(Check("transport", True, HTTP_NEEDS))
    for check in (_database, _slack_bot, _slack_app, _model):
        found = await check(settings)
        if found is not None:
            report(found)
    if settings.oauth_mode:
        for found in await _installations(settings):
            report(found)
    for found in await _mcp(settings):
        report(found)
    return 0 if all(c.ok for c in results) else 2


HTTP_NEEDS = (
    "HTTP mode: Slack sends events here only if the app's Request URLs are "
    "https://YOUR-HOST/slack/events and Socket Mode is off in its settings; the shipped "
    "manifest.yml turns Socket Mode on, and then nothing arrives: set SLACK_APP_TOKEN"
)
"""What no API tells the app with its bot token (neither ``auth.test`` nor any other
bot-token method says how the app is set to deliver events), so --check says it."""


def _transport(settings: Settings) -> str:
    return "Socket Mode" if settings.socket_mode else f"HTTP on port {settings.PORT}"


# -- the database ---------------------------------------------------------------------


async def _database(settings: Settings) -> Check:
    name = "database"
    target = parse_database_url(settings.DATABASE_URL)
    head = await head_revision()
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            if target.kind == "sqlite":
                version = await asyncio.to_thread(_sqlite_version, target.location)
            else:
                version = await _pg_version(target.location)
    except _Missing as exc:
        return Check(name, True, f"{exc}; it is created at start-up")
    except (OSError, sqlite3.Error, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return Check(name, False, f"cannot read it: {redact(str(exc))}")
    except TimeoutError:
        return Check(name, False, f"no answer within {CHECK_TIMEOUT_S:g} s")
    where = target.where
    if version == head:
        return Check(name, True, f"{where} is at the current schema ({head})")
    if version is None:
        return Check(name, True, f"{where} has no threadpilot schema yet; it is created at start")
    return Check(name, True, f"{where} is at {version}; start-up migrates it to {head}")


class _Missing(Exception):
    """The SQLite file does not exist yet (its directory does)."""


def _sqlite_version(path: str) -> str | None:
    file = Path(path)
    if not file.exists():
        if not file.parent.is_dir():
            raise OSError(f"the directory {file.parent} does not exist")
        raise _Missing(f"{path} does not exist yet")
    if file.is_dir():
        raise OSError(f"{path} is a directory")
    with sqlite3.connect(f"file:{file}?mode=ro", uri=True) as conn:
        return _version_from(conn.execute, f"SELECT version_num FROM {VERSION_TABLE}")


def _version_from(execute: object, sql: str) -> str | None:
    try:
        row = execute(sql).fetchone()  # type: ignore[operator]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return str(row[0]) if row else None


async def _pg_version(dsn: str) -> str | None:
    conn = await asyncpg.connect(dsn, timeout=CHECK_TIMEOUT_S)
    try:
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", VERSION_TABLE)
        if not exists:
            return None
        value = await conn.fetchval(f"SELECT version_num FROM {VERSION_TABLE}")
        return str(value) if value is not None else None
    finally:
        await conn.close()


# -- Slack ----------------------------------------------------------------------------


async def _installations(settings: Settings) -> list[Check]:
    """OAuth mode: the installations in the database, whether their tokens are sealed,
    and each token whose refresh is failing (a FAIL: that workspace will lose the app)."""
    name = "installations"
    try:
        summary = await read_summary(settings.DATABASE_URL, CHECK_TIMEOUT_S)
    except (OSError, sqlite3.Error, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return [Check(name, False, f"cannot read them: {redact(str(exc))}")]
    except TimeoutError:
        return [Check(name, False, f"no answer within {CHECK_TIMEOUT_S:g} s")]
    install = "install it from /slack/install on PORT"
    if not summary.migrated or summary.installations == 0:
        checks = [Check(name, True, f"none yet: {install}")]
    else:
        checks = [Check(name, True, f"{summary.installations} (workspaces or organisations)")]
    if settings.SLACK_TOKEN_KEY is None:
        checks.append(
            Check(
                "token encryption",
                True,
                "tokens are stored in clear in the database: set SLACK_TOKEN_KEY "
                "(docs/admin.md, Installations)",
                warn=True,
            )
        )
    elif summary.in_clear:
        checks.append(
            Check(
                "token encryption",
                True,
                f"{summary.in_clear} installation(s) still in clear: each is encrypted at "
                "its next save or token refresh",
                warn=True,
            )
        )
    for failing in summary.failing:
        checks.append(
            Check(
                "token refresh",
                False,
                f"{failing.where}: failed {failing.failures} time(s) in a row "
                f"({failing.error}); it is retried, and once its token expires the app stops "
                "working there until it is installed again",
            )
        )
    return checks


async def _slack_bot(settings: Settings) -> Check | None:
    if settings.oauth_mode:
        return None  # no bot token: each installation has its own (installations_checks)
    name = "Slack bot token"
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(
            token=settings.SLACK_BOT_TOKEN, base_url=settings.SLACK_API_URL, session=session
        )
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                auth = await client.auth_test()
        except SlackApiError as exc:
            return Check(name, False, f"Slack refused it ({exc.response.get('error')})")
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            return Check(
                name,
                False,
                f"cannot reach Slack at {public_url(settings.SLACK_API_URL)} ({_brief(exc)})",
            )
    return Check(
        name, True, f"bot {auth.get('user')} ({auth.get('user_id')}) in {auth.get('team')}"
    )


async def _slack_app(settings: Settings) -> Check | None:
    if settings.SLACK_APP_TOKEN is None:
        return None  # HTTP mode: no app token to check
    name = "Slack app token"
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(
            token=settings.SLACK_APP_TOKEN, base_url=settings.SLACK_API_URL, session=session
        )
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await client.apps_connections_open(app_token=settings.SLACK_APP_TOKEN)
        except SlackApiError as exc:
            return Check(name, False, f"Slack refused it ({exc.response.get('error')})")
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            return Check(name, False, f"cannot reach Slack ({_brief(exc)})")
    return Check(name, True, "Socket Mode connections can be opened")


# -- the model ------------------------------------------------------------------------


async def _model(settings: Settings) -> Check:
    """The endpoint of ``MODEL_API`` answers a model listing with its key; the line
    names the API it checked."""
    endpoint = settings.model_endpoint
    name = "model endpoint"
    if endpoint.api is ModelAPI.ANTHROPIC:
        where = public_url(endpoint.base_url) if endpoint.base_url else "the Anthropic API"
        found = await _anthropic_models(endpoint.base_url, endpoint.api_key, where)
    else:
        where = public_url(endpoint.base_url) if endpoint.base_url else "the OpenAI API"
        found = await _openai_models(endpoint.base_url, endpoint.api_key, where)
    api = f"MODEL_API={endpoint.api.value}"
    if isinstance(found, str):
        return Check(name, False, f"{api}: {found}")
    listed = (
        "listed" if endpoint.model in found else "not in its list (some endpoints list only some)"
    )
    return Check(name, True, f"{api}: {where} answers; {endpoint.model} is {listed}")


async def _openai_models(base_url: str | None, key: str, where: str) -> list[str] | str:
    """The models an OpenAI-compatible endpoint lists, or why it did not."""
    client = openai.AsyncOpenAI(
        api_key=key, base_url=base_url, max_retries=0, timeout=CHECK_TIMEOUT_S
    )
    try:
        return [m.id async for m in client.models.list()]
    except openai.AuthenticationError:
        return f"{where} refused OPENAI_API_KEY"
    except openai.APIStatusError as exc:
        return f"{where} answered {exc.status_code} to a model listing"
    except openai.APIError as exc:
        return f"cannot reach {where} ({redact(str(exc))})"
    finally:
        await client.close()


async def _anthropic_models(base_url: str | None, key: str, where: str) -> list[str] | str:
    """The models the Anthropic API lists (``GET /v1/models``), or why it did not."""
    url = (base_url or ANTHROPIC_API_URL).rstrip("/") + "/v1/models"
    headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers) as response,
        ):
            if response.status in (401, 403):
                return f"{where} refused ANTHROPIC_API_KEY"
            if response.status >= 400:
                return f"{where} answered {response.status} to a model listing"
            listing = await response.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        return f"cannot reach {where} ({_brief(exc)})"
    data = listing.get("data") if isinstance(listing, dict) else None
    return [str(m.get("id")) for m in data or () if isinstance(m, dict)]


# -- MCP servers ----------------------------------------------------------------------


def _tools_line(tools: tuple[str, ...], protocol: str | None) -> str:
    shown = ", ".join(tools[:8]) + (f" and {len(tools) - 8} more" if len(tools) > 8 else "")
    return f"{len(tools)} tools ({shown or 'none'}), protocol {protocol}"


async def _mcp(settings: Settings) -> list[Check]:
    if not settings.mcp_servers:
        return []
    manager = McpManager(settings.mcp_servers)
    rules: list[Check] = []
    try:
        await manager.start()
    except ConfigError as exc:  # an approval rule naming a tool no server offers
        rules.append(Check("settings", False, str(exc)))
    finally:
        await manager.close()
    servers = [
        Check(f"MCP server {s.name}", s.ok, s.error or _tools_line(s.tools, s.protocol))
        for s in manager.status()
    ]
    return servers + rules


def _brief(exc: BaseException) -> str:
    return redact(str(exc)) or type(exc).__name__
