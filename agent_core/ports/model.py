"""The chat model a run streams its turns from, and where a held call asks for approval."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agent_core.values.approvals import ApprovalDecision, ApprovalRequest
    from agent_core.values.chat import ModelRequest, ModelResponse
    from agent_core.values.records import (
        ApprovalStatus,
    )

__all__ = ["Approvals", "ChatModel", "TextSink"]


# -- the chat model -------------------------------------------------------------------


TextSink = Callable[[str], None]
"""Receives text deltas as they stream in."""


class ChatModel(Protocol):
    """Streams one turn. Cancelling the awaiting task must close the HTTP stream before
    the cancellation propagates; failures are raised as
    :class:`agent_core.values.errors.ModelError`.

    The request's messages are in the core's shape (OpenAI chat messages, with a
    :class:`Reasoning` under an assistant message's ``reasoning`` key); each adapter
    translates them to its API (``MODEL_API``: :mod:`agent_core.models.openai_chat`,
    :mod:`agent_core.models.openai_responses`, :mod:`agent_core.models.anthropic_messages`).
    """

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse: ...


class Approvals(Protocol):
    """Where a held tool call gets a person's decision (:mod:`agent_core.values.approvals`):
    Slack's Approve / Deny buttons, the terminal's y/N."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        """Show ``request`` to the people who may decide and wait for a decision.

        Cancelling the awaiting task only stops the wait: the request stays open (a
        shutdown keeps it for the resumed run) until :meth:`settle` ends it.
        """
        ...

    async def settle(self, request: ApprovalRequest, status: ApprovalStatus) -> ApprovalDecision:
        """End ``request`` with ``status`` (expired, cancelled) unless a decision got
        there first (compare-and-set); returns the decision that stands."""
        ...
