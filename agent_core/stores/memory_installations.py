"""The installations (:class:`~agent_core.ports.InstallationRows`) in memory, mixed into
:class:`~agent_core.stores.memory.MemoryStore`: the same contract as the SQL adapters
(:mod:`agent_core.stores.sql_installations`), for tests and single-process use."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from agent_core.stores._codec import to_utc
from agent_core.values.clock import utcnow

if TYPE_CHECKING:
    from datetime import datetime

    from agent_core.values.records import InstallationRecord

__all__ = ["MemoryInstallations"]

_Key = tuple[str, str]


class MemoryInstallations:
    """Rows by ``(enterprise_id, team_id)``, each with its lease holder beside it."""

    def __init__(self) -> None:
        self._installations: dict[_Key, InstallationRecord] = {}
        self._refresh_owners: dict[_Key, str] = {}
        self._installations_lock = asyncio.Lock()

    async def save_installation(self, record: InstallationRecord) -> None:
        key = (record.enterprise_id, record.team_id)
        async with self._installations_lock:
            old = self._installations.get(key)
            self._installations[key] = dataclasses.replace(
                record,
                installed_at=to_utc(old.installed_at if old else record.installed_at),
                updated_at=to_utc(record.updated_at),
                refresh_failures=0,
                refresh_error=None,
                refresh_until=None,
            )
            self._refresh_owners.pop(key, None)

    async def get_installation(self, enterprise_id: str, team_id: str) -> InstallationRecord | None:
        return self._installations.get((enterprise_id, team_id))

    async def delete_installation(self, enterprise_id: str, team_id: str) -> bool:
        async with self._installations_lock:
            self._refresh_owners.pop((enterprise_id, team_id), None)
            return self._installations.pop((enterprise_id, team_id), None) is not None

    async def installations_due(
        self, before: datetime, *, now: datetime | None = None, limit: int = 100
    ) -> list[InstallationRecord]:
        at = now or utcnow()
        due = [
            r
            for r in self._installations.values()
            if r.expires_at is not None
            and r.expires_at < before
            and (r.refresh_until is None or r.refresh_until <= at)
        ]
        due.sort(key=lambda r: (r.expires_at, r.enterprise_id, r.team_id))
        return due[:limit]

    async def claim_refresh(
        self, enterprise_id: str, team_id: str, owner: str, *, until: datetime, now: datetime
    ) -> InstallationRecord | None:
        key = (enterprise_id, team_id)
        async with self._installations_lock:
            record = self._installations.get(key)
            if record is None:
                return None
            holder = self._refresh_owners.get(key)
            lapsed = record.refresh_until is None or record.refresh_until <= now
            if holder is not None and holder != owner and not lapsed:
                return None
            self._refresh_owners[key] = owner
            record = dataclasses.replace(record, refresh_until=to_utc(until))
            self._installations[key] = record
            return record

    async def finish_refresh(
        self,
        enterprise_id: str,
        team_id: str,
        owner: str,
        *,
        secret: str | None,
        expires_at: datetime | None,
        error: str | None,
        retry_at: datetime | None,
        now: datetime,
    ) -> bool:
        key = (enterprise_id, team_id)
        async with self._installations_lock:
            record = self._installations.get(key)
            if record is None or self._refresh_owners.get(key) != owner:
                return False
            del self._refresh_owners[key]
            if secret is not None:
                record = dataclasses.replace(
                    record,
                    secret=secret,
                    expires_at=expires_at,
                    updated_at=to_utc(now),
                    refresh_until=None,
                    refresh_failures=0,
                    refresh_error=None,
                )
            else:
                record = dataclasses.replace(
                    record,
                    refresh_until=to_utc(retry_at or now),
                    refresh_failures=record.refresh_failures + 1,
                    refresh_error=error or "unknown",
                )
            self._installations[key] = record
            return True

    async def installations_after(
        self, after: tuple[str, str] | None = None, *, limit: int = 100
    ) -> list[InstallationRecord]:
        start = after or ("", "")
        keys = sorted(k for k in self._installations if k > start)
        return [self._installations[k] for k in keys[:limit]]

    async def replace_secret(self, enterprise_id: str, team_id: str, old: str, new: str) -> bool:
        key = (enterprise_id, team_id)
        async with self._installations_lock:
            record = self._installations.get(key)
            if record is None or record.secret != old:
                return False
            self._installations[key] = dataclasses.replace(record, secret=new)
            return True

    async def failing_refreshes(self, *, limit: int = 100) -> list[InstallationRecord]:
        failing = [r for r in self._installations.values() if r.refresh_error is not None]
        failing.sort(key=lambda r: (-r.refresh_failures, r.enterprise_id, r.team_id))
        return failing[:limit]
