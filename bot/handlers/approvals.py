"""Approve, Deny and Show all clicks, on an approval message in a thread or on App Home.

A click is read into an :class:`~bot.approvals.clicks.ApprovalAsk` and decided and
committed before the ack (:func:`bot.handlers.acking.control`), as Stop is; the message
is updated in place and the audit event written after it. Show all changes nothing: it
is acknowledged at once, then opens its modal with the click's ``trigger_id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from bot.approvals.clicks import ApprovalAsk
from bot.handlers.acking import control
from bot.handlers.actions import click_origin, first_item, payload_field, presser_team
from bot.slack_api.click_answer import click_answer
from bot.views.approval import ACTION_APPROVE, ACTION_DENY, ACTION_SHOW_ALL

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

    from bot.approvals.clicks import ApprovalClick
    from bot.dashboard.refresh import HomeRefresher
    from bot.handlers.context import BotContext

__all__ = ["register"]

log = structlog.get_logger("bot.handlers.approvals")


def register(app: AsyncApp, ctx: BotContext, home: HomeRefresher) -> None:
    """Register Approve and Deny (before :func:`bot.handlers.actions.register`, whose last
    listener takes every button nobody took). A press on App Home is answered by
    publishing it again (``home``) with what the press did on top."""

    def button(action_id: str, approve: bool) -> None:
        async def before(body: dict[str, Any]) -> ApprovalClick | None:
            ask = _ask(body, approve)
            if ask is None:
                log.warning("click.malformed", action=action_id)
                return None
            with structlog.contextvars.bound_contextvars(approval_id=ask.approval_id):
                return await ctx.approvals.decide(ask)

        async def after(click: ApprovalClick, respond: AsyncRespond) -> None:
            click = await ctx.approvals.after(click, click_answer(respond))
            if click.ask.on_home and click.ask.team is not None:
                home.show(click.ask.team, click.ask.user, notice=click.notice)

        control(app, action_id, before, after)

    button(ACTION_APPROVE, True)
    button(ACTION_DENY, False)

    @app.action(ACTION_SHOW_ALL)
    async def show_all(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        ask = _ask(body, approve=False)
        trigger = body.get("trigger_id")
        if ask is None or not isinstance(trigger, str) or not trigger:
            log.warning("click.malformed", action=ACTION_SHOW_ALL)
            return
        with structlog.contextvars.bound_contextvars(approval_id=ask.approval_id):
            await ctx.approvals.show_all(ask, trigger)


def _ask(body: dict[str, Any], approve: bool) -> ApprovalAsk | None:
    user = payload_field(body.get("user"), "id")
    pressed = first_item(body.get("actions"))
    approval_id = payload_field(pressed, "value")
    if not isinstance(user, str) or not user or not isinstance(approval_id, str):
        return None
    on_home = payload_field(body.get("container"), "type") == "view"
    return ApprovalAsk(
        user=user,
        approval_id=approval_id,
        approve=approve,
        message=None if on_home else click_origin(body),
        on_home=on_home,
        team=payload_field(body.get("team"), "id") or payload_field(body.get("user"), "team_id"),
        user_team=presser_team(body),
    )
