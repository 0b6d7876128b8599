"""threadpilot's installation store: slack_sdk's ``AsyncInstallationStore`` over the
database's installations (:class:`~agent_core.ports.InstallationRows`).

One row per workspace, or per organisation for an org-wide install, replaced on each
install (never appended, unlike slack_sdk's SQL stores). The row's ``secret`` is the
whole installation as slack_sdk models it (JSON), sealed with ``SLACK_TOKEN_KEY``
(:mod:`bot.config.token_key`). Bot-scope data (``Bot``) is read from the same row: the app
asks for no user scopes, so an installation and its bot are one thing here.

A lookup for a request is :meth:`InstallationStore.find`: the workspace's own row, else
its enterprise's org-wide row. Lookups on every request go through
:class:`~bot.installs.lookup.InstallationLookup`'s cache, not straight here.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.installation import Installation

from agent_core.values.clock import utcnow
from agent_core.values.records import InstallationRecord

if TYPE_CHECKING:
    from collections.abc import Callable

    from slack_sdk.oauth.installation_store.models.bot import Bot

    from agent_core.ports import InstallationRows
    from bot.config.token_key import Sealer

__all__ = ["InstallationStore", "Key", "decode", "encode", "expiry_of", "key_of"]

_log = logging.getLogger("bot.installs.store")

Key = tuple[str, str]
"""``(enterprise_id, team_id)`` as rows are keyed: ``""`` for "none"; an org-wide
install's team is ``""``."""


def key_of(enterprise_id: str | None, team_id: str | None, *, org_wide: bool | None) -> Key:
    """The row an installation is kept in."""
    return (enterprise_id or "", "" if org_wide else team_id or "")


def encode(installation: Installation) -> str:
    """An installation as JSON text (times as ISO 8601, which slack_sdk reads back)."""

    def plain(value: Any) -> Any:
        return value.isoformat() if isinstance(value, datetime) else value

    values = {k: plain(v) for k, v in installation.to_dict_for_copying().items()}
    return json.dumps(values, separators=(",", ":"), sort_keys=True)


def decode(text: str) -> Installation:
    return Installation(**json.loads(text))


def expiry_of(installation: Installation) -> datetime | None:
    expires = installation.bot_token_expires_at
    return None if expires is None else datetime.fromtimestamp(expires, tz=UTC)


class InstallationStore(AsyncInstallationStore):
    """The installations of this app, in its database; ``on_change`` hears every key
    saved or deleted through it (the lookup's cache forgets it)."""

    def __init__(
        self,
        rows: InstallationRows,
        sealer: Sealer,
        *,
        on_change: Callable[[Key], None] = lambda _key: None,
    ) -> None:
        self._rows = rows
        self._sealer = sealer
        self._on_change = on_change

    @property
    def logger(self) -> logging.Logger:
        return _log

    @property
    def sealing(self) -> bool:
        return self._sealer.sealing

    def seal(self, installation: Installation) -> str:
        return self._sealer.seal(encode(installation))

    def open(self, record: InstallationRecord) -> Installation:
        """The installation in ``record``; raises
        :class:`~bot.config.token_key.SecretUnreadable`."""
        return decode(self._sealer.open(record.secret))

    async def async_save(self, installation: Installation) -> None:
        key = key_of(
            installation.enterprise_id,
            installation.team_id,
            org_wide=installation.is_enterprise_install,
        )
        now = utcnow()
        await self._rows.save_installation(
            InstallationRecord(
                *key,
                secret=self.seal(installation),
                expires_at=expiry_of(installation),
                installed_at=now,
                updated_at=now,
            )
        )
        self._on_change(key)

    async def reseal_all(self, *, page: int = 100) -> int:
        """Seal again, with the newest key, every installation in clear or sealed with an
        older one; how many were. Each row changes only if it is still what was read (a
        refresh or re-install meanwhile wins), so every worker may run it at once."""
        resealed = 0
        after: Key | None = None
        while rows := await self._rows.installations_after(after, limit=page):
            for record in rows:
                if self._sealer.stale(record.secret):
                    fresh = self._sealer.seal(self._sealer.open(record.secret))
                    key = (record.enterprise_id, record.team_id)
                    resealed += await self._rows.replace_secret(*key, record.secret, fresh)
            after = (rows[-1].enterprise_id, rows[-1].team_id)
        return resealed

    async def async_save_bot(self, bot: Bot) -> None:
        raise NotImplementedError("save the whole installation: async_save")

    async def find(self, enterprise_id: str | None, team_id: str | None) -> Installation | None:
        """The installation serving this workspace: its own, else its enterprise's
        org-wide one."""
        record = await self._rows.get_installation(enterprise_id or "", team_id or "")
        if record is None and enterprise_id and team_id:
            record = await self._rows.get_installation(enterprise_id, "")
        return None if record is None else self.open(record)

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        if is_enterprise_install:
            team_id = None
        return await self.find(enterprise_id, team_id)

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        installation = await self.async_find_installation(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=is_enterprise_install,
        )
        return None if installation is None else installation.to_bot()

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        """Delete the installation of a workspace (``team_id``) or, with ``team_id``
        None, of an org-wide install (``enterprise_id``); a later request from there
        finds nothing, on this worker at once and on the others within the cache's TTL."""
        key = key_of(enterprise_id, team_id, org_wide=team_id is None)
        await self._rows.delete_installation(*key)
        self._on_change(key)

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.async_delete_installation(enterprise_id=enterprise_id, team_id=team_id)

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.async_delete_installation(enterprise_id=enterprise_id, team_id=team_id)
