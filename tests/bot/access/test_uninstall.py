"""A workspace uninstalls the app (``app_uninstalled``, ``tokens_revoked``, either order).

Its live run ends without another call to Slack, its rows are purged, one audit event
counts what went; another workspace's runs are untouched; its next event does nothing;
installed again, it starts clean. The real app on SQLite and PostgreSQL, the fake Slack
delivering signed payloads from two workspaces.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import pytest

from agent_core import LIVE_STATES
from bot.runs.team_end import team_event_run
from bot.runs.uninstall import AUDIT_KIND
from tests.bot.harness import SHORT_TEXT, WAIT_S, is_final, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_WORKSPACE
from tests.system.conftest import fresh_postgres
from tests.system.workers import until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

TEAM_A = DEFAULT_WORKSPACE
TEAM_B = dataclasses.replace(
    DEFAULT_WORKSPACE, team_id="T0TPTEAMB02", team_domain="team-b", team_name="team b"
)
B_CHANNEL = "C0TPCHANB01"
B_PERSON = "U0TPBPERS01"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.state.add_person(B_PERSON, team_id=TEAM_B.team_id, stranger=False)
        yield fake


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    async with fresh_postgres() as url:
        yield {"DATABASE_URL": url}


def uninstalled() -> Json:
    return slack_requests.event_callback(
        {"type": "app_uninstalled", "event_ts": f"{time.time():.6f}"}, workspace=TEAM_A
    )


def tokens_revoked() -> Json:
    tokens = {"oauth": [], "bot": [TEAM_A.bot_user_id]}
    event = {"type": "tokens_revoked", "tokens": tokens, "event_ts": f"{time.time():.6f}"}
    return slack_requests.event_callback(event, workspace=TEAM_A)


async def mention(bot: Bot, text: str, **options: object) -> Message:
    envelope = slack_requests.app_mention(
        f"<@{TEAM_A.bot_user_id}> {text}",
        **options,  # type: ignore[arg-type]
    )
    assert await bot.event(envelope) == 200
    event = envelope["event"]
    return await bot.status_message(str(event["channel"]), str(event["ts"]))


@pytest.mark.parametrize("first", ["app_uninstalled", "tokens_revoked"])
async def test_uninstalling_a_purges_only_a_and_its_next_event_does_nothing(
    make_bot: BotFactory, llm: LLMock, database: dict[str, str], first: str
) -> None:
    bot = await make_bot(**database)
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    llm.reply(SHORT_TEXT)
    await bot.final(await mention(bot, "an ended run of A"))
    llm.reply(SHORT_TEXT)
    b_final = await bot.final(
        await mention(bot, "B's run", channel=B_CHANNEL, user=B_PERSON, workspace=TEAM_B)
    )
    llm.add(*stalled_answer(30.0, with_tool=False, text=SHORT_TEXT))
    live = await mention(bot, "A's live run")
    await bot.slack.wait_for_call(
        "chat.startStream", lambda c: c.args.get("thread_ts") == live.thread_ts, timeout=WAIT_S
    )

    pair = [uninstalled(), tokens_revoked()]
    if first == "tokens_revoked":
        pair.reverse()
    calls_before = len(bot.slack.calls())
    for envelope in pair:
        assert await bot.event(envelope) == 200

    async def audited() -> list[object]:
        events = await store.events_for(team_event_run(TEAM_A.team_id))
        return [e for e in events if e.kind == AUDIT_KIND]

    (audit,) = await until_async(audited, what="the uninstall audited")
    detail = audit.detail  # type: ignore[attr-defined]
    assert detail["runs_ended"] == 1 and detail["runs_deleted"] >= 1

    async def a_purged() -> bool:
        runs = await store.find_runs(limit=100)
        return all(r.thread.team != TEAM_A.team_id for r in runs)

    await until_async(a_purged, what="A's runs purged")
    (b_run,) = await store.find_runs(limit=100)
    assert b_run.thread.team == TEAM_B.team_id and b_run.state not in LIVE_STATES
    assert bot.slack.message(b_final.channel, b_final.ts) == b_final
    # Nothing was said to A's Slack about its live run's end (a streamed chunk already
    # on its way when the event came may still land; no write of the ending does).
    after = bot.slack.calls()[calls_before:]
    said = [c for c in after if c.args.get("channel") == DEFAULT_CHANNEL]
    assert [c.method for c in said if c.method != "chat.appendStream"] == []
    assert not is_final(bot.slack.message(live.channel, live.ts))

    # A's next event does nothing: no run, no model request, no post.
    requests = len(llm.requests)
    envelope = slack_requests.app_mention(f"<@{TEAM_A.bot_user_id}> anyone there?")
    assert await bot.event(envelope) == 200
    assert await store.find_runs(limit=100) == [b_run]
    assert len(llm.requests) == requests
    assert [c for c in bot.slack.calls()[calls_before:] if c.method == "chat.postMessage"] == []

    # Installed again, A starts clean.
    assert bot.app._uninstaller is not None
    bot.app._uninstaller.reinstalled(TEAM_A.team_id)
    llm.reply(SHORT_TEXT)
    again = await mention(bot, "hello again")
    await bot.until(again, is_final)
    runs = await store.find_runs(limit=100)
    assert sorted(r.thread.team for r in runs) == [TEAM_A.team_id, TEAM_B.team_id]
