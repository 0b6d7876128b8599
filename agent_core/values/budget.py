"""One budget per request: tokens, tool calls, wall time and cost (docs/stopping.md).

A *request* is what one person asked: the top-level run and its sub-agents share one
:class:`Budget` (a child spends from its parent's), and a continuation of the request is
handed what was spent so far as a :class:`Spent` record (:meth:`Spent.to_dict` /
:meth:`Spent.from_dict`), so it carries on with what is left instead of a fresh budget.

The loop checks the budget at every step boundary (:meth:`Budget.exhaustion`) and before
each tool call (:func:`admit_calls`). Spending it takes the Stop path: the step in
flight finishes, then one forced final turn says which budget ran out, and the run ends
``blocked`` with ``EXIT-BUDGET`` (``ended_because = budget_exhausted``, never resumed on
its own). The first budget found spent is the one named, and it stays named: a budget
runs out once.

========================= ============================================== ===========
setting                    what it bounds                                 default
========================= ============================================== ===========
``RUN_TOKEN_BUDGET``       prompt + completion tokens the endpoint reports 1,000,000
``RUN_TOOL_CALL_BUDGET``   tool calls run (``final_report`` is not one)     200
``RUN_TIME_BUDGET``        wall clock from the request's start             30m
``RUN_COST_BUDGET``        USD, from ``MODEL_PRICE_INPUT``/``_OUTPUT``       none
========================= ============================================== ===========

``0`` turns one off; a cost budget needs both prices (the settings are read by
:mod:`agent_core.values.budget_settings`). The per-step cap
(``MAX_TOOL_CALLS_PER_STEP``) is applied by :func:`admit_calls` too: one model reply runs
at most that many calls, and the rest get a tool error saying so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from agent_core.values.counting import count

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from agent_core.values.chat import Usage

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_CHILDREN_PER_RUN",
    "DEFAULT_MAX_TOOL_CALLS_PER_STEP",
    "Budget",
    "BudgetKind",
    "BudgetLimits",
    "Exhaustion",
    "Prices",
    "Spent",
    "admit_calls",
]

DEFAULT_MAX_TOOL_CALLS_PER_STEP = 16
DEFAULT_MAX_CHILDREN_PER_RUN = 8


class BudgetKind(StrEnum):
    """Which budget ran out; its value is what logs and the audit trail say."""

    TOKENS = "tokens"
    TOOL_CALLS = "tool_calls"
    TIME = "time"
    COST = "cost"

    @property
    def setting(self) -> str:
        return _SETTINGS[self]

    @property
    def words(self) -> str:
        """How a sentence names it: "the token budget"."""
        return _WORDS[self]


_SETTINGS = {
    BudgetKind.TOKENS: "RUN_TOKEN_BUDGET",
    BudgetKind.TOOL_CALLS: "RUN_TOOL_CALL_BUDGET",
    BudgetKind.TIME: "RUN_TIME_BUDGET",
    BudgetKind.COST: "RUN_COST_BUDGET",
}
_WORDS = {
    BudgetKind.TOKENS: "token budget",
    BudgetKind.TOOL_CALLS: "tool-call budget",
    BudgetKind.TIME: "time budget",
    BudgetKind.COST: "cost budget",
}


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens (``MODEL_PRICE_INPUT``, ``MODEL_PRICE_OUTPUT``)."""

    input_per_million: float
    output_per_million: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """The size of one request's budget; None turns that budget off."""

    tokens: int | None = 1_000_000
    tool_calls: int | None = 200
    time_s: float | None = 30 * 60
    cost_usd: float | None = None
    prices: Prices | None = None
    """Without prices nothing is priced, and a cost budget cannot be checked."""

    def __post_init__(self) -> None:
        if self.cost_usd is not None and self.prices is None:
            raise ValueError("a cost budget needs prices (MODEL_PRICE_INPUT, MODEL_PRICE_OUTPUT)")


DEFAULT_BUDGET = BudgetLimits()


@dataclass(frozen=True, slots=True)
class Spent:
    """What a request has spent so far: serialisable, so a continuation of the request
    starts from it instead of from zero."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    elapsed_s: float = 0.0
    cost_usd: float | None = None
    """None when nothing is priced."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        """The request's usage as the terminal's ``--json`` and the store carry it."""
        data: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "tool_calls": self.tool_calls,
            "elapsed_s": round(self.elapsed_s, 3),
        }
        if self.cost_usd is not None:
            data["cost_usd"] = round(self.cost_usd, 6)
        return data

    def with_usage(self, usage: Usage, prices: Prices | None) -> Spent:
        """This, plus one request's tokens made outside a run (a summary to continue
        from), priced when ``prices`` are set."""
        cost = self.cost_usd
        if prices is not None:
            cost = (cost or 0.0) + prices.cost(usage.prompt_tokens, usage.completion_tokens)
        return Spent(
            self.prompt_tokens + usage.prompt_tokens,
            self.completion_tokens + usage.completion_tokens,
            self.tool_calls,
            self.elapsed_s,
            cost,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Spent:
        cost = data.get("cost_usd")
        return cls(
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            tool_calls=int(data.get("tool_calls", 0)),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            cost_usd=None if cost is None else float(cost),
        )


@dataclass(frozen=True, slots=True)
class Exhaustion:
    """A budget that ran out: which one, its size and what was spent of it, in words."""

    kind: BudgetKind
    limit: str
    """The budget's size ("1,000", "30.0 min", "$2.00")."""
    spent: str
    """What was spent, with its unit ("1,204 tokens")."""

    def sentence(self) -> str:
        """E.g. "The request's token budget is spent: 1,204 tokens used of 1,000
        (RUN_TOKEN_BUDGET)." """
        return (
            f"The request's {self.kind.words} is spent: {self.spent} used of {self.limit} "
            f"({self.kind.setting})."
        )


