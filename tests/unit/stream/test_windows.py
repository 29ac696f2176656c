"""Windows: durations, explicit bounds, the buckets that tile them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.stream.windows import Window, WindowError, parse_duration


@pytest.mark.parametrize("text", ["24h\n", "1h ", "٣h", "0h", "1.5h", "401d"])
def test_durations_match_whole(text: str) -> None:
    with pytest.raises(WindowError):
        parse_duration(text)


def test_a_window_at_the_end_of_the_calendar_is_an_error_not_an_overflow() -> None:
    end = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    with pytest.raises(WindowError):
        Window.between(end - timedelta(hours=1), end)
