"""Request bodies: NaN tokens, invalid text and numbers beyond float64 are named by field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask

from service.web.bodies import json_body
from service.web.http_errors import ApiError


@pytest.fixture
def app() -> Flask:
    return Flask(__name__)


def _json(app: Flask, raw: bytes) -> Any:
    with app.test_request_context(
        "/", method="POST", data=raw, headers={"Content-Type": "application/json"}
    ):
        return json_body()


def test_bodies_name_nan_tokens_with_a_400(app: Flask) -> None:
    with pytest.raises(ApiError) as info:
        _json(app, b'{"predictions": [{"logits": [1, NaN]}, {"score": -Infinity}]}')
    assert info.value.status == 400
    assert [(d["field"], d.get("item")) for d in info.value.details] == [
        ("predictions[0].logits[1]", 0),
        ("predictions[1].score", 1),
    ]


def test_bodies_name_every_string_that_is_not_text(app: Flask) -> None:
    raw = b'{"model": "a\\u0000", "x": {"\\ud800": "ok", "y": ["\\udc00"]}, "z": "\\ud83d\\ude00"}'
    with pytest.raises(ApiError) as info:
        _json(app, raw)
    assert info.value.status == 422
    assert [d["field"] for d in info.value.details] == ["model", "x.\\ud800", "x.y[0]"]


def test_numbers_beyond_float64_reach_validation_as_infinities(app: Flask) -> None:
    raw = ('{"a": 1' + "0" * 400 + ', "b": 1e400, "c": 18446744073709551616, "d": 3}').encode()
    body = _json(app, raw)
    assert body["a"] == body["b"] == float("inf")
    assert body["c"] == float(2**64) and isinstance(body["d"], int)


def test_a_clean_body_with_escaped_emoji_passes(app: Flask) -> None:
    assert _json(app, b'{"a": "\\ud83d\\ude00", "b": "\\\\u0000"}') == {"a": "😀", "b": "\\u0000"}


def test_json_round_trip_of_the_error_details_keeps_them_ascii(app: Flask) -> None:
    with pytest.raises(ApiError) as info:
        _json(app, b'{"\\u0000k": 1}')
    assert json.dumps(info.value.details, ensure_ascii=True)
    assert info.value.details[0]["field"] == "\\x00k"
