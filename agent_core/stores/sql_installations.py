"""The installations' SQL (:class:`~agent_core.ports.InstallationRows`) on SQLite and on
PostgreSQL, mixed into :class:`~agent_core.stores.sqlite.SqliteStore` and
:class:`~agent_core.stores.postgres.PostgresStore`; the statements are
:mod:`agent_core.stores._installations`'.

A claim is one ``UPDATE ... RETURNING``: on SQLite inside ``BEGIN IMMEDIATE`` (the file's
write lock is taken first), on PostgreSQL under the row's lock, so two workers claiming
at once are serialised and the second finds the first's lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core.stores import _installations as sql
from agent_core.values.clock import utcnow

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from agent_core.values.records import InstallationRecord

__all__ = ["PostgresInstallations", "SqliteInstallations"]


class SqliteInstallations:
    """The installation methods; the host class provides the connection handling."""

    if TYPE_CHECKING:

        async def _write_rows(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]: ...

        async def _rows(self, action: str, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

        async def _change(self, action: str, sql: str, params: Sequence[Any]) -> int: ...

    async def save_installation(self, record: InstallationRecord) -> None:
        await self._change("save an installation", sql.SAVE_SQL, sql.save_params(record))

    async def get_installation(self, enterprise_id: str, team_id: str) -> InstallationRecord | None:
        rows = await self._rows("read an installation", sql.GET_SQL, (enterprise_id, team_id))
        return sql.from_row(rows[0]) if rows else None

    async def delete_installation(self, enterprise_id: str, team_id: str) -> bool:
        params = (enterprise_id, team_id)
        return await self._change("delete an installation", sql.DELETE_SQL, params) > 0

    async def installations_due(
        self, before: datetime, *, now: datetime | None = None, limit: int = 100
    ) -> list[InstallationRecord]:
        params = (before, now or utcnow(), limit)
        return [sql.from_row(r) for r in await self._rows("list tokens due", sql.DUE_SQL, params)]

    async def claim_refresh(
        self, enterprise_id: str, team_id: str, owner: str, *, until: datetime, now: datetime
    ) -> InstallationRecord | None:
        params = (owner, until, enterprise_id, team_id, owner, now)
        rows = await self._write_rows("claim a token refresh", sql.CLAIM_SQL, params)
        return sql.from_row(rows[0]) if rows else None

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
        statement, params = _finish(
            enterprise_id, team_id, owner, secret, expires_at, error, retry_at, now
        )
        return await self._change("finish a token refresh", statement, params) > 0

    async def failing_refreshes(self, *, limit: int = 100) -> list[InstallationRecord]:
        rows = await self._rows("list failing refreshes", sql.FAILING_SQL, (limit,))
        return [sql.from_row(r) for r in rows]

    async def installations_after(
        self, after: tuple[str, str] | None = None, *, limit: int = 100
    ) -> list[InstallationRecord]:
        params = (*(after or _BEFORE_ALL), limit)
        rows = await self._rows("list installations", sql.AFTER_SQL, params)
        return [sql.from_row(r) for r in rows]

    async def replace_secret(self, enterprise_id: str, team_id: str, old: str, new: str) -> bool:
        params = (new, enterprise_id, team_id, old)
        return await self._change("re-seal an installation", sql.REPLACE_SECRET_SQL, params) > 0


class PostgresInstallations:
    """The installation methods; the host class provides the pool and its error handling."""

    if TYPE_CHECKING:

        async def _fetch(self, action: str, sql: str, *params: Any) -> list[Any]: ...

        async def _execute(
            self, action: str, sql: str, *params: Any, idempotent: bool = False
        ) -> int: ...

    async def save_installation(self, record: InstallationRecord) -> None:
        await self._execute(
            "save an installation",
            sql.numbered(sql.SAVE_SQL),
            *sql.save_params(record),
            idempotent=True,
        )

    async def get_installation(self, enterprise_id: str, team_id: str) -> InstallationRecord | None:
        rows = await self._fetch(
            "read an installation", sql.numbered(sql.GET_SQL), enterprise_id, team_id
        )
        return sql.from_row(rows[0]) if rows else None

    async def delete_installation(self, enterprise_id: str, team_id: str) -> bool:
        statement = sql.numbered(sql.DELETE_SQL)
        changed = await self._execute(
            "delete an installation", statement, enterprise_id, team_id, idempotent=True
        )
        return changed > 0

    async def installations_due(
        self, before: datetime, *, now: datetime | None = None, limit: int = 100
    ) -> list[InstallationRecord]:
        rows = await self._fetch(
            "list tokens due", sql.numbered(sql.DUE_SQL), before, now or utcnow(), limit
        )
        return [sql.from_row(r) for r in rows]

    async def claim_refresh(
        self, enterprise_id: str, team_id: str, owner: str, *, until: datetime, now: datetime
    ) -> InstallationRecord | None:
        # Retried safely: asking again as the same owner renews the lease (see the SQL).
        rows = await self._fetch(
            "claim a token refresh",
            sql.numbered(sql.CLAIM_SQL),
            owner,
            until,
            enterprise_id,
            team_id,
            owner,
            now,
        )
        return sql.from_row(rows[0]) if rows else None

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
        statement, params = _finish(
            enterprise_id, team_id, owner, secret, expires_at, error, retry_at, now
        )
        # Not retried: a second FAIL would count the failure twice.
        return await self._execute("finish a token refresh", sql.numbered(statement), *params) > 0

    async def failing_refreshes(self, *, limit: int = 100) -> list[InstallationRecord]:
        rows = await self._fetch("list failing refreshes", sql.numbered(sql.FAILING_SQL), limit)
        return [sql.from_row(r) for r in rows]

    async def installations_after(
        self, after: tuple[str, str] | None = None, *, limit: int = 100
    ) -> list[InstallationRecord]:
        rows = await self._fetch(
            "list installations", sql.numbered(sql.AFTER_SQL), *(after or _BEFORE_ALL), limit
        )
        return [sql.from_row(r) for r in rows]

    async def replace_secret(self, enterprise_id: str, team_id: str, old: str, new: str) -> bool:
        statement = sql.numbered(sql.REPLACE_SECRET_SQL)
        changed = await self._execute(
            "re-seal an installation", statement, new, enterprise_id, team_id, old, idempotent=True
        )
        return changed > 0


_BEFORE_ALL = ("", "")
"""Before every key but ``("", "")`` itself, which no row has (a row names a team or an
enterprise)."""


def _finish(
    enterprise_id: str,
    team_id: str,
    owner: str,
    secret: str | None,
    expires_at: datetime | None,
    error: str | None,
    retry_at: datetime | None,
    now: datetime,
) -> tuple[str, tuple[Any, ...]]:
    if secret is not None:
        return sql.SUCCEED_SQL, (secret, expires_at, now, enterprise_id, team_id, owner)
    return sql.FAIL_SQL, (retry_at or now, error or "unknown", enterprise_id, team_id, owner)
