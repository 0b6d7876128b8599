"""Identities and timestamps shared by the fake Slack server and the request builders.

`Workspace` names the team, app and bot user the fake pretends to be; the builders in
`slack_requests.py` and `FakeSlack` take the same instance so ids line up. `next_ts()`
hands out message timestamps in Slack's `"<seconds>.<micros>"` format.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
"""A decoded JSON object, as Slack sends and receives them."""

DEFAULT_CHANNEL = "C0TPCHAN001"
DEFAULT_DM_CHANNEL = "D0TPDM00001"
DEFAULT_GROUP_DM_CHANNEL = "G0TPMPIM001"
"""A group DM (``mpim``): Slack gives them ``G`` ids, like old private channels."""
DEFAULT_USER = "U0TPUSER001"
DEFAULT_USERNAME = "requester"


@dataclass(frozen=True)
class Workspace:
    """The team, app and bot user a fake Slack stands for."""

    team_id: str = "T0TPTEAM001"
    team_domain: str = "threadpilot-test"
    team_name: str = "threadpilot test"
    app_id: str = "A0TPAPP0001"
    bot_user_id: str = "U0TPBOT0001"
    bot_id: str = "B0TPBOT0001"
    bot_name: str = "threadpilot"
    # Slack still puts the (deprecated) verification token in payloads.
    verification_token: str = "fake-verification-token"
    enterprise_id: str | None = None
    """The Enterprise Grid org this workspace is part of (None: a standalone workspace)."""
    enterprise_install: bool = False
    """An org-wide install: the app serves every workspace of ``enterprise_id``."""


DEFAULT_WORKSPACE = Workspace()


class TsClock:
    """Issues unique, strictly increasing Slack timestamps close to wall-clock time.

    One clock per process: builders and the fake draw from it, so a ts minted for an
    inbound event never collides with one the fake gives to a posted message.
    """

    def __init__(self) -> None:
        self._last_us = 0

    def next(self) -> str:
        self._last_us = max(self._last_us + 1, time.time_ns() // 1000)
        return f"{self._last_us // 1_000_000}.{self._last_us % 1_000_000:06d}"

    def observe(self, ts: str) -> None:
        """Make later timestamps sort after `ts` (a test chose it by hand)."""
        seconds, micros = ts_key(ts)
        self._last_us = max(self._last_us, seconds * 1_000_000 + micros)


TS_CLOCK = TsClock()


def next_ts() -> str:
    """A fresh message timestamp, later than every one issued or observed before."""
    return TS_CLOCK.next()


def ts_key(ts: str) -> tuple[int, int]:
    """Sort key for Slack timestamps (they compare as decimals, not as strings)."""
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros.ljust(6, "0")[:6] or "0")
