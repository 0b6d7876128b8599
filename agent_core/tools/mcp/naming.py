"""How an MCP tool is named to the model: ``SERVER__TOOL`` (docs/operations.md, MCP servers).

Characters outside ``[A-Za-z0-9_-]`` become ``_`` and the name is cut to 64 characters
(what the OpenAI API accepts). Two tools can then end up with the same name (servers
``a.b`` and ``a_b``, or long names that share their first 64 characters). Collisions are
settled the same way every time, whatever order servers start in: the tools are taken in
sorted ``(server, tool)`` order, the first keeps the plain name, and each later one gets a
suffix made from a hash of its own server and tool names.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

__all__ = ["MAX_TOOL_NAME", "assign_tool_names", "tool_name"]

MAX_TOOL_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The plain name of ``tool`` of ``server``, before collisions are settled."""
    return f"{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"[:MAX_TOOL_NAME]


def assign_tool_names(
    tools: Iterable[tuple[str, str]], taken: Collection[str] = ()
) -> dict[tuple[str, str], str]:
    """A unique name for every ``(server, tool)``, none of them in ``taken``."""
    used = set(taken)
    names: dict[tuple[str, str], str] = {}
    for pair in sorted(set(tools)):
        plain = tool_name(*pair)
        name = plain if plain not in used else _disambiguated(plain, pair, used)
        used.add(name)
        names[pair] = name
    return names


def _disambiguated(plain: str, pair: tuple[str, str], used: set[str]) -> str:
    digest = hashlib.sha256("\0".join(pair).encode()).hexdigest()
    for length in range(6, len(digest) + 1):
        suffix = f"_{digest[:length]}"
        name = plain[: MAX_TOOL_NAME - len(suffix)] + suffix
        if name not in used:
            return name
    raise AssertionError(f"no free name for {pair}")  # 2**256 names cannot all be taken
