"""The skeleton: health, readiness, error envelope, body limits, auth."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from service import create_app
from service.db.database import Database
from service.db.models import ApiToken
from tests.integration.conftest import ADMIN_TOKEN, Auth


def assert_envelope(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"}
    assert {"code", "message", "details"} <= set(body["error"])
    assert "Traceback" not in response.get_data(as_text=True)
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def test_healthz_is_open(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readyz_reports_schema_at_head(client: FlaskClient, backend: str) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ready", "database": backend}


def test_readyz_refuses_an_unmigrated_database(tmp_path) -> None:
    app = create_app({"database_url": f"sqlite:///{tmp_path / 'empty.db'}"})
    error = assert_envelope(app.test_client().get("/readyz"), 503, "schema_outdated")
    assert "calmon migrate" in error["message"]


def test_readyz_is_503_when_the_database_is_unreachable(tmp_path) -> None:
    app = create_app({"database_url": "postgresql://nobody@127.0.0.1:1/none"})
    response = app.test_client().get("/readyz")
    assert_envelope(response, 503, "database_unavailable")
    assert response.headers["Retry-After"]


def test_unknown_route_is_a_404_envelope(client: FlaskClient, auth: Auth) -> None:
    assert_envelope(client.get("/v1/no-such-route", headers=auth.headers()), 404, "not_found")


def test_wrong_method_is_a_405_envelope(client: FlaskClient) -> None:
    response = client.post("/healthz")
    assert_envelope(response, 405, "method_not_allowed")
    assert "GET" in response.headers["Allow"]


def test_v1_routes_need_a_token(app: Flask, client: FlaskClient) -> None:
    v1_routes = [r for r in app.url_map.iter_rules() if r.rule.startswith("/v1/")]
    assert v1_routes, "the API has /v1 routes"
    for rule in v1_routes:
        method = sorted(rule.methods - {"HEAD", "OPTIONS"})[0]
        path = rule.rule.replace("<", "").replace(">", "")
        response = client.open(path, method=method)
        assert_envelope(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_wrong_token_is_401(client: FlaskClient) -> None:
    response = client.get("/v1/contracts", headers={"Authorization": "Bearer calmon_nope"})
    assert_envelope(response, 401, "unauthorized")


def test_reader_may_not_post(client: FlaskClient, auth: Auth) -> None:
    response = client.post("/v1/contracts", json={}, headers=auth.headers("reader"))
    error = assert_envelope(response, 403, "forbidden")
    assert "reader" in error["message"]


def test_ingest_may_not_read_contracts(client: FlaskClient, auth: Auth) -> None:
    assert_envelope(client.get("/v1/contracts", headers=auth.headers("ingest")), 403)


def test_bootstrap_admin_and_reader_may_read(client: FlaskClient, auth: Auth) -> None:
    for role in ("admin", "reader"):
        assert client.get("/v1/contracts", headers=auth.headers(role)).status_code == 200


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


def test_tokens_are_stored_hashed(auth: Auth, db: Database) -> None:
    token = auth.token("reader")
    with db.session() as session:
        stored = session.scalars(select(ApiToken.token_sha256)).all()
    assert stored == [hashlib.sha256(token.encode()).hexdigest()]
    assert token not in stored


def test_cli_token_create_prints_only_the_token(database_url: str, client: FlaskClient) -> None:
    env = {"CALMON_DATABASE_URL": database_url, "PATH": ""}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "token",
            "create",
            "--role",
            "reader",
            "--name",
            "cli-reader",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    token = result.stdout.strip()
    assert result.stdout == token + "\n" and token.startswith("calmon_")
    response = client.get("/v1/contracts", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    forbidden = client.post("/v1/contracts", json={}, headers={"Authorization": f"Bearer {token}"})
    assert forbidden.status_code == 403


def test_cli_rejects_an_unknown_role() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "token", "create", "--role", "root"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stdout == ""


def test_token_rotation_through_the_cli(
    client: FlaskClient,
    database_url: str,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from service.audit.store import list_events
    from service.cli import main

    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    assert main(["token", "create", "--role", "reader", "--name", "reader-2026-11"]) == 0
    old = capsys.readouterr().out.strip()
    assert main(["token", "create", "--role", "reader", "--name", "reader-2026-12"]) == 0
    new = capsys.readouterr().out.strip()
    for token in (old, new):
        assert (
            client.get("/v1/contracts", headers={"Authorization": f"Bearer {token}"}).status_code
            == 200
        )

    assert main(["token", "revoke", "--name", "reader-2026-11"]) == 0
    capsys.readouterr()
    assert (
        client.get("/v1/contracts", headers={"Authorization": f"Bearer {old}"}).status_code == 401
    )
    assert (
        client.get("/v1/contracts", headers={"Authorization": f"Bearer {new}"}).status_code == 200
    )

    assert main(["token", "list"]) == 0
    listing = capsys.readouterr().out
    assert old not in listing and new not in listing
    lines = {line.split("\t")[0]: line for line in listing.splitlines()}
    assert "revoked" in lines["reader-2026-11"] and lines["reader-2026-12"].endswith("live")

    assert main(["token", "revoke", "--name", "reader-2026-11"]) == 2
    assert "no live token" in capsys.readouterr().err
    with db.session() as session:
        revoked = list_events(session, type="token_revoked")
    assert [e.details["name"] for e in revoked] == ["reader-2026-11"]
