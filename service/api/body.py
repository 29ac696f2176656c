"""Strict JSON request bodies: JSON only, finite numbers only, an object at the top."""

from __future__ import annotations

import json
from typing import Any

import orjson
from flask import request

from service.api.errors import ApiError


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid JSON number (finite numbers only)")


def json_body() -> dict[str, Any]:
    """Parse the request body as a JSON object or raise a 4xx naming the problem.

    415 without ``application/json``; 400 for invalid UTF-8, malformed JSON, NaN/Infinity tokens or
    excessive nesting; 422 when the top level is not an object. The size limit (413) is enforced by
    Flask's ``MAX_CONTENT_LENGTH`` while reading.
    """
    if request.mimetype != "application/json":
        raise ApiError(415, "send the body as JSON with 'Content-Type: application/json'")
    raw = request.get_data(cache=True)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = _parse_slowly(raw)
    if not isinstance(value, dict):
        raise ApiError(
            422,
            "body must be a JSON object",
            code="validation_failed",
            details=[{"field": "(body)", "message": "expected an object"}],
        )
    return value


def _parse_slowly(raw: bytes) -> Any:
    """The standard library's parser, for precise messages on bodies orjson refuses.

    It also reads numbers beyond float64 as infinities, which validation then reports by item
    and field (422) instead of failing the whole body.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"body is not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ApiError(400, "body is nested too deeply") from None
    except ValueError as exc:
        raise ApiError(400, f"body is not valid JSON: {exc}") from None
