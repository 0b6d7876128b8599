"""Reading Block Kit the way a person does: the text they would see, in order."""

from __future__ import annotations

from typing import Any

__all__ = ["blocks_text"]


def blocks_text(blocks: list[dict[str, Any]] | None) -> str:
    """All the text a person sees in these blocks, joined by newlines."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            # Text objects, and `markdown` blocks (whose text sits on the block itself).
            if node.get("type") in ("mrkdwn", "plain_text", "markdown") and "text" in node:
                parts.append(str(node["text"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(blocks or [])
    return "\n".join(parts)
