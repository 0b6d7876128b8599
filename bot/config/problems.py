"""Settings problems, each one line naming its setting: pydantic's validation errors made
:class:`ConfigError` s (:func:`problems_of`), the error types the settings' validators
raise for it, and the one rule for a value copied from an example (:func:`placeholder`)."""

from __future__ import annotations

from typing import Any

from agent_core.process.settings_file import missing
from agent_core.values.errors import ConfigError

__all__ = [
    "MISSING_FOR_API",
    "MISSING_FOR_OAUTH",
    "NO_TRANSPORT",
    "ONE_MODE_ONLY",
    "placeholder",
    "problems_of",
]


def problems_of(error: Any, env_file: object) -> list[ConfigError]:
    location = [str(p) for p in error["loc"]]
    message = str(error["msg"]).removeprefix("Value error, ")
    if not location:  # a model validator's "SETTING: problem"
        name, _, problem = message.partition(": ")
        return [ConfigError(name, problem)]
    if error["type"] == "missing":
        return [ConfigError(location[0], missing(env_file))]
    if error["type"] == MISSING_FOR_API:  # "missing (required with ...): set it in ..."
        return [ConfigError(location[0], missing(env_file, message))]
    if error["type"] == MISSING_FOR_OAUTH:
        return [ConfigError(location[0], missing(env_file, _OAUTH_NEEDS))]
    if error["type"] == NO_TRANSPORT:
        return [
            ConfigError("SLACK_APP_TOKEN", missing(env_file, _SOCKET_MODE_NEEDS)),
            ConfigError("SLACK_SIGNING_SECRET", missing(env_file, _HTTP_NEEDS)),
        ]
    return [ConfigError(location[0], message)]


ONE_MODE_ONLY = (
    "is set together with SLACK_CLIENT_ID: choose one mode, a bot token for one workspace "
    "or OAuth (SLACK_CLIENT_ID, SLACK_CLIENT_SECRET) for many, and unset the other"
)
MISSING_FOR_OAUTH = "missing_for_oauth"
"""The error type of an OAuth setting missing while ``SLACK_CLIENT_ID`` is set."""
_OAUTH_NEEDS = "OAuth mode (SLACK_CLIENT_ID is set) needs it"
MISSING_FOR_API = "missing_for_api"
"""The error type of a setting only the chosen ``MODEL_API`` requires."""
NO_TRANSPORT = "no_transport"
"""The error type of neither ``SLACK_APP_TOKEN`` nor ``SLACK_SIGNING_SECRET`` set."""
_SOCKET_MODE_NEEDS = "Socket Mode needs it, and the shipped manifest.yml turns Socket Mode on"
_HTTP_NEEDS = "HTTP mode needs it instead of SLACK_APP_TOKEN"


_PLACEHOLDER_MARKS = ("...", "<", ">", "your-", "your_", "changeme")


def placeholder(value: str, prefix: str = "") -> bool:
    """A value copied from an example instead of a real one (``xoxb-``, ``sk-...``)."""
    bare = value.strip()
    return bare == prefix or any(mark in bare.lower() for mark in _PLACEHOLDER_MARKS)
