"""A click's answer on the message it was pressed on, through the click's own
``response_url`` (``replace_original``).

Slack does not count those posts against ``chat.update``, so the person who pressed a
button sees its effect at once, ahead of every run's progress waiting for that budget in
the workspace (:mod:`bot.slack_api.rate_budget`). It is only the first write: whoever changes the
message writes it through the budget as well (a progress update, a final), which keeps
the order of a message's writes and is what stands if the answer is lost. A
``response_url`` takes five posts; a click makes at most one here.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import structlog

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncRespond

__all__ = ["RESPOND_TIMEOUT_S", "ClickAnswer", "click_answer"]

log = structlog.get_logger("bot.slack_api.click_answer")

RESPOND_TIMEOUT_S = 2.0
"""An answer gives up after this long; the budget's write shows the change then, later."""


class ClickAnswer(Protocol):
    async def __call__(self, text: str, blocks: list[dict[str, Any]]) -> bool:
        """Replace the clicked message with ``text`` and ``blocks``; True if Slack took
        it (a failure is logged)."""
        ...


def click_answer(respond: AsyncRespond) -> ClickAnswer:
    """The :class:`ClickAnswer` of one click, from Bolt's ``respond`` for it."""

    async def answer(text: str, blocks: list[dict[str, Any]]) -> bool:
        try:
            async with asyncio.timeout(RESPOND_TIMEOUT_S):
                response = await respond(text=text, blocks=blocks, replace_original=True)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("click.answer_failed", error=str(exc) or type(exc).__name__)
            return False
        if response.status_code >= 400:
            log.warning("click.answer_refused", status=response.status_code, body=response.body)
            return False
        return True

    return answer
