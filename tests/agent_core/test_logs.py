"""Log set-up: one format for every logger, context on every line, stdout left alone."""

from __future__ import annotations

import io
import json
import logging
from typing import TYPE_CHECKING

import aiohttp
import httpx2
import pytest
import structlog
from aiohttp import web

from agent_core.process.logs import QUIET_AT_INFO, configure_logging
from agent_core.stores.factory import open_store

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_AT_INFO}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, quiet_level in quiet.items():
        logging.getLogger(name).setLevel(quiet_level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_bound_context_from_every_logger() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    with structlog.contextvars.bound_contextvars(run_id="r1", team="T1", user="U1"):
        structlog.get_logger("agent_core.run.loop").info("run.started", turn=1)
        logging.getLogger("slack_bolt.AsyncApp").warning("bolt said %s", "hi")
    structlog.get_logger("agent_core.run.loop").debug("too detailed")

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["run.started", "bolt said hi"]
    for line in lines:
        assert (line["run_id"], line["team"], line["user"]) == ("r1", "T1", "U1")
        assert line["timestamp"].endswith("Z")
    assert lines[1]["logger"] == "slack_bolt.AsyncApp"


@pytest.mark.usefixtures("restore_logging")
def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="LOUD"):
        configure_logging("console", "LOUD")


async def _serve_one_request(tmp_path: Path) -> None:
    """An aiohttp server with its default access log, asked once with aiohttp and once
    with httpx2 (the MCP transport's client, which logs every request it makes)."""
    app = web.Application()

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.UnixSite(runner, str(tmp_path / "web.sock"))
    await site.start()
    try:
        connector = aiohttp.UnixConnector(path=str(tmp_path / "web.sock"))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get("http://localhost/healthz") as response,
        ):
            assert response.status == 200
        transport = httpx2.AsyncHTTPTransport(uds=str(tmp_path / "web.sock"))
        async with httpx2.AsyncClient(transport=transport) as client:
            assert (await client.get("http://localhost/healthz")).status_code == 200
    finally:
        await runner.cleanup()


async def _library_traffic(make_agent: AgentFactory, llm: LLMock, tmp_path: Path) -> None:
    """What a worker does on every start and every run: open (and migrate) its store,
    stream a model reply over HTTP, answer a request on its own server."""
    store = await open_store(f"sqlite:///{tmp_path / 'logs.db'}")
    await store.close()
    llm.reply("Hello.")
    result = await make_agent().new_run("say hello").run()
    assert result.summary == "Hello."
    await _serve_one_request(tmp_path)


@pytest.mark.usefixtures("restore_logging")
async def test_at_info_only_our_events_show_no_request_or_migration_chatter(
    make_agent: AgentFactory, llm: LLMock, tmp_path: Path
) -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    await _library_traffic(make_agent, llm, tmp_path)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    events = [line["event"] for line in lines]
    assert "run.started" in events  # our own events are there
    chatter = [line for line in lines if "logger" in line]  # the standard library's
    assert chatter == [], "library lines at INFO:\n" + "\n".join(map(str, chatter))
    text = out.getvalue()
    for needle in ("HTTP Request", "Running upgrade", "Context impl", "GET /healthz"):
        assert needle not in text


@pytest.mark.usefixtures("restore_logging")
async def test_at_debug_the_library_lines_are_back(
    make_agent: AgentFactory, llm: LLMock, tmp_path: Path
) -> None:
    configure_logging("json", "INFO", io.StringIO())  # quietened first, then DEBUG again
    out = io.StringIO()
    configure_logging("json", "DEBUG", out)
    await _library_traffic(make_agent, llm, tmp_path)

    text = out.getvalue()
    for needle in ("HTTP Request: GET", "Running upgrade", "GET /healthz"):
        assert needle in text


@pytest.mark.usefixtures("restore_logging")
def test_library_warnings_still_show_at_info() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    for name in QUIET_AT_INFO:
        logging.getLogger(f"{name}.inner").warning("trouble in %s", name)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == [f"trouble in {n}" for n in QUIET_AT_INFO]
