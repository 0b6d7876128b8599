"""Harmless tools every threadpilot agent has out of the box.

Real deployments add their own with :func:`agent_core.tools.toolbox.tool`; these exist so the
terminal runner and a fresh Slack install can show a tool call end to end.

Both are synchronous and bounded in the work their arguments can ask for: a sync tool
runs in a thread, and one long C-level operation there (a huge integer power, say) holds
the interpreter lock and freezes the whole process, health checks and clicks included.
So ``calculate`` refuses, before computing anything, an expression that is too long or
too large a tree, and any operation whose result would exceed :data:`MAX_RESULT_BITS`
(estimated from the operands' bit lengths), and it answers the model with what the
limit is.
"""

from __future__ import annotations

import ast
import math
import operator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from agent_core.tools.toolbox import Tool, tool

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BUILTIN_TOOLS", "MAX_EXPRESSION_CHARS", "MAX_EXPRESSION_NODES", "MAX_RESULT_BITS"]

MAX_EXPRESSION_CHARS = 500
MAX_EXPRESSION_NODES = 300
"""Syntax tree nodes (numbers, operators and operations) in one expression."""
MAX_RESULT_BITS = 4096
"""Largest integer anywhere in a calculation: about 1,233 decimal digits."""

_Number = int | float

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
def calculate(
    expression: Annotated[
        str,
        Field(
            max_length=MAX_EXPRESSION_CHARS,
            description=f"Numbers with + - * / // % ** and parentheses; integers up to "
            f"{MAX_RESULT_BITS} bits.",
        ),
    ],
) -> str:
    """Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(
            f"the expression has {len(expression):,} characters; "
            f"the limit is {MAX_EXPRESSION_CHARS:,}"
        )
    tree = ast.parse(expression, mode="eval")
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_EXPRESSION_NODES:
        raise ValueError(
            f"the expression has {nodes:,} parts; the limit is {MAX_EXPRESSION_NODES:,}: "
            "split it into smaller calculations"
        )
    return str(_evaluate(tree.body))


def _evaluate(node: ast.AST) -> _Number:
    if isinstance(node, ast.Constant) and _is_number(node.value):
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        _refuse_if_too_large(node.op, left, right)
        return _checked(_OPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _checked(_OPS[type(node.op)](_evaluate(node.operand)))
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _refuse_if_too_large(op: ast.operator, left: _Number, right: _Number) -> None:
    """Estimate the result's size from the operands before computing it.

    Only integer ``*`` and ``**`` can outgrow their operands by more than a bit; float
    arithmetic takes constant time (it overflows to an error or infinity instead).
    """
    if not (isinstance(left, int) and isinstance(right, int)):
        return
    if isinstance(op, ast.Mult):
        bits = left.bit_length() + right.bit_length()
        if bits > MAX_RESULT_BITS + 1:
            raise _too_large(bits)
    elif isinstance(op, ast.Pow) and right > 0 and abs(left) > 1:
        if right > MAX_RESULT_BITS:  # |left| >= 2, so at least `right` bits
            raise _too_large()
        bits = math.ceil(right * math.log2(abs(left)))
        if bits > MAX_RESULT_BITS + 1:
            raise _too_large(bits)


def _checked(value: object) -> _Number:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is too large for a floating-point number")
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise _too_large(value.bit_length())
    assert isinstance(value, int | float)
    return value


def _too_large(bits: int | None = None) -> ValueError:
    size = f"about {bits:,}" if bits is not None else f"more than {MAX_RESULT_BITS:,}"
    return ValueError(
        f"the result would have {size} bits; calculate handles integers up to "
        f"{MAX_RESULT_BITS:,} bits (about {int(MAX_RESULT_BITS * math.log10(2)):,} digits)"
    )


BUILTIN_TOOLS: tuple[Tool, ...] = (current_time, calculate)
