"""Reading the status message's versions as stored by the fake Slack.

``tests.bot.harness`` reads a message's current blocks; the system tests also need every
earlier version (``Message.history``): to find when a text first appeared, and to count
how many times a terminal report was written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.fakes.slack_blocks import blocks_text

if TYPE_CHECKING:
    from tests.fakes.slack_messages import Message, Revision
    from tests.fakes.slack_workspace import Json

__all__ = ["blocks_text", "final_revisions", "has_buttons", "is_final_revision", "revision_text"]


def revision_text(revision: Revision) -> str:
    return blocks_text(revision.blocks)


def has_buttons(blocks: list[Json] | None) -> bool:
    for block in blocks or []:
        for element in [*block.get("elements", []), block.get("accessory")]:
            if isinstance(element, dict) and element.get("type") == "button":
                return True
    return False


def is_final_revision(revision: Revision) -> bool:
    """A terminal report: no buttons, and the four-part handoff (docs/stopping.md)."""
    return not has_buttons(revision.blocks) and "Evidence" in revision_text(revision)


def final_revisions(message: Message) -> list[Revision]:
    return [r for r in message.history if is_final_revision(r)]
