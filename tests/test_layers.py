"""agent_core's sub-packages are layers: a module imports only from its own package or from
a layer below it, and no modules import each other in a circle (type-only imports count).

Measured with the same ``ast`` helpers as ``python -m tests.house_figures``.
"""

from __future__ import annotations

from tests.house_figures import circles, graph, modules

LAYERS: tuple[tuple[str, ...], ...] = (
    ("values",),
    ("ports",),
    ("models", "tools", "stores", "process"),
    ("run",),
    ("terminal", "testing"),
    ("", "__main__"),  # the package's exports and ``python -m agent_core``
)
"""agent_core's floors, bottom first. Packages on one floor do not import each other."""


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _floor(room: str) -> int:
    for floor, rooms in enumerate(LAYERS):
        if room in rooms:
            return floor
    raise AssertionError(f"agent_core.{room} is on no floor: add it to LAYERS")


def test_every_module_imports_only_from_its_own_package_or_a_floor_below() -> None:
    upward = []
    for name, targets in graph(modules(), "agent_core").items():
        room = _room(name)
        for target in sorted(targets):
            other = _room(target)
            if other != room and _floor(other) >= _floor(room):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_no_module_of_the_core_imports_itself_in_a_circle() -> None:
    assert circles(graph(modules(), "agent_core")) == []
