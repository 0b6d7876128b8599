"""Isolation by workspace: a payload from team B naming team A's run changes nothing.

The run id in a button's value, on a Home tab or in an approval can be copied; the
workspace a signed payload comes from cannot. A Stop, an Abort, a Home click or an
Approve from another workspace leaves the run as it was and gets an answer saying so.
The app runs for real on SQLite and on PostgreSQL, with the fake Slack delivering
signed payloads from two workspaces.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from bot import messages
from bot.views.approval import ACTION_APPROVE, ACTION_DENY
from bot.views.home import ACTION_HOME_STOP, ACTION_STOP_ALL
from tests.bot.access.test_trust import finishes_untouched, running
from tests.bot.approvals.test_approvals import approval_id_of, notes_config, waiting
from tests.bot.dashboard.test_home import home, open_home, press, says, view_text
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, SECRET, buttons, run_id_of
from tests.fakes import slack_requests
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.conftest import fresh_postgres

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.fakes.mcp_server import FakeMcpServer

__all__ = ["notes_config"]  # a fixture, used here

TEAM_B = dataclasses.replace(
    DEFAULT_WORKSPACE, team_id="T0TPTEAMB02", team_domain="team-b", team_name="team b"
)
"""Another workspace the app is installed in."""
B_ADMIN = "U0TPBADMIN1"
"""An admin of team B (``users.info``'s ``is_admin``; some tests name them in
``ADMIN_USER_IDS`` too)."""
A_OWNER = "U0TPAOWNER1"
"""An owner of team A (``users.info``'s ``is_owner``), not in ``ADMIN_USER_IDS``."""


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """The fake Slack, knowing team B's admin as a member of team B."""
    async with FakeSlack() as fake:
        fake.state.add_person(B_ADMIN, team_id=TEAM_B.team_id, stranger=False, admin=True)
        fake.state.add_person(A_OWNER, owner=True)
        yield fake


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    async with fresh_postgres() as url:
        yield {"DATABASE_URL": url}


@pytest.mark.parametrize("action", [ACTION_STOP, ACTION_ABORT])
async def test_a_button_pressed_from_another_workspace_changes_nothing(
    make_bot: BotFactory, llm: LLMock, database: dict[str, str], action: str
) -> None:
    bot = await make_bot(STOP_POLICY="anyone", **database)
    _, status = await running(bot, llm)

    current = bot.slack.message(status.channel, status.ts)
    payload = slack_requests.click_button(current, action, user=B_ADMIN, workspace=TEAM_B)
    assert await press(bot, payload) == 200

    assert await bot.ephemerals(B_ADMIN) == [messages.CLICK_NOT_FROM_RUN]
    await finishes_untouched(bot, status, llm)


async def test_a_home_stop_from_another_workspace_changes_nothing(
    make_bot: BotFactory, llm: LLMock, database: dict[str, str]
) -> None:
    bot = await make_bot(ADMIN_USER_IDS=f"{B_ADMIN},U0TPADMIN01", **database)
    _, status = await running(bot, llm)
    await open_home(bot, "U0TPADMIN01")
    admins = await home(bot, "U0TPADMIN01", lambda v: ACTION_HOME_STOP in view_text(v))

    # Team B's admin presses the Stop copied from team A's Home (the run id is in it).
    run_stop = [
        e["value"]
        for b in admins["blocks"]
        for e in b.get("elements", [])
        if isinstance(e, dict) and e.get("action_id") == ACTION_HOME_STOP
    ]
    payload = slack_requests.home_click(
        admins, ACTION_HOME_STOP, value=run_stop[0], user=B_ADMIN, workspace=TEAM_B
    )
    assert await press(bot, payload) == 200

    await home(bot, B_ADMIN, says(messages.NOT_THIS_WORKSPACE))
    await finishes_untouched(bot, status, llm)


async def test_stop_all_and_the_list_of_another_workspace_leave_this_ones_runs(
    make_bot: BotFactory, llm: LLMock, database: dict[str, str]
) -> None:
    bot = await make_bot(ADMIN_USER_IDS=B_ADMIN, **database)
    _, status = await running(bot, llm)

    opened = slack_requests.app_home_opened(user=B_ADMIN, workspace=TEAM_B)
    assert await bot.event(opened) == 200
    view = await home(bot, B_ADMIN, lambda v: bool(v.get("blocks")))
    assert ACTION_HOME_STOP not in view_text(view)  # team A's run is not listed
    assert ACTION_STOP_ALL not in view_text(view)
    for text in ("list", "stop all"):
        fields = slack_requests.slash_command(text, user=B_ADMIN, workspace=TEAM_B)
        request = slack_requests.command_request(fields, SECRET)
        async with bot.http.post(
            f"{bot.url}/slack/events", data=request.body, headers=request.headers
        ) as response:
            assert response.status == 200
            assert ACTION_HOME_STOP not in await response.text()

    await finishes_untouched(bot, status, llm)


async def test_an_approve_from_another_workspaces_home_changes_nothing(
    make_bot: BotFactory,
    llm: LLMock,
    fake: FakeMcpServer,
    notes_config: str,
    database: dict[str, str],
) -> None:
    bot = await make_bot(MCP_CONFIG=notes_config, APPROVAL_POLICY="anyone", **database)
    status, approval = await waiting(bot, llm, fake)
    await open_home(bot)
    view = await home(bot, DEFAULT_USER, says(messages.HEADING_APPROVALS))

    payload = slack_requests.home_click(
        view, ACTION_APPROVE, value=approval_id_of(approval), user=B_ADMIN, workspace=TEAM_B
    )
    assert await press(bot, payload) == 200
    await home(bot, B_ADMIN, says(messages.APPROVAL_NOT_FOUND))

    # Still waiting for someone of team A: the call never ran.
    assert ACTION_APPROVE in buttons(bot.slack.message(approval.channel, approval.ts))
    assert all(name != "write_note" for name, *_ in fake.notes)
    assert bot.app.ctx is not None
    record = await bot.app.ctx.store.get_approval(approval_id_of(approval))
    assert record is not None and not record.status.terminal
    assert await bot.click(approval, ACTION_DENY) == 200  # its requester, in team A
    await bot.final(status)
    assert all(name != "write_note" for name, *_ in fake.notes)


async def test_a_workspaces_owner_administers_its_runs_and_not_another_workspaces(
    make_bot: BotFactory, llm: LLMock, database: dict[str, str]
) -> None:
    bot = await make_bot(**database)  # STOP_POLICY=requester, nobody in ADMIN_USER_IDS
    _, status = await running(bot, llm)

    # Team B's admin is nobody special in team A: its Home lists none of A's runs.
    opened = slack_requests.app_home_opened(user=B_ADMIN, workspace=TEAM_B)
    assert await bot.event(opened) == 200
    view = await home(bot, B_ADMIN, lambda v: bool(v.get("blocks")))
    assert ACTION_HOME_STOP not in view_text(view)

    # Team A's owner sees every run of A on their Home, and may stop someone else's.
    await open_home(bot, A_OWNER)
    owners = await home(bot, A_OWNER, lambda v: ACTION_HOME_STOP in view_text(v))
    assert await bot.click(status, ACTION_STOP, user=A_OWNER) == 200
    await bot.final(status)
    assert bot.ephemerals_for(A_OWNER, status.channel) == []  # not refused
    assert bot.app.ctx is not None
    requests = await bot.app.ctx.store.stop_requests_for(run_id_of(status))
    assert [r.requested_by for r in requests] == [A_OWNER]
    assert ACTION_STOP_ALL in view_text(owners)


@pytest.mark.parametrize("text", ["also check the logs", "stop"])
async def test_a_reply_or_stop_word_from_another_workspace_reaches_no_run_here(
    make_bot: BotFactory, llm: LLMock, database: dict[str, str], text: str
) -> None:
    bot = await make_bot(STOP_POLICY="anyone", **database)
    thread_ts, status = await running(bot, llm)

    # The same channel and thread ids, in team B: another thread altogether.
    reply = slack_requests.thread_reply(text, thread_ts=thread_ts, user=B_ADMIN, workspace=TEAM_B)
    assert await bot.event(reply) == 200

    await finishes_untouched(bot, status, llm)
    assert bot.app.ctx is not None
    assert await bot.app.ctx.store.guidance_for(run_id_of(status)) == []
