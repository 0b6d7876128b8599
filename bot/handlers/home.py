"""App Home: the Home tab opened, and its buttons (Stop, Abort, Stop all), which the
``/threadpilot`` list shows too (docs/slack-setup.md, Home tab and /threadpilot).

Every button goes through the stop service (:mod:`bot.stopping.stops`): decided, checked against
re-deliveries and committed before ``ack()`` (in the listener's middleware,
:mod:`bot.handlers.acking`), then the audit event after it. A run owned
by another worker is stopped through the database, as from its status message. The
answer goes where the button was: the Home tab is published again with the answer on
top (:class:`~bot.dashboard.refresh.HomeRefresher`); the ``/threadpilot`` list (an ephemeral
message) is replaced through its ``response_url``.

``Stop all`` is for admins (``ADMIN_USER_IDS``), and Slack asks for confirmation before
the click is sent; anyone else's click (the button is not shown to them, but a payload
can be made up) is refused and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from agent_core import StopReason, StopSource, StorageError
from bot import messages
from bot.access.stop_policy import StopAsk, Verdict
from bot.access.trust import person_of
from bot.handlers.acking import control
from bot.inbound.dedupe import click_key
from bot.stopping.decisions import stop_answer
from bot.views.home import (
    ACTION_HOME_ABORT,
    ACTION_HOME_STOP,
    ACTION_STOP_ALL,
    render_list_message,
)

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp, AsyncRespond

    from bot.config.settings import Settings
    from bot.dashboard.listing import Dashboard, StopAll
    from bot.dashboard.refresh import HomeRefresher
    from bot.handlers.context import BotContext
    from bot.stopping.decisions import StopDecision

__all__ = ["Click", "register", "respond_with_list"]

log = structlog.get_logger("bot.handlers.home")


def register(
    app: AsyncApp, ctx: BotContext, dashboard: Dashboard, refresher: HomeRefresher
) -> None:
    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        # With an agent_view, the Messages tab sends this event too (tab "messages"):
        # that is where people talk to the agent, not where the dashboard is.
        if event.get("tab", "home") != "home":
            return
        refresher.show(str(body["team_id"]), str(event["user"]))

    def stop(kind: StopReason, action_id: str) -> None:
        async def before(body: dict[str, Any]) -> Decided | None:
            return await _request(ctx, body, kind)

        async def after(decided: Decided, respond: AsyncRespond) -> None:
            await _after(ctx, dashboard, refresher, decided, respond)

        control(app, action_id, before, after)

    async def stop_all(body: dict[str, Any]) -> StoppedAll | None:
        click = Click.read(body)
        if click is None:
            log.warning("home.click_malformed", action=ACTION_STOP_ALL)
            return None
        result = await dashboard.stop_all(
            click.team, click.user, click.source, delivery=click.delivery, user_team=click.user_team
        )
        return StoppedAll(click, result)

    async def after_stop_all(stopped: StoppedAll, respond: AsyncRespond) -> None:
        click = stopped.click
        await dashboard.after_stop_all(stopped.result)
        log.info("home.stop_all", user=click.user, source=click.source.value)
        await _answer(dashboard, refresher, click, respond, stopped.result.answer)

    app.event("app_home_opened")(on_home_opened)
    stop(StopReason.STOP, ACTION_HOME_STOP)
    stop(StopReason.ABORT, ACTION_HOME_ABORT)
    control(app, ACTION_STOP_ALL, stop_all, after_stop_all)


@dataclass(frozen=True, slots=True)
class Click:
    """A press of one of the dashboard's buttons, from App Home or the command's list."""

    user: str
    team: str
    action_ts: str
    value: str
    """The run id (Stop, Abort), or ``all``."""
    source: StopSource
    user_team: str | None = None
    """The presser's own team (``user.team_id``)."""

    @property
    def delivery(self) -> str:
        return click_key(self.team, self.action_ts, self.user)

    @classmethod
    def read(cls, body: dict[str, Any]) -> Click | None:
        """The press a ``block_actions`` payload describes; None if it names no user,
        team or button (Slack always sends them)."""
        user = _field(body.get("user"), "id")
        team = _field(body.get("team"), "id") or _field(body.get("user"), "team_id")
        actions = body.get("actions")
        pressed = actions[0] if isinstance(actions, list) and actions else None
        action_ts = _field(pressed, "action_ts")
        if not all(isinstance(v, str) and v for v in (user, team, action_ts)):
            return None
        # Pressed in the Home tab (a view), or in the /threadpilot list (a message).
        in_view = _field(body.get("container"), "type") == "view"
        source = StopSource.HOME if in_view else StopSource.COMMAND
        value = str(_field(pressed, "value") or "")
        person = person_of(body)
        return cls(user, team, action_ts, value, source, person.team if person else None)


