"""Strict JSON request bodies: JSON only, finite numbers only, valid text only, an object on top."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import orjson
from flask import request

from service.common.values import text_problem
from service.web.http_errors import ApiError

#: Escapes in the raw body that may decode to text calmon refuses (NUL, a surrogate half): only
#: bodies holding one are walked string by string, so a clean 100,000-item batch costs nothing.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abAB-fF])")
#: Lists of items whose index the error details also give as ``item``.
_BATCH_KEYS = frozenset({"predictions", "labels"})
#: orjson's integer range; the standard library's parser is told to keep the same one.
_INT_RANGE = (-(2**63), 2**64 - 1)


class _NonFinite:
    """Where the body held a ``NaN``/``Infinity`` token (never a valid JSON number)."""

    def __init__(self, token: str) -> None:
        self.token = token


def json_body() -> dict[str, Any]:
    """Parse the request body as a JSON object or raise a 4xx naming the problem.

    415 without ``application/json``; 400 for invalid UTF-8, malformed JSON, NaN/Infinity tokens
    (their details name each field holding one) or excessive nesting; 422 when the top level is
    not an object or a string anywhere in it (key or value) holds a NUL or a lone surrogate,
    naming each. The size limit (413) is enforced by Flask's ``MAX_CONTENT_LENGTH`` while reading.
    """
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
    return value


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
        return json.loads(text, parse_constant=_NonFinite, parse_int=_parse_int)
    except RecursionError:
        raise ApiError(400, "body is nested too deeply") from None
    except ValueError as exc:
        raise ApiError(400, f"body is not valid JSON: {exc}") from None


def _parse_int(text: str) -> int | float:
    number = int(text)
    low, high = _INT_RANGE
    return number if low <= number <= high else float(text)


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every key and leaf of a decoded body with its dotted path, in document order (a key is
    yielded as a leaf at its own path). Iterative: a body nests as deep as the parser allows."""
    stack: list[tuple[Any, str, bool]] = [(value, path, False)]
    while stack:
        node, where, is_key = stack.pop()
        if is_key or not isinstance(node, dict | list):
            yield where, node
        elif isinstance(node, dict):
            for key, child in reversed(node.items()):
                child_path = f"{where}.{key}" if where else key
                stack.append((child, child_path, False))
                stack.append((key, child_path, True))
        else:
            stack.extend((node[i], f"{where}[{i}]", False) for i in reversed(range(len(node))))


def _detail(path: str, message: str) -> dict[str, Any]:
    printable = path.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    out: dict[str, Any] = {"field": printable or "(body)", "message": message}
    head, _, rest = printable.partition("[")
    if head in _BATCH_KEYS and rest[: rest.find("]")].isdecimal():
        out["item"] = int(rest[: rest.find("]")])
    return out


def _check_strings_and_numbers(value: Any) -> None:
    """Raise 400 naming every NaN/Infinity token, else 422 naming every string that is not
    valid text (see ``service.common.values.text_problem``)."""
    tokens, texts = [], []
    for path, leaf in _walk(value, ""):
        if isinstance(leaf, _NonFinite):
            tokens.append(
                _detail(path, f"{leaf.token} is not a valid JSON number (finite numbers only)")
            )
        elif isinstance(leaf, str) and (problem := text_problem(leaf)) is not None:
            texts.append(_detail(path, problem))
    if tokens:
        raise ApiError(
            400, "body is not valid JSON: NaN and Infinity are not numbers", None, tokens
        )
    if texts:
        raise ApiError(422, "the body holds text that is not valid", "validation_failed", texts)
