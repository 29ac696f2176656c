"""One JSON error envelope for unknown routes, wrong methods, oversize and malformed bodies, and
unexpected errors; bounded however many problems a body holds; repeated keys refused."""

from __future__ import annotations

import io
import json
import tracemalloc
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY

from service import create_app
from service.common.errors import MAX_DETAILS
from service.common.json_paths import MAX_TEXT
from tests.integration.conftest import ADMIN_TOKEN, Auth, assert_envelope
from tests.integration.factories import fit_body
from tests.integration.test_stream import _multiclass_contract, minutes_ago


def test_unknown_route_is_a_404_envelope(client: FlaskClient, auth: Auth) -> None:
    assert_envelope(client.get("/v1/no-such-route", headers=auth.headers()), 404, "not_found")


def test_wrong_method_is_a_405_envelope(client: FlaskClient) -> None:
    response = client.post("/healthz")
    assert_envelope(response, 405, "method_not_allowed")
    assert "GET" in response.headers["Allow"]


def test_oversize_body_is_413(database_url: str) -> None:
    app = create_app(
        {"database_url": database_url, "admin_token": ADMIN_TOKEN, "max_body_bytes": 1000}
    )
    try:
        response = app.test_client().post(
            "/v1/contracts",
            data=b"{" + b" " * 5000 + b"}",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
        )
        error = assert_envelope(response, 413, "payload_too_large")
        assert "1000" in error["message"]
    finally:
        app.extensions["calmon.database"].dispose()


def test_malformed_bodies_get_clear_4xx(client: FlaskClient, auth: Auth) -> None:
    headers = {**auth.headers(), "Content-Type": "application/json"}
    cases = [
        (b'{"model": NaN}', 400, "NaN"),
        (b'{"model": Infinity}', 400, "Infinity"),
        (b"{not json", 400, "not valid JSON"),
        (b'{"a": "\xff\xfe"}', 400, "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested"),
        (b"[1, 2]", 422, "object"),
    ]
    for raw, status, words in cases:
        error = assert_envelope(client.post("/v1/contracts", data=raw, headers=headers), status)
        assert words in error["message"] + str(error["details"]), (raw[:20], error)
    wrong_type = client.post(
        "/v1/contracts", data=b"{}", headers={**auth.headers(), "Content-Type": "text/plain"}
    )
    assert_envelope(wrong_type, 415, "unsupported_media_type")


def test_unexpected_errors_do_not_leak_a_traceback(app: Flask) -> None:
    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret internals /etc/passwd")

    response = app.test_client().get("/boom")
    error = assert_envelope(response, 500, "internal_error")
    assert "secret" not in response.get_data(as_text=True)
    assert error["message"] == "an internal error occurred"


def _post_raw(client: FlaskClient, auth: Auth, path: str, raw: bytes) -> Any:
    headers = {**auth.headers(), "Content-Type": "application/json"}
    return client.post(path, data=raw, headers=headers)


def _rejected(endpoint: str, reason: str) -> float:
    labels = {"endpoint": endpoint, "reason": reason}
    return REGISTRY.get_sample_value("calmon_rejected_items_total", labels) or 0.0