@dataclass(frozen=True, slots=True)
class Decided:
    """A Stop or Abort press, and what the stop service made of it before the ack."""

    click: Click
    decision: StopDecision


@dataclass(frozen=True, slots=True)
class StoppedAll:
    """A Stop all press, and what it asked for before the ack."""

    click: Click
    result: StopAll


async def _request(ctx: BotContext, body: dict[str, Any], kind: StopReason) -> Decided | None:
    """Before the ack: the press decided and committed; None for a malformed one."""
    click = Click.read(body)
    if click is None:
        log.warning("home.click_malformed", action=kind.value)
        return None
    ask = StopAsk(
        user=click.user,
        kind=kind,
        source=click.source,
        run_id=click.value,
        delivery=click.delivery,
        user_team=click.user_team,
        team=click.team,
    )
    with structlog.contextvars.bound_contextvars(run_id=ask.run_id, user=ask.user):
        return Decided(click, await ctx.stops.request(ask))


async def _after(
    ctx: BotContext,
    dashboard: Dashboard,
    refresher: HomeRefresher,
    decided: Decided,
    respond: AsyncRespond,
) -> None:
    click, decision = decided.click, decided.decision
    with structlog.contextvars.bound_contextvars(run_id=decision.ask.run_id, user=click.user):
        await ctx.stops.after(decision)
        verdict = decision.verdict
        log.info(
            "home.click_handled",
            action=decision.ask.kind.value,
            source=click.source.value,
            verdict=verdict.value if verdict is not None else "not_recorded",
            local=decision.local,
        )
    await _answer(dashboard, refresher, click, respond, _notice(decision, ctx.settings))


def _notice(decision: StopDecision, settings: Settings) -> str | None:
    """What to say on top of the list after a Stop or Abort (None: a re-delivery)."""
    match decision.verdict:
        case Verdict.STOP:
            return messages.STOP_ACCEPTED
        case Verdict.ABORT:
            return messages.ABORT_ACCEPTED
        case Verdict.REDELIVERED:
            return None
    return stop_answer(decision, settings)


async def _answer(
    dashboard: Dashboard,
    refresher: HomeRefresher,
    click: Click,
    respond: AsyncRespond,
    notice: str | None,
) -> None:
    if click.source is StopSource.HOME:
        refresher.show(click.team, click.user, notice=notice)
        return
    await respond_with_list(dashboard, respond, click.team, click.user, notice, replace=True)


async def respond_with_list(
    dashboard: Dashboard,
    respond: AsyncRespond,
    team: str,
    user: str,
    notice: str | None,
    *,
    replace: bool,
) -> None:
    """Post the ``/threadpilot`` list (with ``notice`` on top) to the ``response_url``,
    replacing the list the person pressed a button in when ``replace``."""
    try:
        listing = await dashboard.listing(team, user, notice=notice)
    except StorageError as exc:
        log.warning("command.not_listed", user=user, error=str(exc))
        text = f"{notice}\n{messages.DASHBOARD_UNAVAILABLE}" if notice else None
        rendered_text, blocks = text or messages.DASHBOARD_UNAVAILABLE, None
    else:
        rendered = render_list_message(listing)
        rendered_text, blocks = rendered.text, rendered.blocks
    try:
        response = await respond(
            text=rendered_text,
            blocks=blocks,
            response_type="ephemeral",
            replace_original=replace,
        )
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.warning("command.respond_failed", error=str(exc) or type(exc).__name__)
        return
    if response.status_code >= 400:
        log.warning("command.respond_refused", status=response.status_code, body=response.body)


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None
