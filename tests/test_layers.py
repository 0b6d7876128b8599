"""The packages of ``agent_core`` and of ``bot`` are layers: a module imports only from its
own package or from a layer below it, and no modules import each other in a circle
(type-only imports count). docs/architecture.md draws the floors and names every package
and module. The house stays easy to read: no module over 600 lines (the supervisor under
450), at most three functions over 50, and no call reaching through a held object.

Measured with the same ``ast`` helpers as ``python -m tests.house_figures``; the floors are
drawn in docs/architecture.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.house_figures import (
    circles,
    graph,
    long_functions,
    long_modules,
    modules,
    reach_throughs,
)

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
SUPERVISOR_LINES = 450
LONG_FUNCTIONS_ALLOWED = 3

CORE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("values",),
    ("ports",),
    ("models", "tools", "stores", "process"),
    ("run",),
    ("terminal", "testing"),
    ("", "__main__"),  # the package's exports and ``python -m agent_core``
)
"""agent_core's floors, bottom first. Packages on one floor do not import each other."""

BOT_LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "errors", "messages", "store_needs"),  # words, errors and the store's shape
    ("views",),  # Block Kit, pure
    ("observe",),  # metrics and the event loop's load
    ("config",),  # settings
    ("slack_api",),  # the Web API as the app uses it
    ("installs",),  # OAuth: installations, their tokens and their rotation
    ("access",),  # who may do what
    ("inbound",),  # deliveries and thread history
    ("approvals", "steering"),
    ("runs",),  # the supervisor, each run's Slack session, the queue
    ("workers",),  # leases, reconciling, stop watching, resumes
    ("stopping",),  # the one stop service
    ("dashboard",),  # App Home and the command's list
    ("handlers",),  # Bolt listeners
    ("process",),  # wiring, transports, commands that start nothing
    ("__main__",),
)
"""bot's floors, bottom first. Packages on one floor do not import each other."""

PACKAGES = {"agent_core": CORE_LAYERS, "bot": BOT_LAYERS}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _floor(layers: tuple[tuple[str, ...], ...], top: str, room: str) -> int:
    for floor, rooms in enumerate(layers):
        if room in rooms:
            return floor
    raise AssertionError(f"{top}.{room} is on no floor: add it to the layers in this file")


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_every_module_imports_only_from_its_own_package_or_a_floor_below(top: str) -> None:
    layers = PACKAGES[top]
    upward = []
    for name, targets in graph(modules(), top).items():
        room = _room(name)
        for target in sorted(targets):
            other = _room(target)
            if other != room and _floor(layers, top, other) >= _floor(layers, top, room):
                upward.append(f"{name} -> {target}")
    assert upward == []


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_no_modules_import_each_other_in_a_circle(top: str) -> None:
    assert circles(graph(modules(), top)) == []


def _named_in_the_map(top: str, path: Path) -> bool:
    rel = path.relative_to(ROOT / top)
    if rel.parts[:2] == ("stores", "migrations") and rel.parts[-2] == "versions":
        return True  # the revisions are named together, as ``versions/rNNNN_*.py``
    if rel.name == "__init__.py":
        return rel.parent == Path() or f"{rel.parent.as_posix()}/" in ARCHITECTURE
    if rel.parts[:2] == ("tools", "mcp"):
        return f"`{rel.name}`" in ARCHITECTURE  # listed inside the ``tools/mcp/`` entry
    return f"`{rel.as_posix()}`" in ARCHITECTURE


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_the_architecture_page_names_every_package_and_module(top: str) -> None:
    missing = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / top).rglob("*.py"))
        if not _named_in_the_map(top, path)
    ]
    assert missing == []


def test_no_module_outgrows_one_concept() -> None:
    """Over 600 lines a module holds more than one concept (the store backends and the
    app's wording are long by nature); the supervisor, which every run passes through,
    stays well under that."""
    assert long_modules(modules()) == []
    supervisor = ROOT / "bot" / "runs" / "supervisor.py"
    assert len(supervisor.read_text(encoding="utf-8").splitlines()) < SUPERVISOR_LINES


def test_functions_read_in_one_screen() -> None:
    """At most three functions over 50 lines (``python -m tests.house_figures`` lists
    them)."""
    assert len(long_functions(modules())) <= LONG_FUNCTIONS_ALLOWED


def test_no_call_reaches_through_an_object_another_holds() -> None:
    """``self._held.attribute.method()``: say what you want of the object you hold, or hold
    the one you call."""
    assert reach_throughs(modules()) == []
