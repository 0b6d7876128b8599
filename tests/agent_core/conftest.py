"""Fixtures for the agent core: a real model server (llmock) on loopback, an agent
pointed at it through the adapter of ``model_api`` (Chat Completions unless a test module
overrides the fixture, e.g. with every :class:`ModelAPI`), and an event recorder that
tests wait on instead of sleeping."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agent_core.models.api import HTTPChatModel, ModelAPI, build_model
from agent_core.run.agent import Agent
from tests.agent_core.helpers import base_url_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Approvals
    from agent_core.run.config import AgentConfig
    from agent_core.stores.memory import MemoryStore
    from agent_core.tools.toolbox import Tool
    from tests.agent_core.helpers import AgentFactory


@pytest.fixture
def model_api() -> ModelAPI:
    """The API the agent's model speaks (a module overrides this to run on every one)."""
    return ModelAPI.OPENAI_CHAT


@pytest.fixture
async def make_agent(llm: LLMock, model_api: ModelAPI) -> AsyncIterator[AgentFactory]:
    models: list[HTTPChatModel] = []

    def factory(
        tools: Sequence[Tool] = (),
        config: AgentConfig | None = None,
        store: MemoryStore | None = None,
        idle_timeout_s: float = 10.0,
        approvals: Approvals | None = None,
    ) -> Agent:
        model = build_model(
            model_api,
            model="test-model",
            api_key="test-key",
            base_url=base_url_for(llm, model_api),
            idle_timeout_s=idle_timeout_s,
        )
        models.append(model)
        return Agent(model, tools, config=config, store=store, approvals=approvals)

    yield factory
    for model in models:
        await model.aclose()
