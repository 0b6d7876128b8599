"""Fixtures shared by every test package: the local model server (llmock)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock


@pytest.fixture
def llm(llmock: LLMock) -> LLMock:
    """llmock with scripted answers only: unscripted requests get plain text."""
    return llmock.tool_mode("off")
