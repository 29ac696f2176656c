"""Field-by-field checks of decoded JSON that record every problem instead of stopping at one.

Each ``expect_*`` function takes the value, its dotted path (``"predictions[3].ts"``), the
``ErrorCollector`` and the batch item index (if any); it returns the parsed value, or ``None``
after recording why the value is unusable.

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


def expect_str(
    value: Any,
    path: str,
    errors: ErrorCollector,
    *,
    max_length: int = 200,
    pattern: re.Pattern[str] | None = None,
    choices: Collection[str] | None = None,
    item: int | None = None,
) -> str | None:
    """A non-empty string of valid text within ``max_length``, fully matching ``pattern`` /
    one of ``choices``."""
    if not isinstance(value, str) or not value.strip():
        errors.add(path, "expected a non-empty string", item)
        return None
    if len(value) > max_length:
        errors.add(path, f"longer than {max_length} characters", item)
        return None
    problem = text_problem(value)
    if problem is not None:
        errors.add(path, problem, item)
        return None
    if choices is not None and value not in choices:
        errors.add(path, f"must be one of {', '.join(sorted(choices))}", item)
        return None
    if pattern is not None and not pattern.fullmatch(value):
        errors.add(path, NAME_MESSAGE, item)
        return None
    return value


def expect_number(
    value: Any,
    path: str,
    errors: ErrorCollector,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    item: int | None = None,
) -> float | None:
    """A finite JSON number (not a boolean) within the bounds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.add(path, "expected a number", item)
        return None
    number = finite_float(value)
    if number is None:
        errors.add(path, "must be finite", item)
        return None
    if minimum is not None:
        if exclusive_minimum and number <= minimum:
            errors.add(path, f"must be > {minimum}", item)
            return None
        if not exclusive_minimum and number < minimum:
            errors.add(path, f"must be >= {minimum}", item)
            return None
    if maximum is not None and number > maximum:
        errors.add(path, f"must be <= {maximum}", item)
        return None
    return number


def finite_float(value: int | float) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, integers beyond float64)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def expect_int(
    value: Any,
    path: str,
    errors: ErrorCollector,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    item: int | None = None,
) -> int | None:
    """A JSON integer (``3``, not ``3.0`` or ``true``) within the bounds, and within
    +-``MAX_JSON_INTEGER`` whatever the bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(path, "expected an integer", item)
        return None
    if abs(value) > MAX_JSON_INTEGER:
        errors.add(path, f"must lie within +-{MAX_JSON_INTEGER} (2^53 - 1)", item)
        return None
    if minimum is not None and value < minimum:
        errors.add(path, f"must be >= {minimum}", item)
        return None
    if maximum is not None and value > maximum:
        errors.add(path, f"must be <= {maximum}", item)
        return None
    return value


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


def expect_timestamp(
    value: Any,
    path: str,
    errors: ErrorCollector,
    *,
    now: datetime | None = None,
    item: int | None = None,
) -> datetime | None:
    """An RFC 3339 timestamp with a zone (``2026-10-01T00:00:00Z``) in the accepted range
    around ``now`` (default: the current time), see ``timestamp_problem``."""
    parsed = parse_timestamp(value)
    if parsed is None:
        errors.add(path, TIMESTAMP_HINT, item)
        return None
    problem = timestamp_problem(parsed, now or datetime.now(UTC))
    if problem is not None:
        errors.add(path, problem, item)
        return None
    return parsed


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``: the one form calmon writes."""
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
