"""The ``gate`` role: read and ask the gate, no more (every route against every role is in
test_openapi_document.py's explicit table)."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from service.auth.tokens import GRANTS, Permission, Role
from service.cli import main
from tests.integration.conftest import Auth
from tests.integration.factories import fit_body

ROLES = ("reader", "ingest", "gate", "admin")


def test_the_grants() -> None:
    assert GRANTS[Role.GATE] == {Permission.READ, Permission.GATE}
    assert {r.value for r in Role} == set(ROLES)
    assert all(Permission.GATE not in GRANTS[r] for r in (Role.READER, Role.INGEST))


def test_a_ci_pipeline_with_a_gate_token(
    client: FlaskClient,
    auth: Auth,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    assert main(["token", "create", "--role", "gate", "--name", "ci-gate"]) == 0
    token = capsys.readouterr().out.strip()
    ci = {"Authorization": f"Bearer {token}"}
    assert main(["token", "list"]) == 0
    assert "ci-gate\tgate\t" in capsys.readouterr().out

    contract = client.post("/v1/contracts/fit", json=fit_body(), headers=auth.headers()).get_json()
    decided = client.post("/v1/gate", json={"contract_id": contract["id"]}, headers=ci)
    assert decided.status_code == 201 and decided.get_json()["decided_by"] == "ci-gate"
    assert client.get("/v1/gate/decisions", headers=ci).status_code == 200
    assert client.get(f"/v1/contracts/{contract['id']}", headers=ci).status_code == 200
    for method, path, body in [
        ("POST", "/v1/contracts", {}),
        ("POST", "/v1/contracts/fit", fit_body("sneaky")),
        ("POST", f"/v1/contracts/{contract['id']}/retire", {"reason": "mine now"}),
        ("POST", "/v1/predictions", {"model": "glyphs", "predictions": []}),
        ("POST", "/v1/labels", {"model": "glyphs", "labels": []}),
    ]:
        assert client.open(path, method=method, json=body, headers=ci).status_code == 403, path
    assert client.get("/v1/models/glyphs/contract", headers=ci).get_json()["retired"] is False

    signed = client.post("/ui/sign-in", data={"token": token, "next": "/ui/models/glyphs"})
    assert signed.status_code == 303
    page = client.get("/ui/models/glyphs")
    assert page.status_code == 200 and "ci-gate (gate)" in page.get_data(as_text=True)


def test_the_gate_role_needs_migration_0008(auth: Auth) -> None:
    """The role is in the database's check constraint (a gate token can be stored)."""
    assert auth.token("gate").startswith("calmon_")
