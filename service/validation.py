"""Field-by-field checks of decoded JSON that record every problem instead of stopping at one.

Each ``expect_*`` function takes the value, its dotted path (``"predictions[3].ts"``), the
``ErrorCollector`` and the batch item index (if any); it returns the parsed value, or ``None``
after recording why the value is unusable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from service.errors import ErrorCollector

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")


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
    """A non-empty string within ``max_length``, matching ``pattern`` / one of ``choices``."""
    if not isinstance(value, str) or not value.strip():
        errors.add(path, "expected a non-empty string", item)
        return None
    if len(value) > max_length:
        errors.add(path, f"longer than {max_length} characters", item)
        return None
    if "\x00" in value:
        errors.add(path, "contains a NUL character", item)
        return None
    if choices is not None and value not in choices:
        errors.add(path, f"must be one of {', '.join(sorted(choices))}", item)
        return None
    if pattern is not None and not pattern.match(value):
        errors.add(path, "may contain only letters, digits and . _ : - (max 200)", item)
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
    number = float(value)
    if not math.isfinite(number):
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


def expect_int(
    value: Any,
    path: str,
    errors: ErrorCollector,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    item: int | None = None,
) -> int | None:
    """A JSON integer (``3``, not ``3.0`` or ``true``) within the bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(path, "expected an integer", item)
        return None
    if minimum is not None and value < minimum:
        errors.add(path, f"must be >= {minimum}", item)
        return None
    if maximum is not None and value > maximum:
        errors.add(path, f"must be <= {maximum}", item)
        return None
    return value


def parse_timestamp(value: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp with a zone into an aware UTC datetime, else ``None``."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return None
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


def expect_timestamp(
    value: Any, path: str, errors: ErrorCollector, *, item: int | None = None
) -> datetime | None:
    """An RFC 3339 timestamp with a zone (``2026-10-01T00:00:00Z``)."""
    parsed = parse_timestamp(value)
    if parsed is None:
        errors.add(
            path, "expected an RFC 3339 timestamp with a zone, e.g. 2026-10-01T00:00:00Z", item
        )
    return parsed


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``: the one form calmon writes."""
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
