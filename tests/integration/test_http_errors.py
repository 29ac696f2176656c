"""One JSON error envelope for unknown routes, wrong methods, oversize and malformed bodies, and
unexpected errors."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from service import create_app
from tests.integration.conftest import ADMIN_TOKEN, Auth, assert_envelope


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
