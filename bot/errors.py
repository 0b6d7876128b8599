"""Every error the Slack app (`bot`) raises on purpose, under one root.

    BotError
    ├── BudgetNotRunning      a SlackRateBudget was used before start() or after close()
    ├── SlackUnreachable      start-up cannot reach Slack at its default address
    └── SlackError            a Slack Web API call failed (names the method and Slack's error)
        ├── SlackRefused         Slack answered ``ok: false`` or a 4xx: the same call fails again
        ├── SlackRateLimited     HTTP 429 that was not retried; ``retry_after`` says for how long
        └── SlackUnavailable     5xx, timeout or lost connection: Slack may or may not have acted

slack_sdk and aiohttp errors are translated where the app talks to Slack
(``bot/slack_api/rate_budget.py``) with ``raise ... from exc``, so callers only catch these.
"""

from __future__ import annotations

__all__ = [
    "BotError",
    "BudgetNotRunning",
    "SlackError",
    "SlackRateLimited",
    "SlackRefused",
    "SlackUnavailable",
    "SlackUnreachable",
]


class BotError(Exception):
    """Root of every error the Slack app raises on purpose."""


class BudgetNotRunning(BotError):
    """The workspace's SlackRateBudget is not started yet, or already closed."""

    def __init__(self, team_id: str) -> None:
        super().__init__(
            f"the Slack call budget for team {team_id} is not running: "
            "call start() before using it, and nothing after close()"
        )
        self.team_id = team_id


class SlackUnreachable(BotError):
    """Start-up cannot reach Slack at the address nobody configured (``SLACK_API_URL``'s
    default): no setting is wrong, so the one line names the network instead."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"{problem}; check this host's network connection, DNS and firewall")
        self.problem = problem


class SlackError(BotError):
    """A Slack Web API call failed. ``error`` is Slack's error code (or what went wrong)."""

    def __init__(self, message: str, *, method: str, error: str, status: int | None) -> None:
        super().__init__(message)
        self.method = method
        self.error = error
        self.status = status


class SlackRefused(SlackError):
    """Slack answered ``ok: false`` (or another 4xx): retrying the same call cannot help."""

    def __init__(self, method: str, error: str, *, status: int | None = 200) -> None:
        super().__init__(
            f"Slack refused {method}: {error}. Check the arguments, the app's scopes and "
            "that the channel or message exists; the same call will be refused again",
            method=method,
            error=error,
            status=status,
        )


class SlackRateLimited(SlackError):
    """HTTP 429. Slack did not act on the call; it accepts calls again after ``retry_after``."""

    def __init__(self, method: str, *, retry_after: float) -> None:
        super().__init__(
            f"Slack rate-limited {method} for {retry_after:g} s and the call was not retried; "
            "send it again after that, or drop it if it is no longer useful",
            method=method,
            error="ratelimited",
            status=429,
        )
        self.retry_after = retry_after


class SlackUnavailable(SlackError):
    """A 5xx answer, a timeout or a lost connection: the call's effect is unknown."""

    def __init__(self, method: str, error: str, *, status: int | None = None) -> None:
        super().__init__(
            f"{method} failed ({error}) and Slack may or may not have acted on it; resend it "
            "only if doing it twice is harmless (for chat.postMessage, look for the message "
            "first)",
            method=method,
            error=error,
            status=status,
        )
