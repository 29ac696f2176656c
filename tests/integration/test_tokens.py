"""Bearer tokens: required on /v1, checked per role, stored hashed, created and rotated through the
CLI."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from service.db.database import Database
from service.db.models import ApiToken
from tests.integration.conftest import Auth, assert_envelope


def test_v1_routes_need_a_token(app: Flask, client: FlaskClient) -> None:
    """Every /v1 route but the OpenAPI document (which holds no data)."""
    v1_routes = [
        r
        for r in app.url_map.iter_rules()
        if r.rule.startswith("/v1/") and r.rule != "/v1/openapi.json"
    ]
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


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("forged\treader\tcreated 2026 by x\tlive\nnext", "control character"),
        ("line\u2028separator", "control character"),
        ("a" * 101, "1 to 100 characters"),
        ("a" * 150, "1 to 100 characters"),
        ("", "1 to 100 characters"),
    ],
)
def test_a_token_name_out_of_bounds_is_refused_naming_the_field(
    db: Database, database_url: str, name: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.auth.service import create_token
    from service.auth.tokens import Role
    from service.cli import main
    from service.common.errors import ValidationFailed

    with db.session() as session, pytest.raises(ValidationFailed) as info:
        create_token(session, role=Role.READER, name=name, actor="test")
    assert [d.field for d in info.value.details] == ["name"]
    assert problem in info.value.details[0].message
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALMON_DATABASE_URL", database_url)
        assert main(["token", "create", "--role", "reader", "--name", name or "x" * 101]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calmon: invalid token name") and "Traceback" not in err
    with db.session() as session:
        assert session.scalars(select(ApiToken.name)).all() == []


def test_a_name_of_100_characters_is_a_token_name(db: Database) -> None:
    from service.auth.service import create_token
    from service.auth.tokens import Role

    with db.session() as session:
        create_token(session, role=Role.READER, name="é" * 100, actor="test")
        assert session.scalars(select(ApiToken.name)).all() == ["é" * 100]
