"""Block Kit views: pure functions from run state to Slack message payloads.

One module per surface (``status`` for a run's status message). Views do no I/O and
take all their wording from :mod:`bot.messages`.
"""

from bot.views.status import (
    ACTION_ABORT,
    ACTION_STOP,
    CONTROLS_BLOCK_ID,
    RenderedMessage,
    StatusSnapshot,
    render_status,
)

__all__ = [
    "ACTION_ABORT",
    "ACTION_STOP",
    "CONTROLS_BLOCK_ID",
    "RenderedMessage",
    "StatusSnapshot",
    "render_status",
]
