"""Strict JSON request bodies: JSON only, finite numbers only, valid text only, an object on top."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from flask import request

from service.common.json_paths import BoundedProblems, walk
from service.common.json_text import JsonText, orjson_int
from service.common.values import text_problem
from service.web.http_errors import ApiError

#: Escapes in the raw body that may decode to text calmon refuses (NUL, a surrogate half): only
#: bodies holding one are walked string by string, so a clean 100,000-item batch costs nothing.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abAB-fF])")
#: Lists of items whose index the error details also give as ``item``.
_BATCH_KEYS = frozenset({"predictions", "labels"})


class _NonFinite:
    """Where the body held a ``NaN``/``Infinity`` token (never a valid JSON number)."""

    def __init__(self, token: str) -> None:
        self.token = token


def json_body() -> dict[str, Any]:
    """Parse the request body as a JSON object or raise a 4xx naming the problem.

    415 without ``application/json``; 400 for invalid UTF-8, malformed JSON, NaN/Infinity tokens
    (their details name each field holding one), excessive nesting or a key repeated within one
    object (``service.common.json_text``: each repeated key named); 422 when the top level is
    not an object or a string anywhere in it (key or value) holds a NUL or a lone surrogate,
    naming each. The size limit (413) is enforced by Flask's ``MAX_CONTENT_LENGTH`` while
    reading. A reply names at most ``MAX_DETAILS`` problems and counts them all. Every rule is
    checked here, before the route looks anything up: a repeated ``model`` is a 400, not a
    reply about one of its values.
    """
    raw, value = _decoded()
    JsonText.of(raw, _BATCH_KEYS).check(value)
    return value


def _decoded() -> tuple[bytes, dict[str, Any]]:
    """The raw body and its decoded object, every rule of ``json_body`` checked but repeated
    keys."""
    if request.mimetype != "application/json":
        raise ApiError(415, "send the body as JSON with 'Content-Type: application/json'")
    raw = request.get_data(cache=True)
    try:
        value = orjson.loads(raw)
        suspect = _SUSPECT_ESCAPE.search(raw) is not None
    except orjson.JSONDecodeError:
        value = _parse_slowly(raw)
        suspect = True
    if suspect:
        _check_strings_and_numbers(value)
    if not isinstance(value, dict):
        raise ApiError(
            422,
            "body must be a JSON object",
            code="validation_failed",
            details=[{"field": "(body)", "message": "expected an object"}],
        )
    return raw, value


def _parse_slowly(raw: bytes) -> Any:
    """The standard library's parser, for precise messages on bodies orjson refuses.

    Like orjson it reads integers beyond 64 bits as floats, so a number too large for float64
    (``1e400``, or 1 followed by 400 zeros) becomes an infinity that validation then reports by
    item and field (422) instead of failing the whole body. NaN/Infinity tokens become markers
    that ``_check_strings_and_numbers`` reports by field.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"body is not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_NonFinite, parse_int=orjson_int)
    except RecursionError:
        raise ApiError(400, "body is nested too deeply") from None
    except ValueError as exc:
        raise ApiError(400, f"body is not valid JSON: {exc}") from None


def _check_strings_and_numbers(value: Any) -> None:
    """Raise 400 naming every NaN/Infinity token, else 422 naming every string (key or value)
    that is not valid text (see ``service.common.values.text_problem``); a reply names the first
    ``MAX_DETAILS`` of either and counts them all."""
    tokens, texts = BoundedProblems(), BoundedProblems()
    for path, item, node in walk(value, _BATCH_KEYS):
        if isinstance(node, _NonFinite):
            message = f"{node.token} is not a valid JSON number (finite numbers only)"
            tokens.add_at(path, item, message)
        elif isinstance(node, str) and (problem := text_problem(node)) is not None:
            texts.add_at(path, item, problem)
    if tokens:
        raise _error(400, "body is not valid JSON: NaN and Infinity are not numbers", tokens)
    if texts:
        raise _error(422, "the body holds text that is not valid", texts, "validation_failed")


def _error(
    status: int, message: str, problems: BoundedProblems, code: str | None = None
) -> ApiError:
    return ApiError(
        status,
        message,
        code,
        [d.to_dict() for d in problems.details],
        details_total=problems.total,
        items=len(problems.items),
    )
