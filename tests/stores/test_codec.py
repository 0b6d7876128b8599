"""The row codec's time encoding: SQLite compares timestamps as text, so text order must be
time order, whatever offset a caller's datetime had."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.stores import _codec as codec

offsets = st.builds(
    timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
)
instants = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(9000, 1, 1), timezones=offsets
)


@given(instants)
def test_sqlite_time_round_trips_to_the_same_instant_in_utc(value: datetime) -> None:
    back = codec.from_db_time(codec.sqlite_time(value))
    assert back == value
    assert back is not None
    assert back.utcoffset() == timedelta(0)


@given(instants, instants)
def test_sqlite_time_text_order_is_time_order(a: datetime, b: datetime) -> None:
    ta, tb = codec.sqlite_time(a), codec.sqlite_time(b)
    assert len(ta) == len(tb)
    assert (ta < tb) == (a < b)
    assert (ta == tb) == (a == b)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        codec.sqlite_time(datetime(2026, 1, 1))


def test_postgres_times_are_normalised_to_utc() -> None:
    value = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=-5)))
    assert codec.from_db_time(value) == datetime(2026, 1, 1, 17, tzinfo=UTC)
