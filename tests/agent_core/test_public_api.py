"""The core's public API is what it says it is, and the Slack layer keeps to it.

``agent_core.__all__`` names exactly the public names the package defines, each one
documented; ``bot/`` imports no private module of ``agent_core`` (one whose name, or a
package on its path, starts with an underscore).
"""

from __future__ import annotations

import ast
import inspect
import types
from pathlib import Path

import agent_core

ROOT = Path(__file__).resolve().parent.parent.parent


def test_all_names_exactly_the_public_names_of_the_package() -> None:
    exported = agent_core.__all__
    assert len(exported) == len(set(exported)), "a name is listed twice"
    missing = [name for name in exported if not hasattr(agent_core, name)]
    assert missing == []
    public = {
        name
        for name, value in vars(agent_core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(exported) == set(), "imported into agent_core but not in __all__"


def _own_doc(value: object) -> str:
    """The docstring written for ``value`` itself: not a base class's, nor the signature
    a dataclass puts there when it has none."""
    doc = vars(value).get("__doc__") if inspect.isclass(value) else inspect.getdoc(value)
    if not isinstance(doc, str) or doc.startswith(f"{getattr(value, '__name__', '')}("):
        return ""
    return doc.strip()


def test_every_exported_class_and_function_is_documented() -> None:
    undocumented = [
        name
        for name in agent_core.__all__
        if (inspect.isclass(value := getattr(agent_core, name)) or inspect.isfunction(value))
        and not _own_doc(value)
    ]
    assert undocumented == []


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "agent_core" and any(p.startswith("_") for p in parts[1:]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_the_slack_layer_imports_no_private_module_of_the_core() -> None:
    found = [hit for path in sorted((ROOT / "bot").rglob("*.py")) for hit in _private_imports(path)]
    assert found == []
