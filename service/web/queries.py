"""Query-string and path parameters: known names only, typed, with 4xx replies naming them.

Bounds: ``limit`` is 1 to the endpoint's maximum in ASCII digits; a ``cursor`` carries a
sequence number of at most 2^63 - 1 (the database's bigint); timestamps lie in the range
``service.common.values.timestamp_problem`` accepts around the time of the request; no parameter
(path or query, name or value) holds a NUL, which PostgreSQL cannot compare or store.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection
from datetime import UTC, datetime

from flask import request

from service.common.errors import ErrorCollector, ErrorDetail, NotFound, ValidationFailed
from service.common.values import TIMESTAMP_HINT, parse_timestamp, text_problem, timestamp_problem

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_SEQ = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def check_text_arguments() -> None:
    """Refuse a request whose path or query parameters hold text calmon cannot store.

    A path segment with a NUL names nothing (404); a query parameter with one is a 422 naming it.
    Meant to run before every view (``before_app_request``): every route passes these values to
    the database.
    """
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and text_problem(value) is not None:
            raise NotFound(
                f"no {name} with that name: it holds a NUL character",
                [ErrorDetail(name, "contains a NUL character")],
            )
    errors = ErrorCollector()
    for name, values in request.args.lists():
        label = name.replace("\x00", "\\x00")
        if text_problem(name) is not None:
            errors.add(label, "the parameter name contains a NUL character")
        for value in values:
            problem = text_problem(value)
            if problem is not None:
                errors.add(label, problem)
    errors.raise_if_any("invalid query parameters")


def check_known(allowed: Collection[str]) -> None:
    """Reject parameters the endpoint does not know (typos would otherwise be silent)."""
    errors = ErrorCollector()
    for name in request.args:
        if name not in allowed:
            errors.add(name, f"unknown query parameter; this endpoint takes {', '.join(allowed)}")
    errors.raise_if_any("unknown query parameters")


def timestamp_arg(name: str, now: datetime | None = None) -> datetime | None:
    """The RFC 3339 timestamp ``name``, if given, within the accepted range around ``now``."""
    raw = request.args.get(name)
    if raw is None:
        return None
    parsed = parse_timestamp(raw)
    problem = (
        TIMESTAMP_HINT if parsed is None else timestamp_problem(parsed, now or datetime.now(UTC))
    )
    if problem is not None:
        raise ValidationFailed(f"invalid {name}", [ErrorDetail(name, problem)])
    return parsed


def limit_arg(default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> int:
    raw = request.args.get("limit")
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= maximum:
        raise ValidationFailed("invalid limit", [ErrorDetail("limit", f"expected 1..{maximum}")])
    return int(raw)


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def cursor_arg() -> int | None:
    """Decode the opaque ``cursor`` of a previous page."""
    raw = request.args.get("cursor")
    if raw is None:
        return None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        prefix, _, number = text.partition(":")
        if prefix != "seq" or not _DIGITS.fullmatch(number) or int(number) > MAX_SEQ:
            raise ValueError(text)
        return int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValidationFailed(
            "invalid cursor", [ErrorDetail("cursor", "not a cursor this endpoint returned")]
        ) from None
