"""InstallationRows contract: one row per (enterprise, team), upserted; the refresh lease
is held by one worker at a time; a failed refresh is counted and shown."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

from agent_core.values.clock import utcnow
from agent_core.values.records import InstallationRecord

if TYPE_CHECKING:
    from tests.stores.conftest import Backend


async def test_a_reinstall_replaces_the_row_and_keeps_when_it_was_first_installed(
    backend: Backend,
) -> None:
    store = await backend.open()
    first = utcnow() - timedelta(days=3)
    await store.save_installation(InstallationRecord("", "T1", "one", installed_at=first))
    await store.save_installation(InstallationRecord("", "T1", "two"))
    await store.save_installation(InstallationRecord("E1", "", "org"))

    other = await backend.open()
    got = await other.get_installation("", "T1")
    assert got is not None
    assert (got.secret, got.installed_at) == ("two", first)
    org = await other.get_installation("E1", "")
    assert org is not None and org.secret == "org"
    assert await other.get_installation("E1", "T1") is None


async def test_delete_removes_only_that_row(backend: Backend) -> None:
    store = await backend.open()
    await store.save_installation(InstallationRecord("", "T1", "a"))
    await store.save_installation(InstallationRecord("", "T2", "b"))

    assert await store.delete_installation("", "T1")
    assert not await store.delete_installation("", "T1")
    assert await store.get_installation("", "T1") is None
    assert await store.get_installation("", "T2") is not None


async def test_one_worker_at_a_time_holds_a_refresh(backend: Backend) -> None:
    now = utcnow()
    workers = [await backend.open() for _ in range(3)]
    await workers[0].save_installation(
        InstallationRecord("", "T1", "old", expires_at=now + timedelta(minutes=5))
    )
    await workers[0].save_installation(
        InstallationRecord("", "T2", "later", expires_at=now + timedelta(hours=5))
    )

    due = await workers[1].installations_due(now + timedelta(minutes=30), now=now)
    assert [r.team_id for r in due] == ["T1"]
    until = now + timedelta(seconds=30)
    claims = await asyncio.gather(
        *(w.claim_refresh("", "T1", f"w{i}", until=until, now=now) for i, w in enumerate(workers))
    )
    holders = [i for i, c in enumerate(claims) if c is not None]
    assert len(holders) == 1
    winner = f"w{holders[0]}"
    assert await workers[0].installations_due(now + timedelta(minutes=30), now=now) == []

    loser = "w9"
    assert not await workers[2].finish_refresh(
        "", "T1", loser, secret="x", expires_at=None, error=None, retry_at=None, now=now
    )
    new_expiry = now + timedelta(hours=12)
    assert await workers[2].finish_refresh(
        "", "T1", winner, secret="new", expires_at=new_expiry, error=None, retry_at=None, now=now
    )
    got = await workers[1].get_installation("", "T1")
    assert got is not None
    assert (got.secret, got.expires_at, got.refresh_until) == ("new", new_expiry, None)


async def test_a_lapsed_lease_can_be_taken_over(backend: Backend) -> None:
    now = utcnow()
    store, other = await backend.open(), await backend.open()
    await store.save_installation(InstallationRecord("", "T1", "s", expires_at=now))
    assert await store.claim_refresh("", "T1", "a", until=now + timedelta(seconds=5), now=now)
    later = now + timedelta(seconds=6)
    assert await other.claim_refresh("", "T1", "b", until=later + timedelta(seconds=5), now=later)
    assert not await store.finish_refresh(
        "", "T1", "a", secret="x", expires_at=None, error=None, retry_at=None, now=later
    )


async def test_a_failed_refresh_is_counted_and_retried_later(backend: Backend) -> None:
    now = utcnow()
    store = await backend.open()
    await store.save_installation(InstallationRecord("", "T1", "s", expires_at=now))
    assert await store.claim_refresh("", "T1", "a", until=now + timedelta(seconds=5), now=now)
    retry_at = now + timedelta(minutes=1)
    assert await store.finish_refresh(
        "",
        "T1",
        "a",
        secret=None,
        expires_at=None,
        error="invalid_refresh_token",
        retry_at=retry_at,
        now=now,
    )

    failing = await store.failing_refreshes()
    assert [(r.team_id, r.refresh_failures, r.refresh_error) for r in failing] == [
        ("T1", 1, "invalid_refresh_token")
    ]
    assert await store.installations_due(now + timedelta(hours=1), now=now) == []
    due_later = await store.installations_due(retry_at + timedelta(hours=1), now=retry_at)
    assert [r.team_id for r in due_later] == ["T1"]


async def test_every_installation_is_listed_a_page_at_a_time(backend: Backend) -> None:
    store = await backend.open()
    for team in ("T3", "T1", "T2"):
        await store.save_installation(InstallationRecord("", team, team))
    await store.save_installation(InstallationRecord("E1", "", "org"))

    first = await store.installations_after(limit=2)
    assert [(r.enterprise_id, r.team_id) for r in first] == [("", "T1"), ("", "T2")]
    last = first[-1]
    rest = await store.installations_after((last.enterprise_id, last.team_id), limit=2)
    assert [(r.enterprise_id, r.team_id) for r in rest] == [("", "T3"), ("E1", "")]


async def test_a_secret_is_replaced_only_if_unchanged(backend: Backend) -> None:
    store = await backend.open()
    await store.save_installation(InstallationRecord("", "T1", "sealed-old"))

    assert not await store.replace_secret("", "T1", "something-else", "sealed-new")
    assert await store.replace_secret("", "T1", "sealed-old", "sealed-new")
    got = await store.get_installation("", "T1")
    assert got is not None and got.secret == "sealed-new"
