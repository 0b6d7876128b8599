"""Enterprise Grid: one enterprise is one organisation (docs/slack-setup.md, Who may use
threadpilot).

An org-wide install gets events from every workspace of its enterprise. A person of any
of those workspaces is a coworker, wherever they write; a person of another enterprise
(or a standalone workspace) in a shared channel is from another organisation. Signed
events over the fake Slack, which stands for a workspace of an enterprise and whose
``users.info`` says each person's enterprise.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from bot import messages
from bot.access.organisation import Organisations, Scope, scope_of
from bot.runs.team_end import team_event_run
from tests.bot.harness import SHORT_TEXT, WAIT_S, block_text, is_final, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_WORKSPACE
from tests.system.workers import until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from tests.bot.harness import Bot
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

ORG = "E0TPORG0001"
HOME = dataclasses.replace(DEFAULT_WORKSPACE, enterprise_id=ORG, enterprise_install=True)
"""The workspace the app's token answers for, in the org ``ORG`` (installed org-wide)."""
SIBLING = dataclasses.replace(
    HOME, team_id="T0TPTEAM002", team_domain="sibling", team_name="sibling workspace"
)
"""Another workspace of the same org."""
COWORKER = "W0TPCOWORK1"
"""Of ``SIBLING``'s team, writing in a channel of ``HOME``'s."""
OTHER_ORG_TEAM = "T0OTHERORG9"
STRANGER = "W0TPSTRANG1"
"""Of another enterprise's workspace, in a channel shared with ours."""


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(HOME) as fake:
        fake.state.add_person(COWORKER, team_id=SIBLING.team_id, enterprise_id=ORG)
        fake.state.add_person(
            STRANGER, team_id=OTHER_ORG_TEAM, enterprise_id="E0OTHERORG9", stranger=True
        )
        yield fake


def written_by(envelope: Json, user: str, team: str) -> Json:
    envelope["event"] |= {"user": user, "user_team": team, "source_team": team}
    return envelope


async def status_in(bot: Bot, thread_ts: str) -> Message:
    return await bot.status_message(DEFAULT_CHANNEL, thread_ts)