class Budget:
    """The live budget of one request, shared by its run and every sub-agent.

    Single-threaded (one event loop): charging and checking need no lock. The wall clock
    counts from :meth:`start` (the top-level run's start), plus what a continued request
    had already spent.
    """

    def __init__(
        self,
        limits: BudgetLimits = DEFAULT_BUDGET,
        *,
        spent: Spent | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._before = spent or Spent()
        """What the request had spent before this budget object took over."""
        self._prompt = 0
        self._completion = 0
        self._tool_calls = 0
        self._clock = clock
        self._started: float | None = None
        self._exhausted: Exhaustion | None = None

    def start(self) -> None:
        """Start the wall clock (once; later calls change nothing)."""
        if self._started is None:
            self._started = self._clock()

    def charge(self, usage: Usage) -> None:
        """Count one model reply's tokens, as the endpoint reported them."""
        self._prompt += usage.prompt_tokens
        self._completion += usage.completion_tokens

    def take_tool_call(self) -> Exhaustion | None:
        """Count one tool call about to run; the spent budget instead, if it is."""
        spent = self.exhaustion()
        if spent is None:
            self._tool_calls += 1
        return spent

    def spent(self) -> Spent:
        """Everything spent so far, what came before included."""
        before = self._before
        elapsed = before.elapsed_s
        if self._started is not None:
            elapsed += self._clock() - self._started
        cost = before.cost_usd
        prices = self.limits.prices
        if prices is not None:
            # Earlier legs keep the cost they were priced at; this one uses today's prices.
            cost = (cost or 0.0) + prices.cost(self._prompt, self._completion)
        return Spent(
            before.prompt_tokens + self._prompt,
            before.completion_tokens + self._completion,
            before.tool_calls + self._tool_calls,
            elapsed,
            cost,
        )

    def time_left(self) -> float | None:
        """Seconds until the time budget runs out (0 once it has); None without one."""
        if not self.limits.time_s:
            return None
        return max(0.0, self.limits.time_s - self.spent().elapsed_s)

    def exhaustion(self) -> Exhaustion | None:
        """The budget that ran out, if one has (the first found stays the answer)."""
        if self._exhausted is None:
            self._exhausted = _first_spent(self.limits, self.spent())
        return self._exhausted


def _first_spent(limits: BudgetLimits, spent: Spent) -> Exhaustion | None:
    if limits.tokens and spent.total_tokens >= limits.tokens:
        return Exhaustion(
            BudgetKind.TOKENS, f"{limits.tokens:,}", count(spent.total_tokens, "token")
        )
    if limits.tool_calls and spent.tool_calls >= limits.tool_calls:
        return Exhaustion(
            BudgetKind.TOOL_CALLS, f"{limits.tool_calls:,}", count(spent.tool_calls, "tool call")
        )
    if limits.time_s and spent.elapsed_s >= limits.time_s:
        return Exhaustion(BudgetKind.TIME, _duration(limits.time_s), _duration(spent.elapsed_s))
    cost = spent.cost_usd
    if limits.cost_usd and cost is not None and cost >= limits.cost_usd:
        return Exhaustion(BudgetKind.COST, f"${limits.cost_usd:,.2f}", f"${cost:,.4f}")
    return None


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


_C = TypeVar("_C")


def admit_calls(
    calls: Sequence[_C], *, per_step: int, budget: Budget
) -> tuple[list[_C], list[tuple[_C, str]]]:
    """Which of one reply's tool calls run, in order, and a tool error for each of the
    rest: past ``per_step`` calls, or once the request's budget is spent (checked before
    each call, and each call admitted is counted)."""
    admitted: list[_C] = []
    refused: list[tuple[_C, str]] = []
    for index, call in enumerate(calls):
        if index >= per_step:
            refused.append(
                (
                    call,
                    f"error: not run: one reply may run at most {per_step} tool calls "
                    f"(MAX_TOOL_CALLS_PER_STEP) and this was call {index + 1} of "
                    f"{len(calls)}; ask again for what you still need, fewer at a time",
                )
            )
        elif (spent := budget.take_tool_call()) is not None:
            refused.append((call, f"error: not run: {spent.sentence()}"))
        else:
            admitted.append(call)
    return admitted, refused
