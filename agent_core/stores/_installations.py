"""The installations table's SQL and row codec, shared by the SQLite and PostgreSQL
adapters (:class:`~agent_core.ports.InstallationRows`); each formats the statements
with its own placeholders (``?`` or ``$n``).

A refresh lease is a compare-and-set on ``refresh_owner`` / ``refresh_until``: the
``UPDATE`` takes it only if nobody holds it, or its holder's time has passed, or it is
the same owner asking again (so a retried statement after a lost connection renews the
lease it may already have taken instead of failing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_core.stores._codec import from_db_time, to_utc
from agent_core.values.records import InstallationRecord

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "AFTER_SQL",
    "CLAIM_SQL",
    "COLUMNS",
    "DELETE_SQL",
    "DUE_SQL",
    "FAILING_SQL",
    "FAIL_SQL",
    "GET_SQL",
    "REPLACE_SECRET_SQL",
    "SAVE_SQL",
    "SUCCEED_SQL",
    "from_row",
    "numbered",
    "save_params",
]

COLUMNS = (
    "enterprise_id, team_id, secret, expires_at, installed_at, updated_at, "
    "refresh_failures, refresh_error, refresh_until"
)

SAVE_SQL = (
    "INSERT INTO installations (enterprise_id, team_id, secret, expires_at, installed_at, "
    "updated_at, refresh_failures) VALUES (?, ?, ?, ?, ?, ?, 0) "
    "ON CONFLICT (enterprise_id, team_id) DO UPDATE SET secret = excluded.secret, "
    "expires_at = excluded.expires_at, updated_at = excluded.updated_at, "
    "refresh_owner = NULL, refresh_until = NULL, refresh_failures = 0, refresh_error = NULL"
)
GET_SQL = f"SELECT {COLUMNS} FROM installations WHERE enterprise_id = ? AND team_id = ?"
DELETE_SQL = "DELETE FROM installations WHERE enterprise_id = ? AND team_id = ?"
_FREE = "(refresh_until IS NULL OR refresh_until <= ?)"
DUE_SQL = (
    f"SELECT {COLUMNS} FROM installations WHERE expires_at IS NOT NULL AND expires_at < ? "
    f"AND {_FREE} ORDER BY expires_at LIMIT ?"
)
CLAIM_SQL = (
    "UPDATE installations SET refresh_owner = ?, refresh_until = ? "
    "WHERE enterprise_id = ? AND team_id = ? "
    "AND (refresh_owner IS NULL OR refresh_owner = ? OR refresh_until <= ?) "
    f"RETURNING {COLUMNS}"
)
SUCCEED_SQL = (
    "UPDATE installations SET secret = ?, expires_at = ?, updated_at = ?, "
    "refresh_owner = NULL, refresh_until = NULL, refresh_failures = 0, refresh_error = NULL "
    "WHERE enterprise_id = ? AND team_id = ? AND refresh_owner = ?"
)
FAIL_SQL = (
    "UPDATE installations SET refresh_owner = NULL, refresh_until = ?, "
    "refresh_failures = refresh_failures + 1, refresh_error = ? "
    "WHERE enterprise_id = ? AND team_id = ? AND refresh_owner = ?"
)
AFTER_SQL = (
    f"SELECT {COLUMNS} FROM installations WHERE (enterprise_id, team_id) > (?, ?) "
    "ORDER BY enterprise_id, team_id LIMIT ?"
)
REPLACE_SECRET_SQL = (
    "UPDATE installations SET secret = ? WHERE enterprise_id = ? AND team_id = ? AND secret = ?"
)
FAILING_SQL = (
    f"SELECT {COLUMNS} FROM installations WHERE refresh_error IS NOT NULL "
    "ORDER BY refresh_failures DESC, enterprise_id, team_id LIMIT ?"
)


def numbered(sql: str) -> str:
    """``sql`` with PostgreSQL's ``$1, $2, ...`` for SQLite's ``?``."""
    parts = sql.split("?")
    return "".join(f"{part}${i}" for i, part in enumerate(parts[:-1], 1)) + parts[-1]


def save_params(record: InstallationRecord) -> tuple[Any, ...]:
    return (
        record.enterprise_id,
        record.team_id,
        record.secret,
        None if record.expires_at is None else to_utc(record.expires_at),
        to_utc(record.installed_at),
        to_utc(record.updated_at),
    )


def from_row(row: Any, time: Callable[[Any], Any] = from_db_time) -> InstallationRecord:
    installed, updated = time(row["installed_at"]), time(row["updated_at"])
    assert installed is not None and updated is not None
    return InstallationRecord(
        enterprise_id=row["enterprise_id"],
        team_id=row["team_id"],
        secret=row["secret"],
        expires_at=time(row["expires_at"]),
        installed_at=installed,
        updated_at=updated,
        refresh_failures=int(row["refresh_failures"]),
        refresh_error=row["refresh_error"],
        refresh_until=time(row["refresh_until"]),
    )
