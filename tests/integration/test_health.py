"""Liveness and readiness probes: open, and ready only at the schema head with the database
reachable."""

from __future__ import annotations

from flask.testing import FlaskClient

from service import create_app
from tests.integration.conftest import assert_envelope


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
