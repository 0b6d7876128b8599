"""Fixtures shared by every test package: the local model server (llmock), and a session
that never reads the developer's own settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bot.config.settings import Settings
from tests.fakes.mcp_server import FakeMcpServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from llmock.pytest_plugin import LLMock


@pytest.fixture(autouse=True, scope="session")
def _no_developer_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Run the suite in a scratch working directory, with threadpilot's settings taken
    out of the environment.

    The app and the terminal runner read ``.env`` in the working directory and the
    environment: a developer's own (the README has them write both) would otherwise
    reach every ``Settings`` built here and every ``python -m bot`` or ``python -m
    agent_core`` a test starts, and change what the tests see. A test that wants a
    setting passes it; one that wants a ``.env`` writes it in a directory of its own.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("cwd"))
        for name in Settings.model_fields:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture
def llm(llmock: LLMock) -> LLMock:
    """llmock with scripted answers only: unscripted requests get plain text."""
    return llmock.tool_mode("off")


@pytest.fixture
async def fake() -> AsyncIterator[FakeMcpServer]:
    """The repo's own MCP server (serve it with ``tests.fakes.mcp_server.serve_http``)."""
    server = FakeMcpServer()
    yield server
    server.release()  # a slow call still waiting must not hold the server's shutdown
