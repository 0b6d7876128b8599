"""What Slack answered once is not asked again and again: ``auth.test`` (start-up asks
it, and its answer authorizes every request after), and a workspace's refusal of an
optional method (``chat.startStream``, ``agents.sessions.setStatus``), remembered for
:data:`bot.slack_api.surface.RECHECK_AFTER_S` and learnt once by runs that start together.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bot.slack_api.surface import RECHECK_AFTER_S, Feature, SlackSurface
from tests.fakes import slack_requests

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from bot.slack_api.surface import Workspaces
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack


async def test_runs_that_start_together_ask_auth_test_no_more_and_learn_a_refusal_once(
    bot: Bot, llm: LLMock
) -> None:
    assert len(bot.slack.calls("auth.test")) == 1  # start-up's
    bot.slack.make_unknown("chat.startStream")
    bot.slack.make_unknown("agents.sessions.setStatus")
    mentions = [
        slack_requests.app_mention(
            f"<@{bot.slack.workspace.bot_user_id}> task {i}", channel=f"C0TPRUN{i:04d}"
        )
        for i in range(8)
    ]
    for i in range(len(mentions)):
        llm.reply(f"Done {i}.")

    statuses = await asyncio.gather(*(bot.event(envelope) for envelope in mentions))
    for envelope in mentions:
        event = envelope["event"]
        await bot.final(await bot.status_message(event["channel"], event["ts"]))

    assert statuses == [200] * len(mentions)
    assert len(bot.slack.calls("auth.test")) == 1
    assert len(bot.slack.calls("chat.startStream")) == 1
    assert len(bot.slack.calls("agents.sessions.setStatus")) == 1


async def test_a_refusal_is_believed_for_a_while_then_asked_again(
    slack: FakeSlack, workspaces: Workspaces
) -> None:
    now = [0.0]
    sessions = Feature("agent sessions", clock=lambda: now[0])
    budget = (await workspaces.get(slack.workspace.team_id)).budget
    surface = SlackSurface(slack.workspace.team_id, budget, agent_sessions=sessions)
    parent = slack.seed_message("C0TPCHAN001", "question")
    slack.make_unknown("agents.sessions.setStatus")

    async def set_status() -> object:
        return await surface.optional_call(
            sessions,
            "agents.sessions.setStatus",
            channel_id="C0TPCHAN001",
            thread_ts=parent,
            status="processing",
        )

    assert await set_status() is None
    now[0] = RECHECK_AFTER_S - 1
    assert await set_status() is None
    assert len(slack.calls("agents.sessions.setStatus")) == 1  # believed

    now[0] = RECHECK_AFTER_S + 1
    assert await set_status() is None
    assert len(slack.calls("agents.sessions.setStatus")) == 2  # asked again, refused again
