"""Token rotation: each installation's access token is refreshed before it expires, by
one worker at a time, in the background (never on a click's path). The same task first
re-seals installations after a change of ``SLACK_TOKEN_KEY`` (once, at start).

Every :data:`CHECK_EVERY_S`, each worker lists the installations whose token expires
within :data:`REFRESH_BEFORE_S` and takes each one's refresh lease in the database
(:meth:`~agent_core.ports.InstallationRows.claim_refresh`): a refresh token is single-use,
so a second worker refreshing with it would break the installation. The holder calls
``oauth.v2.access`` (``grant_type=refresh_token``) at ``SLACK_API_URL`` (Bolt's
``AsyncTokenRotator`` would call slack.com whatever the app's address), then stores the
new tokens and ends the lease in one statement. A worker that takes a lease and finds
the token already fresh (another refreshed it meanwhile) gives it back untouched.

A refresh that fails is logged, counted on the row (``--check`` shows it) and tried again
after a growing pause (:func:`retry_after_s`); the old token works until it expires.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.oauth.installation_store.models.installation import Installation

from agent_core import StorageError
from agent_core.values.clock import utcnow
from bot.config.token_key import SecretUnreadable
from bot.installs.oauth import oauth_v2_access
from bot.installs.store import expiry_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from slack_sdk.web.async_client import AsyncWebClient

    from agent_core.ports import InstallationRows
    from agent_core.values.records import InstallationRecord
    from bot.installs.lookup import InstallationLookup
    from bot.installs.store import InstallationStore

__all__ = [
    "CHECK_EVERY_S",
    "LEASE_S",
    "REFRESH_BEFORE_S",
    "ROTATION",
    "Rotation",
    "RotationTiming",
    "retry_after_s",
]

log = structlog.get_logger("bot.installs.rotation")

REFRESH_BEFORE_S = 2 * 3600.0
"""Refresh a token this long before it expires (Slack's last 12 hours): room for many
retries if Slack or the database is down for a while."""
CHECK_EVERY_S = 60.0
LEASE_S = 60.0
"""How long a worker holds a refresh: far more than one ``oauth.v2.access`` takes (its
request is bounded by :data:`CALL_TIMEOUT_S`)."""
CALL_TIMEOUT_S = 15.0
CLOSE_WAIT_S = 3.0
"""At shutdown, how long a refresh under way may take to finish before it is cancelled."""


def retry_after_s(failures: int, base_s: float = 60.0) -> float:
    """The pause before trying a failed refresh again: 1, 2, 4 ... minutes (``base_s``
    doubled each time), at most 30 base periods."""
    return float(min(base_s * 2.0 ** max(failures - 1, 0), base_s * 30))


@dataclass(frozen=True, slots=True)
class RotationTiming:
    refresh_before_s: float = REFRESH_BEFORE_S
    check_every_s: float = CHECK_EVERY_S
    lease_s: float = LEASE_S
    retry_base_s: float = 60.0


ROTATION = RotationTiming()
"""The timing the app runs with."""


class Rotation:
    """This worker's token refresher: a task of its own, started and closed by the app."""

    def __init__(
        self,
        rows: InstallationRows,
        installations: InstallationStore,
        lookup: InstallationLookup,
        client: AsyncWebClient,
        *,
        client_id: str,
        client_secret: str,
        owner: str,
        timing: RotationTiming = ROTATION,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """``installations``: what seals and opens the installations in ``rows``;
        ``lookup``: the cache that forgets a refreshed one; ``client``: a tokenless Web
        API client at ``SLACK_API_URL``."""
        self._rows = rows
        self._installations = installations
        self._lookup = lookup
        self._client = client
        self._client_id = client_id
        self._client_secret = client_secret
        self._owner = owner
        self._timing = timing
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._passes = 0
        self._passed = asyncio.Condition()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="token-rotation")

    async def close(self) -> None:
        """Stop after the refresh under way, if any (waiting up to :data:`CLOSE_WAIT_S`;
        a refresh Slack has answered is always stored, see :meth:`_refresh`)."""
        self._closing.set()
        task, self._task = self._task, None
        if task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await asyncio.shield(task)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def passes(self, count: int) -> None:
        """Wait until this worker has looked for due tokens ``count`` times in all."""
        async with self._passed:
            await self._passed.wait_for(lambda: self._passes >= count)

    @property
    def passes_done(self) -> int:
        return self._passes

    async def _loop(self) -> None:
        await self._reseal()
        while not self._closing.is_set():
            try:
                await self.run_once()
            except StorageError as exc:
                log.warning("token_rotation.database_unavailable", error=str(exc))
            async with self._passed:
                self._passes += 1
                self._passed.notify_all()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._timing.check_every_s):
                    await self._closing.wait()

    async def _reseal(self) -> None:
        """Once, at start: installations sealed in clear or with an older key are sealed
        with the newest ``SLACK_TOKEN_KEY`` (a key rotation, docs/admin.md)."""
        try:
            resealed = await self._installations.reseal_all()
        except (StorageError, SecretUnreadable) as exc:
            log.warning("installations.not_resealed", error=str(exc))
            return
        if resealed:
            log.info("installations.resealed", count=resealed)

    async def run_once(self) -> int:
        """Refresh what is due now; how many this worker refreshed."""
        now = self._clock()
        due = await self._rows.installations_due(
            now + timedelta(seconds=self._timing.refresh_before_s), now=now
        )
        refreshed = 0
        for record in due:
            if self._closing.is_set():
                break
            refreshed += await self._refresh(record.enterprise_id, record.team_id)
        return refreshed

    async def _refresh(self, enterprise_id: str, team_id: str) -> bool:
        now = self._clock()
        until = now + timedelta(seconds=self._timing.lease_s)
        held = await self._rows.claim_refresh(
            enterprise_id, team_id, self._owner, until=until, now=now
        )
        if held is None:
            return False  # another worker is at it
        horizon = now + timedelta(seconds=self._timing.refresh_before_s)
        if held.expires_at is None or held.expires_at >= horizon:
            # Refreshed by another worker since we listed it: hand the lease back.
            await self._finish(held, secret=held.secret, expires_at=held.expires_at)
            return False
        try:
            installation = self._installations.open(held)
            refreshed = await self._exchange(installation)
        except (
            SlackApiError,
            SlackClientError,
            aiohttp.ClientError,
            OSError,
            TimeoutError,
            SecretUnreadable,
        ) as exc:
            await self._failed(held, _describe(exc))
            return False
        # Slack has taken the old refresh token: the new one must be stored even if this
        # task is cancelled now, or the installation dies when its access token expires.
        stored = await asyncio.shield(
            self._store(held, self._installations.seal(refreshed), refreshed)
        )
        self._lookup.forget((enterprise_id, team_id))
        if stored:
            log.info(
                "token_rotation.refreshed",
                team=team_id or None,
                enterprise=enterprise_id or None,
                expires_at=str(expiry_of(refreshed)),
            )
        else:
            log.error(
                "token_rotation.lease_lost",
                team=team_id or None,
                enterprise=enterprise_id or None,
                fix="reinstall the app in this workspace if its token stops working",
            )
        return stored

    async def _store(self, held: InstallationRecord, secret: str, refreshed: Installation) -> bool:
        """Store a refreshed installation; if the lease ran out meanwhile, still store it
        over the row as it was when claimed (nobody refreshed it since: the old refresh
        token was spent here), else leave the newer row."""
        if await self._finish(held, secret=secret, expires_at=expiry_of(refreshed)):
            return True
        key = (held.enterprise_id, held.team_id)
        return await self._rows.replace_secret(*key, held.secret, secret)

    async def _exchange(self, installation: Installation) -> Installation:
        if installation.bot_refresh_token is None:
            raise SecretUnreadable("the installation has no refresh token")
        async with asyncio.timeout(CALL_TIMEOUT_S):
            answer = await oauth_v2_access(
                self._client,
                self._client_id,
                self._client_secret,
                {"grant_type": "refresh_token", "refresh_token": installation.bot_refresh_token},
            )
        values = installation.to_dict_for_copying()
        values.update(
            bot_token=answer.get("access_token"),
            bot_refresh_token=answer.get("refresh_token") or installation.bot_refresh_token,
            bot_token_expires_at=None,
            bot_token_expires_in=answer.get("expires_in"),
        )
        return Installation(**values)

    async def _failed(self, held: InstallationRecord, error: str) -> None:
        failures = held.refresh_failures + 1
        pause = retry_after_s(failures, self._timing.retry_base_s)
        log.warning(
            "token_rotation.failed",
            team=held.team_id or None,
            enterprise=held.enterprise_id or None,
            error=error,
            failures=failures,
            retry_in_s=pause,
        )
        now = self._clock()
        await self._rows.finish_refresh(
            held.enterprise_id,
            held.team_id,
            self._owner,
            secret=None,
            expires_at=None,
            error=error,
            retry_at=now + timedelta(seconds=pause),
            now=now,
        )

    async def _finish(
        self, held: InstallationRecord, *, secret: str, expires_at: datetime | None
    ) -> bool:
        return await self._rows.finish_refresh(
            held.enterprise_id,
            held.team_id,
            self._owner,
            secret=secret,
            expires_at=expires_at,
            error=None,
            retry_at=None,
            now=self._clock(),
        )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or "refused")
    return f"{type(exc).__name__}: {exc}"
