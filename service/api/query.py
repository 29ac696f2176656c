"""Query-string parameters: known names only, typed, with 422s naming the parameter."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection
from datetime import datetime

from flask import request

from service.errors import ErrorCollector, ErrorDetail, ValidationFailed
from service.validation import parse_timestamp

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def check_known(allowed: Collection[str]) -> None:
    """Reject parameters the endpoint does not know (typos would otherwise be silent)."""
    errors = ErrorCollector()
    for name in request.args:
        if name not in allowed:
            errors.add(name, f"unknown query parameter; this endpoint takes {', '.join(allowed)}")
    errors.raise_if_any("unknown query parameters")


def timestamp_arg(name: str) -> datetime | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    parsed = parse_timestamp(raw)
    if parsed is None:
        raise ValidationFailed(
            f"invalid {name}", [ErrorDetail(name, "expected an RFC 3339 timestamp with a zone")]
        )
    return parsed


def limit_arg(default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> int:
    raw = request.args.get("limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
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
        if prefix != "seq" or not number.isdigit():
            raise ValueError(text)
        return int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValidationFailed(
            "invalid cursor", [ErrorDetail("cursor", "not a cursor this endpoint returned")]
        ) from None
