"""Figures of the source tree's shape, read with ``ast``: how the house is laid out.

Run it from the repository's root (``.venv/bin/python -m tests.house_figures``) to print:

- the entries at ``agent_core/``'s top level (modules and packages);
- import arrows between ``agent_core`` modules and the number of levels they stack to;
- import circles between modules (type-only imports count: a circle under
  ``TYPE_CHECKING`` still means neither module can be read without the other);
- import circles between ``bot/``'s packages (folder level);
- ``bot/``'s packages and the arrows between them; test files left flat in ``tests/bot/``;
- modules over 600 lines (the store backends and ``bot/messages.py`` aside) and functions
  over 50 lines;
- reach-throughs: ``self._x.y.z`` chains that call into an object held by another object.

The same functions back the layer tests, so the figures a closing note quotes and the
rules the suite holds are measured one way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES = ("agent_core", "bot")
LONG_MODULE = 600
LONG_FUNCTION = 50
_SIZE_EXEMPT = ("agent_core/stores/", "bot/messages.py")
"""The store backends (and the row codec they share) and the app's wording: long by nature."""


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. "agent_core.run.loop"
    path: Path
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.name if self.path.name == "__init__.py" else self.name.rpartition(".")[0]


def modules(root: Path = ROOT) -> dict[str, Module]:
    found: dict[str, Module] = {}
    for top in SOURCE_PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            found[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return found


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(module: Module, known: Iterable[str]) -> set[str]:
    """The project modules ``module`` imports, anywhere in the file (type-only too)."""
    names = set(known)
    targets: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            for alias in node.names:
                dotted = f"{base}.{alias.name}"
                targets.add(dotted if dotted in names else base)
    resolved = set()
    for target in targets:
        while target and target not in names:
            target = target.rpartition(".")[0]
        if target and target != module.name:
            resolved.add(target)
    return resolved


def graph(found: dict[str, Module], within: str) -> dict[str, set[str]]:
    inside = {n for n in found if n == within or n.startswith(within + ".")}
    return {n: imports(found[n], inside) & inside for n in sorted(inside)}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def levels(edges: dict[str, set[str]]) -> int:
    """How many levels the import arrows stack to (circles counted as one node)."""
    component = {n: n for n in edges}
    for members in circles(edges):
        for member in members:
            component[member] = members[0]
    condensed: dict[str, set[str]] = {}
    for node, targets in edges.items():
        condensed.setdefault(component[node], set()).update(
            component[t] for t in targets if component[t] != component[node]
        )
    depth: dict[str, int] = {}

    def depth_of(node: str) -> int:
        if node not in depth:
            depth[node] = 0  # guards against a cycle the condensation missed
            depth[node] = 1 + max((depth_of(t) for t in condensed.get(node, ())), default=0)
        return depth[node]

    return max((depth_of(n) for n in condensed), default=0)


def folder_edges(found: dict[str, Module], top: str) -> dict[str, set[str]]:
    """Arrows between ``top``'s direct sub-packages (a top-level module is its own folder)."""

    def folder(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2])

    edges: dict[str, set[str]] = {}
    for name, targets in graph(found, top).items():
        if name == top:
            continue
        edges.setdefault(folder(name), set()).update(
            folder(t) for t in targets if t != top and folder(t) != folder(name)
        )
    return edges


def long_modules(found: dict[str, Module]) -> list[tuple[str, int]]:
    rows = []
    for module in found.values():
        where = module.path.relative_to(ROOT).as_posix()
        lines = len(module.path.read_text().splitlines())
        if lines > LONG_MODULE and not where.startswith(_SIZE_EXEMPT):
            rows.append((where, lines))
    return sorted(rows, key=lambda row: -row[1])


def long_functions(found: dict[str, Module]) -> list[tuple[str, int]]:
    rows = []
    for module in found.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LONG_FUNCTION:
                    rows.append((f"{module.name}.{node.name}", length))
    return sorted(rows, key=lambda row: -row[1])


def reach_throughs(found: dict[str, Module]) -> list[str]:
    """``self._held.attribute.method(...)``: a call into an object another object holds."""
    rows = []
    for module in found.values():
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            middle = node.func.value
            if not isinstance(middle, ast.Attribute) or not isinstance(middle.value, ast.Attribute):
                continue
            held = middle.value
            if isinstance(held.value, ast.Name) and held.value.id == "self":
                if not middle.attr.startswith("_"):
                    rows.append(f"{module.name}:{node.lineno} self.{held.attr}.{middle.attr}")
    return rows


def main() -> None:
    found = modules()
    top_entries = sorted(
        p.name
        for p in (ROOT / "agent_core").iterdir()
        if p.name != "__pycache__" and (p.suffix == ".py" or p.is_dir())
    )
    core = graph(found, "agent_core")
    arrows = sum(len(targets) for targets in core.values())
    print(f"agent_core top-level entries: {len(top_entries)}")
    print(f"agent_core import arrows: {arrows} over {levels(core)} levels")
    for members in circles(core) + circles(graph(found, "bot")):
        print(f"module circle: {' <-> '.join(members)}")
    bot_folders = folder_edges(found, "bot")
    for members in circles(bot_folders):
        print(f"bot folder circle: {' <-> '.join(members)}")
    packages = [p for p in (ROOT / "bot").iterdir() if (p / "__init__.py").exists()]
    folder_arrows = sum(len(t) for f, t in bot_folders.items() if f.count(".") == 1)
    print(f"bot packages: {len(packages)}, folder arrows: {folder_arrows}")
    flat = list((ROOT / "tests" / "bot").glob("test_*.py"))
    print(f"test files flat in tests/bot/: {len(flat)}")
    for where, lines in long_modules(found):
        print(f"module over {LONG_MODULE} lines: {where} {lines}")
    functions = long_functions(found)
    print(f"functions over {LONG_FUNCTION} lines: {len(functions)}")
    for name, lines in functions:
        print(f"  {name} {lines}")
    reaches = reach_throughs(found)
    print(f"reach-throughs: {len(reaches)}")
    for row in reaches:
        print(f"  {row}")


if __name__ == "__main__":
    main()
