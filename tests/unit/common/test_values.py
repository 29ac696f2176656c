"""Value checks shared by every request: text, names, numbers, integers, timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from service.calibration import CalibrationInputError
from service.calibration._checks import finite_number, float_array
from service.common.values import (
    NAME_PATTERN,
    TIMESTAMP_HINT,
    finite_float,
    parse_timestamp,
    text_problem,
    timestamp_problem,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("plain", None),
        ("ünïcødé 😀", None),
        ("a\nb", None),
        ("a\x00b", "contains a NUL character"),
        ("a\ud800b", "contains a lone surrogate: not valid Unicode"),
        ("\udfff", "contains a lone surrogate: not valid Unicode"),
    ],
)
def test_text_problem(text: str, problem: str | None) -> None:
    assert text_problem(text) == problem


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("glyphs", True),
        ("glyphs\n", False),
        ("glyphs\nx", False),
        ("a" * 200, True),
        ("a" * 201, False),
    ],
)
def test_names_match_whole(value: str, valid: bool) -> None:
    assert (NAME_PATTERN.fullmatch(value) is not None) == valid


@pytest.mark.parametrize("value", [10**400, -(10**400), float("inf"), float("nan")])
def test_numbers_beyond_float64_are_not_finite(value: Any) -> None:
    assert finite_float(value) is None
    with pytest.raises(CalibrationInputError, match="finite"):
        finite_number(value, "calibrator.temperature")


def test_huge_integers_are_refused_without_overflow() -> None:
    assert finite_float(2**53) == 2.0**53
    with pytest.raises(CalibrationInputError):
        float_array([10**400, 1.0], "logits", 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-11-30T11:00:00Z", None),
        ("2000-01-01T00:00:00Z", None),
        ("2026-12-01T11:59:59Z", None),
        ("1999-12-31T23:59:59Z", "must not be before 2000-01-01T00:00:00.000000Z"),
        ("0001-01-01T00:00:00Z", "must not be before 2000-01-01T00:00:00.000000Z"),
        ("0001-01-01T00:00:00+01:00", "expected an RFC 3339 timestamp"),
        ("2026-12-01T12:00:01Z", "must not be more than 1 day after"),
        ("9999-12-31T23:59:59Z", "must not be more than 1 day after"),
        ("9999-12-31T23:59:59-01:00", "expected an RFC 3339 timestamp"),
        ("2026-11-30T11:00:00Z\n", "expected an RFC 3339 timestamp"),
        ("\uff12\uff10\uff12\uff16-11-30T11:00:00Z", "expected an RFC 3339 timestamp"),
    ],
)
def test_timestamps_lie_in_the_range_around_receipt(text: str, message: str | None) -> None:
    parsed = parse_timestamp(text)
    got = TIMESTAMP_HINT if parsed is None else timestamp_problem(parsed, NOW)
    if message is None:
        assert got is None
    else:
        assert got is not None and got.startswith(message)


@pytest.mark.parametrize(
    "text",
    [
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.5Z",
        "2016-12-31t23:59:60.123456789z",
        "2016-12-31T18:59:60-05:00",
        "2017-01-01T00:59:60+01:00",
    ],
)
def test_a_leap_second_reads_as_the_last_microsecond_before_it(text: str) -> None:
    assert parse_timestamp(text) == datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def test_a_leap_second_keeps_its_order_and_seconds_past_it_are_refused() -> None:
    before = parse_timestamp("2016-12-31T23:59:59.5Z")
    leap = parse_timestamp("2016-12-31T23:59:60Z")
    after = parse_timestamp("2017-01-01T00:00:00Z")
    assert before is not None and leap is not None and after is not None
    assert before < leap < after
    assert parse_timestamp("2016-12-31T23:59:61Z") is None
