"""Every word the install pages show a person (``/slack/install`` and its redirect): a
plain HTML page per outcome, in one place so the wording can be reviewed."""

from __future__ import annotations

import html
from enum import StrEnum

__all__ = ["Outcome", "page"]


class Outcome(StrEnum):
    """How an install through ``/slack/oauth_redirect`` ended."""

    INSTALLED = "installed"
    BAD_STATE = "bad_state"
    """The state is missing, altered, or not the one this browser was given."""
    EXPIRED_STATE = "expired_state"
    REUSED_STATE = "reused_state"
    CANCELLED = "cancelled"
    """The person did not allow the app on Slack's page."""
    REFUSED_CODE = "refused_code"
    """Slack refused to exchange the code."""
    UNAVAILABLE = "unavailable"
    """Slack or the database could not be reached."""


_TITLES = {
    Outcome.INSTALLED: "threadpilot is installed",
    Outcome.BAD_STATE: "This install link is not valid here",
    Outcome.EXPIRED_STATE: "This install link has expired",
    Outcome.REUSED_STATE: "This install link was already used",
    Outcome.CANCELLED: "threadpilot was not installed",
    Outcome.REFUSED_CODE: "Slack refused the installation",
    Outcome.UNAVAILABLE: "The installation could not be finished",
}
_AGAIN = "Start again from the install link (/slack/install) in the same browser."
_TEXTS = {
    Outcome.INSTALLED: (
        "threadpilot is now installed in {where}. Mention it in a channel it is in, or "
        "send it a direct message, to start a task. You can close this page."
    ),
    Outcome.BAD_STATE: (
        "The page that sent you here was not opened from this browser's install link, "
        "or its address was changed, so nothing was installed. " + _AGAIN
    ),
    Outcome.EXPIRED_STATE: (
        "More than ten minutes passed between the install link and Slack's answer, so "
        "nothing was installed. " + _AGAIN
    ),
    Outcome.REUSED_STATE: (
        "This answer from Slack was already used once (a reload or the back button), "
        "so nothing more was done. If the app is not installed yet: " + _AGAIN
    ),
    Outcome.CANCELLED: (
        "Slack says the installation was not allowed ({detail}), so nothing was "
        "installed. " + _AGAIN
    ),
    Outcome.REFUSED_CODE: (
        "Slack refused to complete the installation ({detail}), so nothing was installed. " + _AGAIN
    ),
    Outcome.UNAVAILABLE: (
        "The app could not reach Slack or its database to finish ({detail}), so "
        "nothing was installed. Try again in a moment: " + _AGAIN
    ),
}


def page(outcome: Outcome, *, where: str = "", detail: str = "") -> str:
    """The HTML of ``outcome``'s page; ``where`` names the workspace or organisation,
    ``detail`` is Slack's error code or what failed."""
    title = html.escape(_TITLES[outcome])
    text = html.escape(_TEXTS[outcome].format(where=where or "your workspace", detail=detail))
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head><body><h1>{title}</h1><p>{text}</p></body></html>"
    )
