"""The bounds every request field shares, as plain checks (``service.common.declared`` builds
the request bodies' types from them), and ``expect_object`` for the hand-checked objects.

Bounds every field shares:

* Text is valid Unicode without NUL: a lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8
  and PostgreSQL cannot store U+0000, so either would fail the write after validation passed.
* Integers lie within +-(2^53 - 1) (``MAX_JSON_INTEGER``), the range JSON numbers keep exactly in
  every client (I-JSON, RFC 7493), and numbers are finite floats: an integer such as 10^400 that
  no float64 holds is refused, not turned into an ``OverflowError``.
* Timestamps lie in ``[EARLIEST_TIMESTAMP, receipt + MAX_FUTURE]``: 2000-01-01T00:00:00Z to one
  day after the request arrived. Nothing calmon stores is older (predictions, labels, contract
  data windows, audit events all happen after it was deployed) or from the future beyond clock
  skew, so a year 1 or 9999 is a broken clock, and the bound keeps every date calmon derives
  (bucket starts, window ends rounded up to 5 minutes) representable.
* Names (``NAME_PATTERN``) match whole: ``fullmatch``, so ``"glyphs\\n"`` is not ``"glyphs"``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from service.common.errors import ErrorCollector

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}\Z")
#: What a text refused by ``NAME_PATTERN`` is told.
NAME_MESSAGE = "may contain only letters, digits and . _ : - (max 200)"
#: The fraction of a timestamp's seconds (right after them, at offset 19).
_LEAP_FRACTION = re.compile(r"(?<=^.{19})\.\d+")
MAX_JSON_INTEGER = 2**53 - 1
EARLIEST_TIMESTAMP = datetime(2000, 1, 1, tzinfo=UTC)
MAX_FUTURE = timedelta(days=1)


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as text (a NUL or a lone surrogate), or None."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate: not valid Unicode"
    return None


def printable(text: str, limit: int = 64) -> str:
    """``text`` as printable ASCII escapes (``\\x00``, ``\\ud800``), at most ``limit`` characters:
    client text quoted in a message."""
    return ascii(text)[1:-1][:limit]


def timestamp_problem(ts: datetime, now: datetime) -> str | None:
    """Why ``ts`` lies outside ``[EARLIEST_TIMESTAMP, now + MAX_FUTURE]``, or None."""
    if ts < EARLIEST_TIMESTAMP:
        return f"must not be before {format_timestamp(EARLIEST_TIMESTAMP)}"
    if ts > now + MAX_FUTURE:
        return "must not be more than 1 day after the time the request was received"
    return None


def expect_object(
    value: Any,
    path: str,
    errors: ErrorCollector,
    *,
    required: Collection[str] = (),
    optional: Collection[str] = (),
    item: int | None = None,
) -> Mapping[str, Any] | None:
    """An object with all ``required`` keys and nothing outside ``required | optional``."""
    if not isinstance(value, dict):
        errors.add(path or "(body)", "expected an object", item)
        return None
    prefix = f"{path}." if path else ""
    for key in value:
        if key not in required and key not in optional:
            errors.add(f"{prefix}{key}", "unknown field", item)
    for key in required:
        if key not in value:
            errors.add(f"{prefix}{key}", "required field is missing", item)
    return value


def finite_float(value: int | float) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, integers beyond float64)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def parse_timestamp(value: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp with a zone into an aware UTC datetime, else ``None``.

    A leap second (seconds ``60``, with any fraction) reads as the last microsecond of the
    second before it: ``23:59:60Z`` is ``23:59:59.999999Z`` (Python's datetime has no 61st
    second), so it keeps its order among the timestamps around it."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    if value[17:19] == "60":
        value = _LEAP_FRACTION.sub("", value[:17] + "59" + value[19:], count=1)
        value = value[:19] + ".999999" + value[19:]
    parsed: datetime | None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = _parse_unusual(value)
    if parsed is None:
        return None
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


def _parse_unusual(value: str) -> datetime | None:
    """RFC 3339 forms ``fromisoformat`` refuses: lower-case ``t``/``z``, > 6 fraction digits."""
    text = value.replace("z", "Z").replace("Z", "+00:00").replace("t", "T").replace(" ", "T")
    fraction = re.search(r"\.(\d+)", text)
    if fraction and len(fraction.group(1)) > 6:
        text = text.replace(fraction.group(0), "." + fraction.group(1)[:6])
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


TIMESTAMP_HINT = "expected an RFC 3339 timestamp with a zone, e.g. 2026-10-01T00:00:00Z"


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``: the one form calmon writes."""
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
