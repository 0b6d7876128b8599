"""What the model reads of an MCP tool's result.

Text content is used as is. Other content is described in one line (an image, a sound
or a binary resource is no use to a text model, and its base64 would only fill the
context); embedded text resources are used with their URI. A result that has only
structured content is shown as its JSON. The Toolbox then cuts whatever is too long.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

if TYPE_CHECKING:
    from mcp_types import CallToolResult, ContentBlock

__all__ = ["result_text"]


def result_text(result: CallToolResult) -> str:
    """The result's content as text, one block after another."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str))
    return "\n".join(parts)


def _block_text(block: ContentBlock) -> str:
    match block:
        case TextContent(text=text):
            return text
        case ImageContent(mime_type=mime, data=data):
            return f"[image, {mime}, {_size(data)}: not shown]"
        case AudioContent(mime_type=mime, data=data):
            return f"[audio, {mime}, {_size(data)}: not shown]"
        case ResourceLink(uri=uri, name=name):
            return f"[resource link: {name} {uri}]"
        case EmbeddedResource(resource=BlobResourceContents(uri=uri, blob=blob) as resource):
            return f"[resource {uri}, {resource.mime_type or 'binary'}, {_size(blob)}: not shown]"
        case EmbeddedResource(resource=TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
    return f"[{getattr(block, 'type', 'unknown')} content: not shown]"


def _size(base64: str) -> str:
    return f"{len(base64) * 3 // 4:,} bytes"
