"""``DATABASE_URL`` -> an open, migrated :class:`~agent_core.ports.Store`.

Accepted forms (docs/operations.md, Settings):

- ``sqlite:///./threadpilot.db`` or ``sqlite:///threadpilot.db``: a file relative to the
  working directory (three slashes, then the relative path);
- ``sqlite:////var/lib/threadpilot/threadpilot.db``: an absolute path (four slashes);
- ``postgresql://user:password@host:5432/dbname`` (``postgres://`` too, and the
  SQLAlchemy spelling ``postgresql+asyncpg://``); query parameters such as
  ``sslmode=require`` go to asyncpg as they are.

A malformed URL raises :class:`~agent_core.values.errors.ConfigError` naming ``DATABASE_URL``
and showing a valid form; a database that cannot be reached or opened raises
:class:`~agent_core.values.errors.StorageError`. Messages never repeat a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit, urlunsplit

from agent_core.stores.defaults import MIGRATION_TIMEOUT_S, POOL_SIZE
from agent_core.stores.dsn import describe_dsn
from agent_core.values.errors import ConfigError
from agent_core.values.redact import public_url

if TYPE_CHECKING:
    from agent_core.ports import Store

__all__ = ["DatabaseTarget", "open_store", "parse_database_url"]

SETTING = "DATABASE_URL"
_EXAMPLES = (
    "use sqlite:///./threadpilot.db (a file relative to the working directory), "
    "sqlite:////absolute/path/threadpilot.db, or "
    "postgresql://user:password@host:5432/dbname"
)
_POSTGRES_SCHEMES = frozenset({"postgresql", "postgres", "postgresql+asyncpg"})


@dataclass(frozen=True, slots=True)
class DatabaseTarget:
    kind: Literal["sqlite", "postgresql"]
    location: str
    """The SQLite file path, or the DSN to hand to asyncpg."""

    @property
    def where(self) -> str:
        """Where the database is, for messages: the file, or ``host:port/db`` (never a
        password)."""
        return self.location if self.kind == "sqlite" else describe_dsn(self.location)


async def open_store(
    database_url: str,
    *,
    pool_size: int = POOL_SIZE,
    migration_timeout_s: float = MIGRATION_TIMEOUT_S,
) -> Store:
    """Open the store ``database_url`` names, migrating its schema to this version.

    ``pool_size``: PostgreSQL connections for the runs' work (SQLite has its one).
    ``migration_timeout_s``: how long the migration may take, waiting for another
    worker's included (``MIGRATION_TIMEOUT``). The caller owns the result and must
    ``await store.close()``.
    """
    # Imported here: the settings check DATABASE_URL with parse_database_url, before start-up
    # has paid for the drivers and the migrations.
    from agent_core.stores.postgres import PostgresStore
    from agent_core.stores.sqlite import SqliteStore

    target = parse_database_url(database_url)
    if target.kind == "sqlite":
        return await SqliteStore.open(target.location, migration_timeout_s=migration_timeout_s)
    return await PostgresStore.open(
        target.location, max_size=pool_size, migration_timeout_s=migration_timeout_s
    )


def parse_database_url(database_url: str) -> DatabaseTarget:
    """Check ``database_url`` and say what it points at; raises :class:`ConfigError`."""
    url = database_url.strip()
    if not url:
        raise ConfigError(SETTING, f"is empty; {_EXAMPLES}")
    try:
        parts = urlsplit(url)
        if "," not in parts.netloc:  # asyncpg also takes "host1:5432,host2:5432"
            parts.port  # noqa: B018 - parsing the port is what validates it
    except ValueError as exc:
        raise ConfigError(
            SETTING, f"cannot parse {public_url(url)!r} ({exc}); {_EXAMPLES}"
        ) from exc
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        if parts.query:
            raise ConfigError(
                SETTING, f"{public_url(url)!r}: SQLite URLs take no parameters; {_EXAMPLES}"
            )
        return _sqlite(url, parts.netloc, parts.path)
    if scheme in _POSTGRES_SCHEMES:
        if "://" not in url:
            problem = f"{public_url(url)!r} has no '//' after the scheme"
            raise ConfigError(SETTING, f"{problem}; {_EXAMPLES}")
        # asyncpg knows postgresql:// and postgres://, not SQLAlchemy's driver suffix.
        dsn = urlunsplit(parts._replace(scheme="postgresql"))
        return DatabaseTarget("postgresql", dsn)
    shown = f"scheme {scheme!r}" if scheme else "no scheme"
    raise ConfigError(SETTING, f"{public_url(url)!r} has {shown}; {_EXAMPLES}")


def _sqlite(url: str, netloc: str, path: str) -> DatabaseTarget:
    if netloc or not url.lower().startswith("sqlite:///"):
        # ``sqlite://./x.db`` reads "./x.db" as a host name: the usual slip.
        raise ConfigError(
            SETTING, f"{public_url(url)!r} needs three slashes before the path; {_EXAMPLES}"
        )
    # urlsplit keeps the path's leading slash: "/./x.db" (relative), "//abs/x.db" (absolute).
    location = path[1:]
    if not location or location.endswith("/"):
        raise ConfigError(SETTING, f"{public_url(url)!r} names no database file; {_EXAMPLES}")
    if location == ":memory:":
        raise ConfigError(
            SETTING,
            "an in-memory SQLite database is private to one connection and would lose "
            f"every run; {_EXAMPLES}",
        )
    return DatabaseTarget("sqlite", location)
