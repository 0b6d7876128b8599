"""Token rotation in OAuth mode: a token is refreshed before it expires by exactly one of
two workers sharing the database (a refresh token is single-use), in the background, at
``SLACK_API_URL``; a refresh Slack refuses is retried, logged and shown by ``--check``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.installs.rotation import RotationTiming
from bot.process.check import _installations
from tests.bot.oauth_harness import install, mention_in, run_to_the_end, tokens_used_in
from tests.fakes.slack_oauth import TEAM_A

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from bot.installs.rotation import Rotation
    from tests.bot.harness import Bot
    from tests.bot.oauth_harness import OAuthBot
    from tests.fakes.slack_api import FakeSlack

HOUR = 3600
SOON = RotationTiming(refresh_before_s=2 * HOUR, check_every_s=0.01, lease_s=30, retry_base_s=0.01)
"""Refresh tokens with less than two hours left, looking every 10 ms."""


def rotation_of(bot: Bot) -> Rotation:
    rotation = bot.app._rotation
    assert rotation is not None
    return rotation


async def more_passes(*bots: Bot, count: int = 2) -> None:
    """Wait until each worker has looked for due tokens ``count`` more times."""
    for bot in bots:
        rotation = rotation_of(bot)
        await rotation.passes(rotation.passes_done + count)


async def test_two_workers_refresh_a_token_once_before_it_expires(
    slack: FakeSlack, make_oauth_bot: OAuthBot, llm: LLMock
) -> None:
    slack.oauth.rotation = True
    slack.oauth.expires_in = HOUR  # due at once
    slack.oauth.refreshed_expires_in = 12 * HOUR  # not due again
    first = await make_oauth_bot(rotation=SOON)
    second = await make_oauth_bot(rotation=SOON)
    await install(first, TEAM_A)
    installed = slack.oauth.current_token(TEAM_A)

    await slack.wait_until(lambda s: s.oauth.refreshes or None)
    await more_passes(first, second)

    assert [taken for _token, taken in slack.oauth.refreshes] == [True]
    refreshed = slack.oauth.current_token(TEAM_A)
    assert refreshed != installed
    assert all(c.token is None for c in slack.calls("oauth.v2.access"))  # client auth only
    # The next run, on either worker, uses the new token.
    llm.reply("Fresh.")
    assert TEAM_A.team_id is not None
    await run_to_the_end(second, mention_in(TEAM_A, "C0TEAMA0001"))
    assert tokens_used_in(slack, "C0TEAMA0001") <= {refreshed, installed}
    assert second.app._installs is not None
    found = await second.app._installs.store.async_find_installation(
        enterprise_id=None, team_id=TEAM_A.team_id
    )
    assert found is not None
    assert found.bot_token == refreshed


async def test_a_refused_refresh_is_retried_and_shown_by_check(
    slack: FakeSlack, make_oauth_bot: OAuthBot
) -> None:
    slack.oauth.rotation = True
    slack.oauth.expires_in = HOUR
    slack.oauth.refreshed_expires_in = 12 * HOUR
    slack.oauth.refuse_refreshes = True
    bot = await make_oauth_bot(rotation=SOON)
    await install(bot, TEAM_A)

    await slack.wait_until(lambda s: len(s.oauth.refreshes) >= 2 or None)
    await more_passes(bot)

    checks = await _installations(bot.app.settings)
    (failing,) = [c for c in checks if c.name == "token refresh"]
    assert not failing.ok
    assert f"team {TEAM_A.team_id}" in failing.detail
    assert "invalid_refresh_token" in failing.detail

    slack.oauth.refuse_refreshes = False
    await slack.wait_until(lambda s: any(taken for _t, taken in s.oauth.refreshes) or None)
    await more_passes(bot)
    assert [c.name for c in await _installations(bot.app.settings)] == ["installations"]


async def test_a_mention_never_waits_for_a_refresh(
    slack: FakeSlack, make_oauth_bot: OAuthBot, llm: LLMock
) -> None:
    slack.oauth.rotation = True
    slack.oauth.expires_in = HOUR  # due, but the background task will not look for an hour
    idle = RotationTiming(refresh_before_s=2 * HOUR, check_every_s=HOUR)
    bot = await make_oauth_bot(rotation=idle)
    await rotation_of(bot).passes(1)  # its pass at start-up, before the install
    await install(bot, TEAM_A)
    llm.reply("Done.")

    await run_to_the_end(bot, mention_in(TEAM_A, "C0TEAMA0001"))

    assert slack.oauth.refreshes == []  # the run went on with the token it had
    assert tokens_used_in(slack, "C0TEAMA0001") == {slack.oauth.current_token(TEAM_A)}
