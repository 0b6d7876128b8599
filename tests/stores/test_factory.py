"""``open_store``: which URLs mean what, and errors that say what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agent_core.stores.factory import DatabaseTarget, open_store, parse_database_url
from agent_core.stores.postgres import PostgresStore
from agent_core.stores.sqlite import SqliteStore
from agent_core.values.errors import ConfigError, StorageError

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("sqlite:///./threadpilot.db", DatabaseTarget("sqlite", "./threadpilot.db")),
        ("sqlite:///threadpilot.db", DatabaseTarget("sqlite", "threadpilot.db")),
        ("sqlite:///data/tp.db", DatabaseTarget("sqlite", "data/tp.db")),
        ("sqlite:////var/lib/tp/tp.db", DatabaseTarget("sqlite", "/var/lib/tp/tp.db")),
        (" SQLite:////tmp/x.db ", DatabaseTarget("sqlite", "/tmp/x.db")),
        (
            "postgresql://tp:secret@db.internal:5433/threadpilot",
            DatabaseTarget("postgresql", "postgresql://tp:secret@db.internal:5433/threadpilot"),
        ),
        ("postgres://u@h/db", DatabaseTarget("postgresql", "postgresql://u@h/db")),
        (
            "postgresql+asyncpg://u@h:5432/db?sslmode=require",
            DatabaseTarget("postgresql", "postgresql://u@h:5432/db?sslmode=require"),
        ),
        (
            "postgresql://u@h1:5432,h2:5432/db",
            DatabaseTarget("postgresql", "postgresql://u@h1:5432,h2:5432/db"),
        ),
    ],
)
def test_valid_urls(url: str, target: DatabaseTarget) -> None:
    assert parse_database_url(url) == target


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "threadpilot.db",
        "mysql://u@h/db",
        "sqlite://./threadpilot.db",  # two slashes: "." would be a host
        "sqlite:///",
        "sqlite:////tmp/",
        "sqlite:///:memory:",
        "sqlite:///x.db?mode=ro",
        "postgresql:db",
        "postgresql://u:secret@h:notaport/db",
    ],
)
def test_malformed_urls_name_the_setting_and_show_a_valid_one(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_database_url(url)
    assert caught.value.setting == "DATABASE_URL"
    message = str(caught.value)
    assert message.startswith("DATABASE_URL: ")
    assert "sqlite:///./threadpilot.db" in message
    assert "postgresql://user:password@host:5432/dbname" in message
    assert "secret" not in message


async def test_a_relative_sqlite_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = await open_store("sqlite:///./threadpilot.db")
    try:
        assert isinstance(store, SqliteStore)
    finally:
        await store.close()
    assert (tmp_path / "threadpilot.db").is_file()


async def test_an_absolute_sqlite_url(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/abs.db")  # tmp_path starts with "/"
    await store.close()
    assert (tmp_path / "abs.db").is_file()


async def test_sqlite_in_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"directory \S+/no/such/dir does not exist") as caught:
        await open_store(f"sqlite:///{tmp_path}/no/such/dir/tp.db")
    assert caught.value.__cause__ is not None


async def test_unreachable_postgres_is_a_storage_error_without_the_password() -> None:
    # Port 1 on loopback: refused at once, nothing listens there.
    with pytest.raises(StorageError) as caught:
        await open_store("postgresql://tp:hunter2@127.0.0.1:1/threadpilot")
    message = str(caught.value)
    assert "127.0.0.1:1/threadpilot" in message
    assert "DATABASE_URL" in message
    assert "hunter2" not in message
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.postgres
async def test_postgres_url_opens_a_postgres_store(pg_url: str) -> None:
    store = await open_store(pg_url)
    try:
        assert isinstance(store, PostgresStore)
    finally:
        await store.close()