def test_a_megabyte_of_invalid_text_under_long_keys_gets_a_small_reply(
    client: FlaskClient, auth: Auth
) -> None:
    # 100,000 lone surrogates under a 1,000-character key, in each of 3 items: one detail each
    # would name the key 100,000 times (a reply of some 300 MB).
    key = "k" * 1_000
    surrogates = "[" + ",".join(['"\\ud800"'] * 33_000) + "]"
    item = '{"' + key + '": ' + surrogates + "}"
    raw = ('{"model": "m", "predictions": [' + ",".join([item] * 3) + "]}").encode()
    assert len(raw) > 500_000
    before = _rejected("/v1/predictions", "validation_failed")
    tracemalloc.start()
    try:
        response = _post_raw(client, auth, "/v1/predictions", raw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    error = assert_envelope(response, 422, "validation_failed")
    assert len(response.get_data()) < 64_000
    assert peak < 40 * len(raw)
    assert len(error["details"]) == MAX_DETAILS and error["details_total"] == 99_000
    assert all(len(d["field"]) <= MAX_TEXT for d in error["details"])
    assert error["details"][0]["field"].startswith("predictions[0].kkk")
    assert error["details"][0]["field"].endswith("kkk[0]")
    assert _rejected("/v1/predictions", "validation_failed") - before == 3


def test_every_rejected_item_is_counted_though_the_reply_lists_a_hundred(
    client: FlaskClient, auth: Auth
) -> None:
    _multiclass_contract(client, auth, model="many")
    bad = [{"id": f"b{i}", "ts": "nope", "logits": [1, 0, 0]} for i in range(2_500)]
    before = _rejected("/v1/predictions", "validation_failed")
    response = client.post(
        "/v1/predictions", json={"model": "many", "predictions": bad}, headers=auth.headers()
    )
    error = assert_envelope(response, 422, "validation_failed")
    assert len(error["details"]) == MAX_DETAILS and error["details_total"] == 2_500
    assert [d["item"] for d in error["details"]] == list(range(MAX_DETAILS))
    assert len(response.get_data()) < 64_000
    assert _rejected("/v1/predictions", "validation_failed") - before == 2_500


def test_long_names_in_details_and_messages_are_shortened(client: FlaskClient, auth: Auth) -> None:
    body = {**fit_body("long"), "x" * 100_000: 1, "model": "m" * 50_000}
    response = client.post("/v1/contracts/fit", json=body, headers=auth.headers())
    error = assert_envelope(response, 422, "validation_failed")
    assert error["details_total"] == len(error["details"]) == 2
    assert len(response.get_data()) < 4_000
    assert all(len(d["field"]) <= MAX_TEXT for d in error["details"])


@pytest.mark.parametrize(
    ("path", "raw", "field", "item"),
    [
        ("/v1/contracts/fit", b'{"model": "a", "model": "b"}', "model", None),
        (
            "/v1/predictions",
            b'{"model": "dup", "predictions": [{"id": "a", "ts": TS, "logits": [1, 0, 0]},'
            b' {"id": "b", "ts": TS, "logits": [1, 0, 0], "logits": [0, 0, 1]}]}',
            "predictions[1].logits",
            1,
        ),
        (
            "/v1/predictions",
            b'{"model": "dup", "predictions": [{"id": "a", "ts": TS, "logits": [1, 0, 0],'
            b' "cohort": {"region": "emea", "region": "apac"}}]}',
            "predictions[0].cohort.region",
            0,
        ),
        (
            "/v1/labels",
            b'{"model": "dup", "labels": [{"id": "a", "label": 0, "ts": TS, "label": 1}]}',
            "labels[0].label",
            0,
        ),
        # Refused before any lookup: not a 404 or 409 about the last value, or the model.
        (
            "/v1/predictions",
            b'{"model": "dup", "model": "ghost", "predictions": [{"id": "a", "ts": TS,'
            b' "logits": [1, 0, 0]}]}',
            "model",
            None,
        ),
        (
            "/v1/predictions",
            b'{"model": "dup", "contract_id": "c-0", "contract_id": "c-1", "predictions":'
            b' [{"id": "a", "ts": TS, "logits": [1, 0, 0]}]}',
            "contract_id",
            None,
        ),
        (
            "/v1/predictions",
            b'{"model": "ghost", "predictions": [{"id": "a", "ts": TS, "logits": [1, 0, 0],'
            b' "id": "b"}]}',
            "predictions[0].id",
            0,
        ),
        (
            "/v1/labels",
            b'{"model": "dup", "labels": [{"id": "a", "label": 0, "ts": TS}], "model": "ghost"}',
            "model",
            None,
        ),
        (
            "/v1/gate",
            b'{"contract_id": "x", "policy": {"max_ece": 0.1, "max_ece": 0.2}}',
            "policy.max_ece",
            None,
        ),
    ],
)
def test_a_key_repeated_within_an_object_is_refused_and_named(
    client: FlaskClient, auth: Auth, path: str, raw: bytes, field: str, item: int | None
) -> None:
    _multiclass_contract(client, auth, model="dup")
    raw = raw.replace(b"TS", json.dumps(minutes_ago(5)).encode())
    error = assert_envelope(_post_raw(client, auth, path, raw), 400, "bad_request")
    assert "unique" in error["message"]
    assert [(d["field"], d.get("item")) for d in error["details"]] == [(field, item)]
    reading = client.get("/v1/models/dup/calibration?window=1h", headers=auth.headers()).get_json()
    assert reading["n_predictions"] == 0
    cohorts = client.get("/v1/models/dup/cohorts", headers=auth.headers()).get_json()
    assert all(s["n_labeled"] == 0 for s in cohorts["slices"])


def test_a_chunked_body_over_the_limit_is_413_like_one_with_its_length(database_url: str) -> None:
    app = create_app(
        {"database_url": database_url, "admin_token": ADMIN_TOKEN, "max_body_bytes": 1000}
    )
    client = app.test_client()
    headers = {
        "Authorization": f"Bearer {ADMIN_TOKEN}",
        "Content-Type": "application/json",
        "Transfer-Encoding": "chunked",
    }
    # What gunicorn hands over for a chunked body: no Content-Length, input terminated.
    server = {"wsgi.input_terminated": True}
    valid_then_padding = b'{"model": "m", "labels": []}' + b" " * 2000
    try:
        for raw in (valid_then_padding, b'{"model": "' + b"m" * 5000 + b'"}', b" " * 1001):
            response = client.post(
                "/v1/labels",
                input_stream=io.BytesIO(raw),
                headers=headers,
                environ_overrides=server,
            )
            error = assert_envelope(response, 413, "payload_too_large")
            assert "1000" in error["message"]
        exactly = b'{"model": "m", "labels": []}'.ljust(1000)
        response = client.post(
            "/v1/labels",
            input_stream=io.BytesIO(exactly),
            headers=headers,
            environ_overrides=server,
        )
        error = assert_envelope(response, 422, "validation_failed")
        assert error["details"][0]["field"] == "labels"
    finally:
        app.extensions["calmon.database"].dispose()
