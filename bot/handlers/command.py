"""``/threadpilot``: ``list`` and ``stop all`` (admins), help for anything else
(docs/slack-setup.md, Home tab and /threadpilot).

Answered ephemerally, with the App Home controls: the list has Stop and Abort on each
live run and, for admins, ``Stop all`` (their clicks are handled in
:mod:`bot.handlers.home`). Slack wants the command acknowledged within 3 seconds, and
the acknowledgement can carry the answer, so ``list`` is read and sent with the ack.
``stop all`` commits every run's Stop first (the stop service, before the ack), answers
how many it stopped with the ack, then posts the list to the command's ``response_url``.

Slack blocks slash commands in thread composers, so the command is typed in a channel
or a DM, never in a run's thread: it names no run, and lists them instead.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import StopSource, StorageError
from bot import messages
from bot.handlers.home import respond_with_list
from bot.stopping.stops import ACK_BUDGET_S
from bot.views.home import render_list_message

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

    from bot.dashboard.listing import Dashboard

__all__ = ["COMMAND", "register"]

log = structlog.get_logger("bot.handlers.command")

COMMAND = "/threadpilot"


def register(app: AsyncApp, dashboard: Dashboard) -> None:
    async def on_command(ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond) -> None:
        team, user = str(command["team_id"]), str(command["user_id"])
        words = str(command.get("text") or "").lower().split()
        with structlog.contextvars.bound_contextvars(user=user, command=" ".join(words)):
            if words == ["list"]:
                await _list(ack, dashboard, team, user)
            elif words == ["stop", "all"]:
                await _stop_all(ack, respond, dashboard, command, team, user)
            else:
                await ack(response_type="ephemeral", text=messages.COMMAND_HELP)
                log.info("command.help")

    app.command(COMMAND)(on_command)


async def _list(ack: AsyncAck, dashboard: Dashboard, team: str, user: str) -> None:
    try:
        async with asyncio.timeout(ACK_BUDGET_S):
            listing = await dashboard.listing(team, user)
    except (StorageError, TimeoutError) as exc:
        log.warning("command.not_listed", error=str(exc) or type(exc).__name__)
        await ack(response_type="ephemeral", text=messages.DASHBOARD_UNAVAILABLE)
        return
    rendered = render_list_message(listing)
    await ack(response_type="ephemeral", text=rendered.text, blocks=rendered.blocks)
    log.info("command.listed", live=len(listing.live), ended=len(listing.ended))


async def _stop_all(
    ack: AsyncAck,
    respond: AsyncRespond,
    dashboard: Dashboard,
    command: dict[str, Any],
    team: str,
    user: str,
) -> None:
    trigger = command.get("trigger_id")
    delivery = f"command:{team}:{trigger}:{user}" if isinstance(trigger, str) and trigger else None
    result = await dashboard.stop_all(team, user, StopSource.COMMAND, delivery=delivery)
    await ack(response_type="ephemeral", text=result.answer)
    await dashboard.after_stop_all(result)
    log.info("command.stop_all", refused=result.refusal is not None)
    if result.refusal is None:
        await respond_with_list(dashboard, respond, team, user, result.answer, replace=True)
