"""HTTP mode that never hears from Slack: said once, since nothing else can tell.

An app created from the shipped ``manifest.yml`` has Socket Mode on, and then Slack sends
nothing to ``POST /slack/events``, however well the app listens. No Web API method the
bot token may call says how the app is set to receive events, so the app cannot ask;
what it can observe is that nothing signed by Slack has arrived. If nothing has, some
minutes after the app became ready, :class:`SlackSilence` logs one warning saying what
the likely cause is (``http.no_requests_from_slack``). The first signed request cancels
it. In a quiet workspace the warning can come though all is well: it says "if".
"""

from __future__ import annotations

import asyncio

import structlog

__all__ = ["SILENCE_S", "SlackSilence"]

log = structlog.get_logger("bot.process.slack_silence")

SILENCE_S = 180.0
"""How long after start-up HTTP mode waits for a first request from Slack before it
warns: about as long as someone trying the app waits before mentioning it again."""

HINT = (
    "nothing signed by Slack has reached POST /slack/events since start; if the app was "
    "created from the shipped manifest.yml, Socket Mode is on and Slack sends nothing "
    "here: set SLACK_APP_TOKEN, or turn Socket Mode off and set the Request URLs "
    "(docs/slack-setup.md)"
)


class SlackSilence:
    """One timer: :meth:`start` it when HTTP mode is ready, :meth:`heard` on every signed
    request, :meth:`close` at shutdown."""

    def __init__(self, after_s: float = SILENCE_S) -> None:
        self._after_s = after_s
        self._timer: asyncio.TimerHandle | None = None
        self.warned = False
        self.settled = asyncio.Event()
        """Set once Slack was heard from, or the warning given."""

    @property
    def waiting(self) -> bool:
        """Started, and neither heard from Slack nor warned yet."""
        return self._timer is not None

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._after_s, self._silent)

    def heard(self) -> None:
        """A request signed by Slack arrived: HTTP mode works."""
        self.close()
        self.settled.set()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _silent(self) -> None:
        self._timer = None
        self.warned = True
        log.warning("http.no_requests_from_slack", waited_s=self._after_s, hint=HINT)
        self.settled.set()
