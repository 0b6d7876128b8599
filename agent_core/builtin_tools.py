"""Harmless tools every threadpilot agent has out of the box.

Real deployments add their own with :func:`agent_core.tools.tool`; these exist so the
terminal runner and a fresh Slack install can show a tool call end to end.
"""

from __future__ import annotations

import ast
import operator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agent_core.tools import Tool, tool

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BUILTIN_TOOLS"]

_OPS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


@tool
def current_time() -> str:
    """The current date and time in UTC, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
    return str(_evaluate(ast.parse(expression, mode="eval").body))


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        right = _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](_evaluate(node.left), right)  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.operand))  # type: ignore[no-any-return]
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")


BUILTIN_TOOLS: tuple[Tool, ...] = (current_time, calculate)