async def test_a_coworker_of_another_workspace_of_the_org_may_start_a_run(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply(SHORT_TEXT)
    mention = written_by(
        slack_requests.app_mention("go", workspace=HOME), COWORKER, SIBLING.team_id
    )
    assert await bot.event(mention) == 200

    status = await status_in(bot, mention["event"]["ts"])
    final = await bot.final(status)
    assert "Finished" in block_text(final)
    assert bot.ephemerals_for(COWORKER, DEFAULT_CHANNEL) == []


async def test_someone_of_another_enterprise_is_refused(bot: Bot, llm: LLMock) -> None:
    mention = written_by(slack_requests.app_mention("go", workspace=HOME), STRANGER, OTHER_ORG_TEAM)
    assert await bot.event(mention) == 200

    assert await bot.ephemerals(STRANGER) == [messages.EXTERNAL_NOT_ALLOWED]
    assert [m for m in bot.slack.messages(DEFAULT_CHANNEL) if m.is_bot] == []
    assert llm.requests == []


async def test_an_org_wide_install_serves_a_second_workspace_of_the_org(
    bot: Bot, llm: LLMock
) -> None:
    llm.reply(SHORT_TEXT)
    mention = written_by(
        slack_requests.app_mention("go", workspace=SIBLING), COWORKER, SIBLING.team_id
    )
    assert await bot.event(mention) == 200

    status = await status_in(bot, mention["event"]["ts"])
    await bot.until(status, is_final)
    assert bot.app.ctx is not None
    (run,) = await bot.app.ctx.store.find_runs(limit=10)
    assert (run.thread.team, run.enterprise_id) == (SIBLING.team_id, ORG)
    assert bot.ephemerals_for(COWORKER, DEFAULT_CHANNEL) == []


async def test_team_access_events_teach_the_orgs_workspaces_and_are_audited(
    bot: Bot, llm: LLMock
) -> None:
    added = "T0TPTEAM003"
    granted = slack_requests.event_callback(
        {"type": "team_access_granted", "team_ids": [added], "event_ts": "1.0"}, workspace=HOME
    )
    assert await bot.event(granted) == 200
    assert bot.app.ctx is not None
    store = bot.app.ctx.store

    async def audited(kind: str) -> bool:
        return any(e.kind == kind for e in await store.events_for(team_event_run(added)))

    await until_async(lambda: audited("team.access_granted"), what="the grant audited")
    # Someone of the new workspace is a coworker at once, though users.info (asked only
    # whether they are a guest) names no enterprise for them.
    newcomer = "W0TPNEW0001"
    bot.slack.state.add_person(newcomer, team_id=added, stranger=False)
    llm.reply(SHORT_TEXT)
    mention = written_by(slack_requests.app_mention("go", workspace=HOME), newcomer, added)
    assert await bot.event(mention) == 200
    await bot.until(await status_in(bot, mention["event"]["ts"]), is_final)
    assert bot.ephemerals_for(newcomer, DEFAULT_CHANNEL) == []

    revoked = slack_requests.event_callback(
        {"type": "team_access_revoked", "team_ids": [added], "event_ts": "2.0"}, workspace=HOME
    )
    assert await bot.event(revoked) == 200
    await until_async(lambda: audited("team.access_revoked"), what="the revocation audited")


def test_a_payloads_workspace_and_enterprise() -> None:
    mention = slack_requests.app_mention("hi", workspace=SIBLING)
    assert scope_of(mention) == Scope(SIBLING.team_id, ORG)
    click = slack_requests.button_click(action_id="a", value="v", message_ts="1.0", workspace=HOME)
    assert scope_of(click) == Scope(HOME.team_id, ORG)
    plain = slack_requests.app_mention("hi")
    assert scope_of(plain) == Scope(DEFAULT_WORKSPACE.team_id, None)
    assert scope_of({"type": "nothing"}) is None


def test_one_enterprise_is_one_organisation() -> None:
    orgs = Organisations(Scope("T1", "E1"))
    orgs.learn(Scope("T2", "E1"))
    orgs.learn(Scope("T9", "E9"))
    assert orgs.same("T1", "T2") and orgs.same("T2", "T1") and orgs.same("T1", "E1")
    assert not orgs.same("T1", "T9") and not orgs.same("T1", "T3")
    orgs.forget("T2")
    assert not orgs.same("T1", "T2")
    standalone = Organisations(Scope("T5", None))
    assert standalone.same("T5", "T5") and not standalone.same("T5", "T6")


async def test_a_revoked_workspaces_live_run_ends_without_a_word_to_slack(
    bot: Bot, llm: LLMock
) -> None:
    llm.add(*stalled_answer(30.0, with_tool=False, text=SHORT_TEXT))
    mention = written_by(
        slack_requests.app_mention("go", workspace=SIBLING), COWORKER, SIBLING.team_id
    )
    assert await bot.event(mention) == 200
    status = await status_in(bot, mention["event"]["ts"])
    thread_ts = mention["event"]["ts"]
    await bot.slack.wait_for_call(
        "chat.startStream", lambda c: c.args.get("thread_ts") == thread_ts, timeout=WAIT_S
    )
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    (run,) = await store.find_runs(limit=10)

    calls_before = len(bot.slack.calls())
    revoked = slack_requests.event_callback(
        {"type": "team_access_revoked", "team_ids": [SIBLING.team_id], "event_ts": "3.0"},
        workspace=HOME,
    )
    assert await bot.event(revoked) == 200

    async def ended() -> bool:
        found = await store.get_run(run.id)
        return found is not None and found.state.is_terminal

    await until_async(ended, what="the revoked workspace's run ended")
    said = [c.method for c in bot.slack.calls()[calls_before:] if c.method != "chat.appendStream"]
    assert said == []  # no ending written to a workspace the app may no longer reach
    assert not is_final(bot.slack.message(status.channel, status.ts))
