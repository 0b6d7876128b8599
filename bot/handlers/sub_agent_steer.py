"""Steer… on a live sub-agent: a modal whose text is guidance for that sub-agent alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from bot.handlers.context import BotContext

__all__ = ["open_steer"]

log = structlog.get_logger("bot.handlers.sub_agent_steer")


async def open_steer(ctx: BotContext, body: dict[str, Any]) -> None:
    """After the ack of Steer…: open its modal with the click's ``trigger_id``."""
    log.info("steer.not_yet", user=ctx.me.user_id, keys=sorted(body))
