"""Approval values: the rules an admin sets, a held call's request, its decision and its states.

The gate that holds a call until a person decides is :mod:`agent_core.run.approval_gate`.

An admin marks MCP tools in ``MCP_CONFIG`` (:class:`ApprovalRule`, per server and per
tool); a person decides through the :class:`~agent_core.ports.Approvals` port (Slack
buttons, the terminal's y/N).

States (:class:`ApprovalStatus`)::

    requested ──► approved | denied | expired | cancelled   (terminal; first one wins)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from agent_core.values.errors import ConfigError, IllegalTransition
from agent_core.values.records import ApprovalStatus
from agent_core.values.resume_policy import parse_duration

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core.values.records import ThreadKey

__all__ = [
    "APPROVAL_TIMEOUT",
    "DEFAULT_APPROVAL_TIMEOUT_S",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalRule",
    "ApprovalStatus",
    "parse_approval_timeout",
    "transition",
]

APPROVAL_TIMEOUT = "APPROVAL_TIMEOUT"
DEFAULT_APPROVAL_TIMEOUT_S = 3600.0
"""How long a call waits for a decision before it is denied as expired (``APPROVAL_TIMEOUT``)."""


def parse_approval_timeout(raw: str | None) -> float:
    """``APPROVAL_TIMEOUT`` in seconds: ``90s``, ``10m``, ``1h`` or plain seconds; empty
    means the default (1 h). Raises :class:`~agent_core.values.errors.ConfigError`."""
    if raw is None or not raw.strip():
        return DEFAULT_APPROVAL_TIMEOUT_S
    seconds = parse_duration(APPROVAL_TIMEOUT, raw).total_seconds()
    if not seconds > 0:
        raise ConfigError(APPROVAL_TIMEOUT, f"{raw!r} must be longer than 0 s")
    return seconds


class ApprovalRule(StrEnum):
    """Whether calls to a tool wait for a person (``approval`` in ``MCP_CONFIG``)."""

    NEVER = "never"
    ALWAYS = "always"
    UNLESS_READ_ONLY = "unless_read_only"
    """Asks unless the tool's MCP annotations say ``readOnlyHint: true``."""

    def asks(self, *, read_only: bool) -> bool:
        """Whether a call to a tool under this rule needs approval."""
        if self is ApprovalRule.UNLESS_READ_ONLY:
            return not read_only
        return self is ApprovalRule.ALWAYS


def transition(current: ApprovalStatus, new: ApprovalStatus) -> ApprovalStatus:
    """The one legal move is out of ``requested``; anything else raises."""
    if current is not ApprovalStatus.REQUESTED or new is ApprovalStatus.REQUESTED:
        raise IllegalTransition(f"approval cannot go from {current.value} to {new.value}")
    return new


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One held call. ``arguments`` is the model's JSON text: hostile data, shown
    parsed and escaped (:mod:`agent_core.tools.arguments`)."""

    id: str
    run_id: str
    call_id: str
    tool: str
    arguments: str
    requester: str
    thread: ThreadKey
    requested_at: datetime


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """How a request ended. ``decided_by``: who decided, as the surface names them
    (``<@U…>`` on Slack); None for a timeout or a cancellation."""

    status: ApprovalStatus
    decided_by: str | None = None

    @property
    def approved(self) -> bool:
        return self.status is ApprovalStatus.APPROVED
