"""The installation cache and the install state, on their own: what a request is
authorised with, how long a deleted or refused installation can still be served, and
which states the redirect takes."""

from __future__ import annotations

from cryptography.fernet import Fernet
from slack_sdk.oauth.installation_store.models.installation import Installation

from agent_core.stores.memory import MemoryStore
from bot.config.token_key import Sealer
from bot.installs.lookup import InstallationLookup
from bot.installs.oauth import OAuthStates
from bot.installs.pages import Outcome
from tests.bot.oauth_harness import TOKEN_KEY


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def installation(team: str | None, token: str, *, enterprise: str | None = None) -> Installation:
    return Installation(
        team_id=team,
        enterprise_id=enterprise,
        bot_token=token,
        bot_user_id="UBOT",
        user_id="UADMIN",
        is_enterprise_install=team is None,
    )


async def test_a_cached_installation_is_read_again_after_its_ttl() -> None:
    rows, clock = MemoryStore(), Clock()
    writer = InstallationLookup(rows, Sealer(None))  # another worker
    lookup = InstallationLookup(rows, Sealer(None), ttl_s=10, clock=clock)
    await writer.store.async_save(installation("T1", "xoxb-old"))
    assert await lookup.bot_token("T1") == "xoxb-old"

    await writer.store.async_save(installation("T1", "xoxb-new"))
    assert await lookup.bot_token("T1") == "xoxb-old"  # within its TTL
    clock.now += 10
    assert await lookup.bot_token("T1") == "xoxb-new"


async def test_a_deleted_installation_is_forgotten_by_its_worker_at_once() -> None:
    rows = MemoryStore()
    lookup = InstallationLookup(rows, Sealer(None), clock=Clock())
    await lookup.store.async_save(installation("T1", "xoxb-1"))
    assert await lookup.bot_token("T1") == "xoxb-1"

    await lookup.store.async_delete_installation(enterprise_id=None, team_id="T1")

    assert await lookup.bot_token("T1") is None


async def test_a_token_slack_refuses_is_read_again() -> None:
    rows = MemoryStore()
    writer = InstallationLookup(rows, Sealer(None))
    lookup = InstallationLookup(rows, Sealer(None), clock=Clock())
    await writer.store.async_save(installation("T1", "xoxb-revoked"))
    assert await lookup.bot_token("T1") == "xoxb-revoked"
    await writer.store.async_delete_installation(enterprise_id=None, team_id="T1")

    lookup.refused("T1", "channel_not_found")  # not about the token
    assert await lookup.bot_token("T1") == "xoxb-revoked"
    lookup.refused("T1", "token_revoked")
    assert await lookup.bot_token("T1") is None


async def test_an_org_wide_install_serves_its_workspaces() -> None:
    rows = MemoryStore()
    lookup = InstallationLookup(rows, Sealer(TOKEN_KEY), clock=Clock())
    await lookup.store.async_save(installation(None, "xoxb-org", enterprise="E1"))

    found = await lookup.store.async_find_installation(enterprise_id="E1", team_id="T9")
    assert found is not None and found.bot_token == "xoxb-org"
    assert await lookup.store.async_find_installation(enterprise_id=None, team_id="T9") is None
    stored = await rows.get_installation("E1", "")
    assert stored is not None and "xoxb-org" not in stored.secret


async def test_states_are_single_use_signed_and_expire() -> None:
    clock = Clock()
    states = OAuthStates("client-secret", MemoryStore(), ttl_s=600, clock=clock)
    first, second = await states.async_issue(), await states.async_issue()
    other_app = OAuthStates("another-secret", MemoryStore(), clock=clock)

    assert await other_app.spend(first) is Outcome.BAD_STATE
    assert await states.spend(first) is Outcome.INSTALLED
    assert await states.spend(first) is Outcome.REUSED_STATE
    clock.now += 601
    assert await states.spend(second) is Outcome.EXPIRED_STATE
    assert await states.spend("garbage") is Outcome.BAD_STATE


async def test_a_new_key_reseals_every_installation_and_the_old_key_can_go() -> None:
    rows = MemoryStore()
    old_key = TOKEN_KEY
    new_key = Fernet.generate_key().decode()
    before = InstallationLookup(rows, Sealer(old_key))
    await before.store.async_save(installation("T1", "xoxb-1"))
    await InstallationLookup(rows, Sealer(None)).store.async_save(installation("T2", "xoxb-2"))

    rotating = InstallationLookup(rows, Sealer(f"{new_key},{old_key}"))
    assert await rotating.store.reseal_all(page=1) == 2
    assert await rotating.store.reseal_all() == 0

    after = InstallationLookup(rows, Sealer(new_key))
    assert await after.bot_token("T1") == "xoxb-1"
    assert await after.bot_token("T2") == "xoxb-2"


async def test_a_workspace_of_an_org_is_found_once_its_enterprise_is_known() -> None:
    lookup = InstallationLookup(MemoryStore(), Sealer(None), clock=Clock())
    await lookup.store.async_save(installation(None, "xoxb-org", enterprise="E1"))
    assert await lookup.bot_token("T7") is None  # no request from it yet, after a restart

    lookup.remember("T7", "E1")

    assert await lookup.bot_token("T7") == "xoxb-org"
    identity = await lookup.identity("T7")
    assert identity is not None and (identity.user_id, identity.team_id) == ("UBOT", "T7")
