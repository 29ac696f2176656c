"""Windows: durations, explicit bounds, the buckets that tile them."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from service.stream.windows import Window, WindowError, ceil_to, floor_to, parse_duration


@pytest.mark.parametrize("text", ["24h\n", "1h ", "٣h", "0h", "1.5h", "401d"])
def test_durations_match_whole(text: str) -> None:
    with pytest.raises(WindowError):
        parse_duration(text)


def test_a_window_at_the_end_of_the_calendar_is_an_error_not_an_overflow() -> None:
    end = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    with pytest.raises(WindowError):
        Window.between(end - timedelta(hours=1), end)


NOON = datetime(2026, 11, 30, 12, 2, 30, tzinfo=UTC)


def test_a_trailing_window_is_aligned_to_5_minutes() -> None:
    window = Window.trailing("1h", NOON)
    assert window.start == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 30, 12, 5, tzinfo=UTC)
    assert window.name == "1h"


def test_whole_hours_are_read_from_hour_buckets_and_ragged_ends_from_5_minute_ones() -> None:
    window = Window.between(
        datetime(2026, 11, 30, 9, 40, tzinfo=UTC), datetime(2026, 11, 30, 12, 10, tzinfo=UTC)
    )
    assert window.tiling() == [
        ("1h", datetime(2026, 11, 30, 10, tzinfo=UTC), datetime(2026, 11, 30, 12, tzinfo=UTC)),
        ("5m", datetime(2026, 11, 30, 9, 40, tzinfo=UTC), datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("5m", datetime(2026, 11, 30, 12, tzinfo=UTC), datetime(2026, 11, 30, 12, 10, tzinfo=UTC)),
    ]


def test_a_window_within_one_hour_is_read_from_5_minute_buckets_only() -> None:
    window = Window.between(
        datetime(2026, 11, 30, 9, 7, tzinfo=UTC), datetime(2026, 11, 30, 9, 31, tzinfo=UTC)
    )
    start, end = datetime(2026, 11, 30, 9, 5, tzinfo=UTC), datetime(2026, 11, 30, 9, 35, tzinfo=UTC)
    assert window.tiling() == [("5m", start, end)]


def test_the_tiling_covers_the_window_exactly_once() -> None:
    window = Window.trailing("7d", NOON)
    parts = sorted((start, end) for _, start, end in window.tiling())
    assert parts[0][0] == window.start and parts[-1][1] == window.end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    hours = [p for p in window.tiling() if p[0] == "1h"]
    assert len(hours) == 1 and hours[0][2] - hours[0][1] == timedelta(days=7)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_explicit_bounds_must_be_ordered() -> None:
    with pytest.raises(WindowError) as info:
        Window.between(NOON, NOON)
    assert info.value.field == "end"
    assert floor_to(NOON, timedelta(hours=1)) == datetime(2026, 11, 30, 12, tzinfo=UTC)
    assert ceil_to(NOON, timedelta(hours=1)) == datetime(2026, 11, 30, 13, tzinfo=UTC)
