"""Guidance: what people write to a run while it works, and when the model sees it.

A person steers a live run by replying in its thread (docs/stopping.md, Guidance). The
Slack layer commits each reply durably and hands it to the run's :class:`GuidanceInbox`;
the loop takes everything queued at the next turn boundary (after the in-flight model
stream or tool batch) and sends it with the next model request as **user-role**
messages that name their author. It is never a system message: a reply is a person's
words, not an instruction with the operator's authority.

A pending Stop or Abort wins: the final turn carries no guidance, and whatever is still
queued when the run ends is handed back as undelivered (the handoff lists it), never
dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_core.values.clock import utcnow
from agent_core.values.prompts import guidance_note

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from agent_core.values.chat import ChatMessage

__all__ = ["Guidance", "GuidanceInbox"]


@dataclass(frozen=True, slots=True)
class Guidance:
    """One reply to a running agent."""

    id: str
    author: str
    """Who wrote it (a Slack user id, or ``local``)."""
    text: str
    queued_at: datetime = field(default_factory=utcnow)
    author_label: str | None = None
    """How the model is told who wrote it (``<@U123>`` in Slack); ``author`` if None."""

    def message(self) -> ChatMessage:
        """The user-role message the model receives."""
        return {
            "role": "user",
            "content": guidance_note(self.author_label or self.author, self.text),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "author": self.author, "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Guidance:
        return cls(id=str(data["id"]), author=str(data["author"]), text=str(data["text"]))


class GuidanceInbox:
    """The guidance of one run, in the order it arrived.

    ``add`` may be called from anywhere on the run's event loop at any time; ``take`` is
    the loop's, at a turn boundary. Once :meth:`close` has run nothing more is accepted.
    """

    def __init__(self) -> None:
        self._queued: list[Guidance] = []
        self._seen: set[str] = set()
        self._closed = False

    @property
    def pending(self) -> tuple[Guidance, ...]:
        return tuple(self._queued)

    @property
    def closed(self) -> bool:
        return self._closed

    def add(self, guidance: Guidance) -> bool:
        """Queue ``guidance``. False if the run has ended or this id was already queued
        (a second delivery of the same reply, e.g. through the store's wake-up path)."""
        if self._closed or guidance.id in self._seen:
            return False
        self._seen.add(guidance.id)
        self._queued.append(guidance)
        return True

    def take(self) -> tuple[Guidance, ...]:
        """Everything queued, oldest first; the inbox is empty afterwards."""
        taken, self._queued = tuple(self._queued), []
        return taken

    def close(self) -> tuple[Guidance, ...]:
        """Refuse further guidance; returns what was never delivered."""
        self._closed = True
        return self.take()
