"""What ``--check`` says of OAuth mode's installations, read from the database without
changing it (a SQLite file opened read-only; no migration): how many there are, how many
keep their tokens in clear, and which tokens failed to refresh."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from agent_core.stores.factory import parse_database_url
from bot.config.token_key import CLEAR

__all__ = ["Failing", "Summary", "read_summary"]

_COUNTS = (
    "SELECT count(*), coalesce(sum(CASE WHEN secret LIKE '" + CLEAR + "%' THEN 1 ELSE 0 END), 0) "
    "FROM installations"
)
_FAILING = (
    "SELECT enterprise_id, team_id, refresh_failures, refresh_error FROM installations "
    "WHERE refresh_error IS NOT NULL ORDER BY refresh_failures DESC LIMIT 20"
)


@dataclass(frozen=True, slots=True)
class Failing:
    enterprise_id: str
    team_id: str
    failures: int
    error: str

    @property
    def where(self) -> str:
        return f"team {self.team_id}" if self.team_id else f"organisation {self.enterprise_id}"


@dataclass(frozen=True, slots=True)
class Summary:
    installations: int = 0
    in_clear: int = 0
    failing: list[Failing] = field(default_factory=list)
    migrated: bool = True
    """False: the database has no installations table yet (start-up creates it)."""


async def read_summary(database_url: str, timeout_s: float) -> Summary:
    """The installations' summary; raises what the driver raises when it cannot read."""
    target = parse_database_url(database_url)
    async with asyncio.timeout(timeout_s):
        if target.kind == "sqlite":
            return await asyncio.to_thread(_sqlite, target.location)
        return await _postgres(target.location)


def _sqlite(path: str) -> Summary:
    if not Path(path).is_file():
        return Summary(migrated=False)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        try:
            count, clear = conn.execute(_COUNTS).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return Summary(migrated=False)
            raise
        failing = [Failing(*row) for row in conn.execute(_FAILING).fetchall()]
    return Summary(int(count), int(clear), failing)


async def _postgres(dsn: str) -> Summary:
    conn = await asyncpg.connect(dsn)
    try:
        if not await conn.fetchval("SELECT to_regclass('installations') IS NOT NULL"):
            return Summary(migrated=False)
        count, clear = await conn.fetchrow(_COUNTS)
        failing = [Failing(*row) for row in await conn.fetch(_FAILING)]
    finally:
        await conn.close()
    return Summary(int(count), int(clear), failing)
