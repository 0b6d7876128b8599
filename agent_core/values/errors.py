"""Every error the agent core raises, under one root.

    ThreadpilotError
    ├── ConfigError            a setting is missing or malformed (names the setting)
    ├── IllegalTransition      a run state change the transition table forbids
    ├── UnknownOutcome         a stored outcome word that no table knows
    ├── StorageError           a store adapter failed (wraps the driver's error)
    └── ModelError             the chat model endpoint failed
        ├── RetryableModelError   429, 5xx, timeouts, stalls, dropped or truncated streams
        │   ├── RateLimited       429, with the server's Retry-After when it sent one
        │   └── ModelUnreachable  no connection: the request never reached the model
        ├── ContextOverflow       the prompt no longer fits the model's context window
        └── FatalModelError       anything a retry cannot fix (400, 401, 403, 404, 422)

Foreign errors (aiohttp, httpx, database drivers) are translated at the boundary with
``raise ... from exc``, so callers only ever catch these.

A :class:`ModelError`'s message carries a provider's words to the thread (the status while
a retry waits, the evidence of a failed run), so it is kept as
:func:`agent_core.values.redact.public_error` makes it: keys and tokens masked, clipped.
"""

from __future__ import annotations

from agent_core.values.redact import public_error

__all__ = [
    "ConfigError",
    "ContextOverflow",
    "FatalModelError",
    "IllegalTransition",
    "ModelError",
    "ModelUnreachable",
    "RateLimited",
    "RetryableModelError",
    "StorageError",
    "ThreadpilotError",
    "UnknownOutcome",
]


class ThreadpilotError(Exception):
    """Root of every error raised on purpose by threadpilot."""


class ConfigError(ThreadpilotError):
    """A setting is missing or malformed. The message names the setting."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class IllegalTransition(ThreadpilotError):
    """A run state change that the transition table does not allow."""


class UnknownOutcome(ThreadpilotError):
    """A stored outcome word that neither the canonical nor the legacy table knows."""


class StorageError(ThreadpilotError):
    """A store adapter failed; the driver's error is chained as the cause."""


class ModelError(ThreadpilotError):
    """The chat model endpoint failed. The message is masked and clipped (module doc)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(public_error(message))
        self.status = status
        self.code = code
        """The provider's error code when it sent one (``context_length_exceeded``...)."""


class RetryableModelError(ModelError):
    """A failure that the same request may not hit again: retry it after a backoff."""


class RateLimited(RetryableModelError):
    """HTTP 429. ``retry_after`` is the server's wait in seconds, when it sent one."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, code: str | None = None
    ) -> None:
        super().__init__(message, status=429, code=code)
        self.retry_after = retry_after


class ModelUnreachable(RetryableModelError):
    """No connection to the model endpoint could be made (refused, no such host, TLS,
    a connect timeout): the request never reached the model. ``url`` is where it was
    sent, as people may read it (``public_url``); ``setting`` names the setting that
    sets it (``OPENAI_BASE_URL``...)."""

    def __init__(self, url: str, setting: str, why: str) -> None:
        super().__init__(f"could not reach the model at {url} ({setting}): {why}")
        self.url = url
        self.setting = setting


class ContextOverflow(ModelError):
    """The conversation no longer fits the model's context window."""


class FatalModelError(ModelError):
    """A failure that retrying cannot fix: a bad request, a bad key, an unknown model."""
