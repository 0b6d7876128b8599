"""Objects are wired when they are built: nothing pins a hook onto another object later.

A callback assigned onto an object after it was built (``supervisor.room_freed =
self.wake``) leaves the object unfinished until someone remembers to set it, and a
reader following a call goes dark at a hook whose value is set in another file. So
collaborators and callbacks are passed to constructors instead, and, where two objects
need each other, a small protocol is (``bot.runs.run_life.RunLifecycle``).

The check: no assignment in ``agent_core/`` or ``bot/`` sets an attribute of another
object (anything but ``self.x`` itself) to one of this object's members or bound methods
(an expression rooted at ``self``) or to a lambda.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _rooted_at_self(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def _pins_a_hook(target: ast.expr, value: ast.expr) -> bool:
    if not isinstance(target, ast.Attribute):
        return False
    onto_self = isinstance(target.value, ast.Name) and target.value.id == "self"
    if onto_self:
        return False
    return isinstance(value, ast.Lambda) or (
        isinstance(value, ast.Attribute) and _rooted_at_self(value)
    )


def late_wirings(source: str, name: str = "<source>") -> list[str]:
    """Each assignment in ``source`` that pins a hook onto another object."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        else:
            continue
        for target, value in pairs:
            if _pins_a_hook(target, value):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_object_is_wired_after_it_was_built() -> None:
    found = []
    for package in ("agent_core", "bot"):
        for path in sorted((ROOT / package).rglob("*.py")):
            found += late_wirings(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_check_finds_hooks_pinned_on_and_leaves_state_alone() -> None:
    pinned = """
class Worker:
    def __init__(self, supervisor, load):
        supervisor.room_freed = self.wake
        load.on_calm = lambda: None
        self.watcher.on_queued = self.queue.wake
        supervisor.stop_scan = self._worker.watcher.scan
"""
    assert len(late_wirings(pinned)) == 4
    state = """
class Supervisor:
    def __init__(self, load):
        self.on_calm = load.calm
        self._wake = lambda: None
        live.lost = True
        live.task = asyncio.create_task(drive)
        conn.row_factory = sqlite3.Row
        tokenless.token = None
"""
    assert late_wirings(state) == []
