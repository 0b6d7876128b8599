"""Fixtures for the agent core: a real OpenAI-compatible server (llmock) on loopback,
an agent pointed at it, and an event recorder that tests wait on instead of sleeping."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agent_core.agent import Agent, AgentConfig
from agent_core.model import OpenAIChatModel

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from llmock.pytest_plugin import LLMock

    from agent_core.stores.memory import MemoryStore
    from agent_core.tools import Tool
    from tests.agent_core.helpers import AgentFactory


@pytest.fixture
async def make_agent(llm: LLMock) -> AsyncIterator[AgentFactory]:
    models: list[OpenAIChatModel] = []

    def factory(
        tools: Sequence[Tool] = (),
        config: AgentConfig | None = None,
        store: MemoryStore | None = None,
        idle_timeout_s: float = 10.0,
    ) -> Agent:
        model = OpenAIChatModel(
            model="test-model",
            api_key="test-key",
            base_url=llm.base_url(),
            idle_timeout_s=idle_timeout_s,
        )
        models.append(model)
        return Agent(model, tools, config=config, store=store)

    yield factory
    for model in models:
        await model.aclose()
