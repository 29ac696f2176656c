"""Audited writes sent again with their Idempotency-Key: one contract, one decision, one
retirement, one audit event, and the first result returned; a commit that outlasts calmon's
bound is answered 503 and its retry stores the write once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select, text

from service import create_app
from service.db.database import Database
from service.db.migrate import upgrade_to_head
from service.db.models import AuditEventRecord, ContractRecord, GateDecisionRecord
from tests.integration.conftest import ADMIN_TOKEN, BACKEND, Auth, assert_envelope, fresh_database
from tests.integration.factories import fit_body, registration_body


def _post(client: FlaskClient, auth: Auth, path: str, body: Any, key: str | None) -> Any:
    headers = auth.headers()
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post(path, json=body, headers=headers)


def _count(db: Database, table: type, **where: Any) -> int:
    """Rows of ``table`` matching ``where``, read in a session of its own (a session held open
    across requests would hold SQLite's write lock)."""
    query = select(func.count()).select_from(table)
    for name, value in where.items():
        query = query.where(getattr(table, name) == value)
    with db.read_session() as session:
        return int(session.scalar(query) or 0)


def test_a_fit_sent_again_with_its_key_is_one_contract(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    first = _post(client, auth, "/v1/contracts/fit", fit_body("keyed"), "fit-1")
    again = _post(client, auth, "/v1/contracts/fit", fit_body("keyed"), "fit-1")
    assert first.status_code == again.status_code == 201
    assert again.get_json() == first.get_json()
    assert _count(db, ContractRecord, model="keyed") == 1
    assert _count(db, AuditEventRecord, model="keyed", type="contract_fitted") == 1
    other = _post(client, auth, "/v1/contracts/fit", fit_body("keyed"), "fit-2")
    assert other.get_json()["version"] == 2


def test_a_registration_sent_again_with_its_key_is_one_contract(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    fitted = _post(client, auth, "/v1/contracts/fit", fit_body("source"), None).get_json()
    body = registration_body(fitted, model="registered")
    first = _post(client, auth, "/v1/contracts", body, "register-1")
    again = _post(client, auth, "/v1/contracts", body, "register-1")
    assert first.status_code == again.status_code == 201
    assert again.get_json()["id"] == first.get_json()["id"]
    assert _count(db, ContractRecord, model="registered") == 1
    assert _count(db, AuditEventRecord, model="registered") == 1


def test_a_gate_request_and_a_retirement_sent_again_are_one_decision_and_one_retirement(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = _post(client, auth, "/v1/contracts/fit", fit_body("gated"), None).get_json()
    body = {"contract_id": contract["id"]}
    first = _post(client, auth, "/v1/gate", body, "gate-1")
    again = _post(client, auth, "/v1/gate", body, "gate-1")
    assert first.status_code == again.status_code == 201
    assert again.get_json() == first.get_json()
    assert _count(db, GateDecisionRecord, contract_id=contract["id"]) == 1
    unkeyed = _post(client, auth, "/v1/gate", body, None)
    assert unkeyed.get_json()["id"] != first.get_json()["id"]

    path = f"/v1/contracts/{contract['id']}/retire"
    retired = _post(client, auth, path, {"reason": "superseded"}, "retire-1")
    retried = _post(client, auth, path, {"reason": "superseded"}, "retire-1")
    assert retired.status_code == retried.status_code == 200
    assert retried.get_json() == retired.get_json()
    assert _count(db, AuditEventRecord, type="contract_retired") == 1
    assert_envelope(_post(client, auth, path, {"reason": "superseded"}, None), 409)


def test_a_key_names_one_request(client: FlaskClient, auth: Auth, db: Database) -> None:
    assert _post(client, auth, "/v1/contracts/fit", fit_body("k1"), "same").status_code == 201
    error = assert_envelope(
        _post(client, auth, "/v1/contracts/fit", fit_body("k2"), "same"), 409, "conflict"
    )
    assert "Idempotency-Key" in error["message"]
    contract = _post(client, auth, "/v1/contracts/fit", fit_body("k3"), None).get_json()
    assert_envelope(_post(client, auth, "/v1/gate", {"contract_id": contract["id"]}, "same"), 409)
    assert _count(db, ContractRecord, model="k2") == 0
    assert _count(db, GateDecisionRecord) == 0


@pytest.mark.parametrize("key", ["", "a b", "é", "x" * 201])
def test_a_malformed_key_is_a_400_naming_the_header(
    client: FlaskClient, auth: Auth, db: Database, key: str
) -> None:
    headers = {**auth.headers(), "Idempotency-Key": key}
    response = client.post("/v1/contracts/fit", json=fit_body("bad-key"), headers=headers)
    error = assert_envelope(response, 400)
    assert error["details"][0]["field"] == "Idempotency-Key"
    assert _count(db, ContractRecord) == 0


@pytest.fixture
def slow_commit_app(tmp_path: Path) -> Iterator[tuple[Flask, Any]]:
    """An app bounding commits at 1 s on a database of its own whose gate decisions take 3 s
    to commit (a deferred constraint trigger sleeps at COMMIT, as a commit waiting for a
    synchronous standby does); yields the app and a function that makes commits fast again."""
    with fresh_database(tmp_path, "slow.db") as url:
        upgrade_to_head(url)
        app = create_app({"database_url": url, "admin_token": ADMIN_TOKEN, "commit_seconds": 1})
        engine = app.extensions["calmon.database"].engine
        with engine.begin() as connection:
            connection.execute(
                text(
                    "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$"
                )
            )
            connection.execute(
                text(
                    "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON gate_decisions "
                    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()"
                )
            )

        def fast() -> None:
            with engine.begin() as connection:
                connection.execute(text("DROP TRIGGER slow_commit ON gate_decisions"))

        try:
            yield app, fast
        finally:
            app.extensions["calmon.database"].dispose()


@pytest.mark.skipif(BACKEND != "postgresql", reason="commits are bounded on PostgreSQL")
def test_a_commit_past_the_bound_is_a_503_and_its_retry_is_stored_once(
    slow_commit_app: tuple[Flask, Any],
) -> None:
    app, fast = slow_commit_app
    client = app.test_client()
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Idempotency-Key": "slow-gate"}
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    contract = client.post("/v1/contracts/fit", json=fit_body("slow"), headers=admin)
    assert contract.status_code == 201
    body = {"contract_id": contract.get_json()["id"]}
    response = client.post("/v1/gate", json=body, headers=headers)
    assert_envelope(response, 503, "database_unavailable")
    assert response.headers["Retry-After"]
    fast()
    retried = client.post("/v1/gate", json=body, headers=headers)
    assert retried.status_code == 201
    again = client.post("/v1/gate", json=body, headers=headers)
    assert again.get_json()["id"] == retried.get_json()["id"]
    db = app.extensions["calmon.database"]
    assert _count(db, GateDecisionRecord) == 1
    assert _count(db, AuditEventRecord, type="gate_decided") == 1
