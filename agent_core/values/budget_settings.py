"""The budget settings, read once for the app and the terminal (docs/operations.md).

:func:`limits_from_settings` reads :data:`SETTINGS` from the settings' text (the
environment and ``.env``, as each surface reads them) and answers a :class:`RunLimits`:
the request's :class:`~agent_core.values.budget.BudgetLimits` and the per-step, per-run and
per-reply caps. A budget (:data:`OFF_WHEN_EMPTY`) set to ``0`` or to nothing at all
(``RUN_TOKEN_BUDGET=``) is off, and one not set is the default; any other setting left
empty is its default. A problem raises :class:`~agent_core.values.errors.ConfigError` naming
the setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core.values.budget import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_CHILDREN_PER_RUN,
    DEFAULT_MAX_TOOL_CALLS_PER_STEP,
    BudgetLimits,
    Prices,
)
from agent_core.values.errors import ConfigError
from agent_core.values.resume_policy import parse_duration

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["OFF_WHEN_EMPTY", "SETTINGS", "RunLimits", "limits_from_settings"]

SETTINGS = (
    "RUN_TOKEN_BUDGET",
    "RUN_TOOL_CALL_BUDGET",
    "RUN_TIME_BUDGET",
    "RUN_COST_BUDGET",
    "MODEL_PRICE_INPUT",
    "MODEL_PRICE_OUTPUT",
    "MAX_TOOL_CALLS_PER_STEP",
    "MAX_CHILDREN_PER_RUN",
    "MODEL_MAX_OUTPUT_TOKENS",
    "MODEL_CONTEXT_WINDOW",
)
"""The settings :func:`limits_from_settings` reads, for the app's and the terminal's."""

OFF_WHEN_EMPTY = ("RUN_TOKEN_BUDGET", "RUN_TOOL_CALL_BUDGET", "RUN_TIME_BUDGET", "RUN_COST_BUDGET")
"""The budgets: set empty, each is off (not the default), so whoever reads the settings
must keep these empty values where it drops others."""


@dataclass(frozen=True, slots=True)
class RunLimits:
    """What the budget settings say, for :class:`~agent_core.run.config.AgentConfig` and the
    model adapter."""

    budget: BudgetLimits = DEFAULT_BUDGET
    max_tool_calls_per_step: int = DEFAULT_MAX_TOOL_CALLS_PER_STEP
    max_children_per_run: int = DEFAULT_MAX_CHILDREN_PER_RUN
    max_output_tokens: int | None = None
    """``MODEL_MAX_OUTPUT_TOKENS``: each reply's cap; None leaves it to the endpoint."""
    context_window: int | None = None
    """``MODEL_CONTEXT_WINDOW``: at 90 % of it the run wraps up (``context_exhausted``)."""


def limits_from_settings(env: Mapping[str, str]) -> RunLimits:
    """The limits :data:`SETTINGS` describe in ``env`` (absent: the default; ``0`` or
    blank turns a budget off, and is the default for any other setting).

    Raises :class:`ConfigError` naming the first setting that is wrong, including a
    ``RUN_COST_BUDGET`` without both prices.
    """
    prices = _prices(env)
    cost = _amount(env, "RUN_COST_BUDGET")
    if cost and prices is None:
        raise ConfigError(
            "RUN_COST_BUDGET",
            "a cost budget needs MODEL_PRICE_INPUT and MODEL_PRICE_OUTPUT (USD per million "
            "tokens); set both, or leave RUN_COST_BUDGET empty",
        )
    time_budget = _raw(env, "RUN_TIME_BUDGET")
    budget = BudgetLimits(
        tokens=_budget(env, "RUN_TOKEN_BUDGET", DEFAULT_BUDGET.tokens),
        tool_calls=_budget(env, "RUN_TOOL_CALL_BUDGET", DEFAULT_BUDGET.tool_calls),
        time_s=(
            _blank_or(env, "RUN_TIME_BUDGET", DEFAULT_BUDGET.time_s)
            if time_budget is None
            else parse_duration("RUN_TIME_BUDGET", time_budget).total_seconds() or None
        ),
        cost_usd=cost or None,
        prices=prices,
    )
    per_step = _whole(env, "MAX_TOOL_CALLS_PER_STEP", DEFAULT_MAX_TOOL_CALLS_PER_STEP)
    children = _whole(env, "MAX_CHILDREN_PER_RUN", DEFAULT_MAX_CHILDREN_PER_RUN, zero=True)
    return RunLimits(
        budget,
        max_tool_calls_per_step=per_step or DEFAULT_MAX_TOOL_CALLS_PER_STEP,
        max_children_per_run=children or 0,
        max_output_tokens=_whole(env, "MODEL_MAX_OUTPUT_TOKENS", None),
        context_window=_whole(env, "MODEL_CONTEXT_WINDOW", None),
    )


def _blank_or(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    """None (off) for a budget set blank, else ``default`` (it is not set at all)."""
    return None if name in env else default


def _budget(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    """A budget in whole units: 0 or blank is off, absent the default."""
    if _raw(env, name) is None:
        value = _blank_or(env, name, default)
        return None if value is None else int(value)
    return _whole(env, name, default, off=True)


def _raw(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return raw or None


def _whole(
    env: Mapping[str, str], name: str, default: int | None, *, off: bool = False, zero: bool = False
) -> int | None:
    """A whole number; ``off``: 0 means None (turned off); ``zero``: 0 is allowed as is;
    otherwise it must be at least 1."""
    raw = _raw(env, name)
    if raw is None:
        return default
    text = raw.replace("_", "").replace(",", "")
    if not text.isdigit() or (int(text) == 0 and not (off or zero)):
        least = "0 or more" if off or zero else "at least 1"
        turns_off = " (0 turns it off)" if off else ""
        raise ConfigError(name, f"{raw!r} is not a whole number {least}{turns_off}")
    value = int(text)
    return None if off and value == 0 else value


def _amount(env: Mapping[str, str], name: str) -> float | None:
    raw = _raw(env, name)
    if raw is None:
        return None
    try:
        value = float(raw.removeprefix("$"))
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):  # also refuses nan
        raise ConfigError(name, f"{raw!r} is not an amount in USD, 0 or more")
    return value


def _prices(env: Mapping[str, str]) -> Prices | None:
    given = {n: _amount(env, n) for n in ("MODEL_PRICE_INPUT", "MODEL_PRICE_OUTPUT")}
    missing = [n for n, v in given.items() if v is None]
    if len(missing) == 2:
        return None
    if missing:
        other = next(n for n in given if n not in missing)
        raise ConfigError(missing[0], f"set it too ({other} is set): prices come in pairs")
    return Prices(given["MODEL_PRICE_INPUT"] or 0.0, given["MODEL_PRICE_OUTPUT"] or 0.0)
