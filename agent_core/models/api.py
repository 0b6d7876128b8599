"""Which model API a run talks to (``MODEL_API``), and the adapter that speaks it.

One port in the core (:class:`agent_core.ports.ChatModel`); one adapter module per API:

- ``openai-chat``: Chat Completions, :mod:`agent_core.models.openai_chat` (OpenAI, Azure OpenAI, any
  OpenAI-compatible server);
- ``openai-responses``: the Responses API, :mod:`agent_core.models.openai_responses`;
- ``anthropic``: the Messages API, :mod:`agent_core.models.anthropic_messages`.
"""

from __future__ import annotations

from enum import StrEnum

from agent_core.models.anthropic_messages import AnthropicModel
from agent_core.models.http_exchange import DEFAULT_REPLY_TIMEOUT_S, READS_PER_S
from agent_core.models.openai_chat import OpenAIChatModel
from agent_core.models.openai_responses import OpenAIResponsesModel

__all__ = ["HTTPChatModel", "ModelAPI", "build_model"]

HTTPChatModel = OpenAIChatModel | OpenAIResponsesModel | AnthropicModel
"""An adapter of ours: a ChatModel with an HTTP session to close (``aclose``)."""


class ModelAPI(StrEnum):
    """The ``MODEL_API`` setting's values."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"


def build_model(
    api: ModelAPI,
    *,
    model: str,
    api_key: str,
    base_url: str | None = None,
    idle_timeout_s: float = 60.0,
    reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S,
    reads_per_s: float = READS_PER_S,
    max_output_tokens: int | None = None,
) -> HTTPChatModel:
    """The adapter of ``api``, for ``model`` at ``base_url`` (None: the API's default);
    ``reads_per_s`` paces its streams' reads (:mod:`agent_core.models.http_exchange`);
    ``max_output_tokens`` caps each reply (``MODEL_MAX_OUTPUT_TOKENS``)."""
    kind: type[HTTPChatModel] = OpenAIChatModel
    if api is ModelAPI.OPENAI_RESPONSES:
        kind = OpenAIResponsesModel
    elif api is ModelAPI.ANTHROPIC:
        kind = AnthropicModel
    return kind(
        model=model,
        api_key=api_key,
        base_url=base_url,
        idle_timeout_s=idle_timeout_s,
        reply_timeout_s=reply_timeout_s,
        reads_per_s=reads_per_s,
        max_output_tokens=max_output_tokens,
    )
