"""The audit log vouches for the rows written with its events, and a keyed log for its own end.

Each test tampers with the database the way someone with write access (and without the audit
key) could, and checks that ``GET /v1/audit/verify``, ``calmon audit verify`` and, for
contracts, ``GET /v1/contracts/{id}/verify`` name what was changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator

from service.audit.head import KeyedHead
from service.audit.head_store import read_head, write_head
from service.audit.records import LISTED_PROBLEMS
from service.audit.store import seal
from service.auth.service import create_token
from service.auth.tokens import Role
from service.cli import main
from service.common.clock import utcnow
from service.contracts.model import content_sha256, hashed_document
from service.contracts.store import get_contract
from service.db.database import Database
from service.gate.store import GateDecision, insert_decision
from service.web.routes import api_document
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import fit_body, registration_body
from tests.integration.test_audit import KEY, keyed_app, rehash, sql

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def conforms(reply: dict[str, Any], component: str) -> None:
    """``reply`` is valid under the served document's schema named ``component``."""
    components = api_document()["components"]
    schema = {"$ref": f"#/components/schemas/{component}", "components": components}
    Draft202012Validator(schema).validate(reply)


def ok(response: Any, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def fitted(client: FlaskClient, model: str = "glyphs") -> dict[str, Any]:
    return ok(client.post("/v1/contracts/fit", json=fit_body(model), headers=ADMIN), 201)


def decided(client: FlaskClient, contract_id: str) -> dict[str, Any]:
    return ok(client.post("/v1/gate", json={"contract_id": contract_id}, headers=ADMIN), 201)


def verify(client: FlaskClient) -> dict[str, Any]:
    return ok(client.get("/v1/audit/verify", headers=ADMIN))


def verify_contract(client: FlaskClient, contract_id: str) -> dict[str, Any]:
    return ok(client.get(f"/v1/contracts/{contract_id}/verify", headers=ADMIN))


def only_problem(report: dict[str, Any]) -> dict[str, Any]:
    assert report["valid"] is False, report
    assert report["problem_count"] == 1 and len(report["problems"]) == 1, report["problems"]
    problem: dict[str, Any] = report["problems"][0]
    return problem


def history(client: FlaskClient) -> dict[str, Any]:
    """Two models, a fitted and a registered contract, a second version, a decision and a
    retirement: every kind of row the log vouches for."""
    first = fitted(client)
    second = fitted(client)
    registered = ok(
        client.post("/v1/contracts", json=registration_body(first, model="copied"), headers=ADMIN),
        201,
    )
    decision = decided(client, second["id"])
    ok(client.post(f"/v1/contracts/{first['id']}/retire", json={"reason": "v2"}, headers=ADMIN))
    return {"first": first, "second": second, "registered": registered, "decision": decision}


@pytest.fixture
def keyed(app: Flask, database_url: str) -> Iterator[Flask]:
    """A second app on the same database under ``CALMON_AUDIT_KEY``, its log sealed (what
    ``calmon migrate`` does): a keyed segment and a keyed head."""
    application = keyed_app(database_url)
    database: Database = application.extensions["calmon.database"]
    with database.session() as session:
        assert seal(session, actor="tests", now=utcnow())
        session.commit()
    try:
        yield application
    finally:
        database.dispose()


def test_an_untouched_database_verifies_and_says_what_it_checked(
    client: FlaskClient,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = history(client)
    report = verify(client)
    assert report["valid"] is True, report["problems"]
    assert report["checked"] == {"events": 5, "contracts": 3, "decisions": 1, "retirements": 1}
    assert report["problem_count"] == 0 and report["problems"] == []
    assert report["keyed_head"] is None, "no key, no keyed head to check"
    for section, checked in (("contracts", 3), ("decisions", 1), ("retirements", 1)):
        assert report[section] == {"valid": True, "checked": checked, "problem_count": 0}
    assert "reason" not in report and "first_invalid_seq" not in report
    conforms(report, "ChainVerification")

    contract = verify_contract(client, rows["registered"]["id"])
    assert contract["valid"] is True and contract["problems"] == []
    assert contract["event"]["type"] == "contract_registered"
    assert contract["event"]["content_sha256"] == rows["registered"]["content_sha256"]
    conforms(contract, "Verification")

    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.delenv("CALMON_AUDIT_KEY", raising=False)
    assert main(["audit", "verify"]) == 0
    err = capsys.readouterr().err
    assert "checked 5 events, 3 contracts, 1 gate decision and 1 retirement" in err
    assert "the audit log verifies" in err


def test_a_contract_rewritten_with_its_hash_recomputed_is_found(
    client: FlaskClient, db: Database
) -> None:
    contract = fitted(client)
    assert verify_contract(client, contract["id"])["valid"] is True
    with db.session() as session:
        stored = get_contract(session, contract["id"])
        assert stored is not None
        spec = dataclasses.replace(stored.spec, population="a kinder population")
        digest = content_sha256(
            hashed_document(stored.id, stored.version, spec, stored.created_at, stored.created_by)
        )
    sql(
        db,
        "UPDATE contracts SET population = :p, content_sha256 = :h WHERE id = :i",
        p="a kinder population",
        h=digest,
        i=contract["id"],
    )

    alone = verify_contract(client, contract["id"])
    assert alone["valid"] is False, "its own hash matches, its event's does not"
    assert alone["recomputed_sha256"] == alone["content_sha256"] == digest
    assert alone["event"]["content_sha256"] == contract["content_sha256"]
    assert [p["differences"] for p in alone["problems"]] == [
        {
            "content": {"row": digest, "event": contract["content_sha256"]},
            "content_sha256": {"row": digest, "event": contract["content_sha256"]},
        }
    ]

    report = verify(client)
    problem = only_problem(report)
    conforms(report, "ChainVerification")
    assert problem["check"] == "contract" and problem["contract_id"] == contract["id"]
    assert (problem["model"], problem["version"]) == ("glyphs", 1)
    assert set(problem["differences"]) == {"content", "content_sha256"}
    assert "rewritten together" in problem["problem"]


def test_a_contract_edited_without_its_hash_names_the_field(
    client: FlaskClient, db: Database
) -> None:
    contract = fitted(client)
    sql(db, "UPDATE contracts SET created_by = 'someone-else' WHERE id = :i", i=contract["id"])
    problem = only_problem(verify(client))
    assert set(problem["differences"]) == {"content", "created_by"}
    assert problem["differences"]["created_by"] == {
        "row": "someone-else",
        "event": "bootstrap-admin",
    }
    assert verify_contract(client, contract["id"])["valid"] is False


def test_a_deleted_contract_version_is_found(client: FlaskClient, db: Database) -> None:
    fitted(client)
    second = fitted(client)
    assert verify(client)["valid"] is True
    sql(db, "DELETE FROM contracts WHERE id = :i", i=second["id"])
    problem = only_problem(verify(client))
    assert problem == {
        "check": "contract",
        "contract_id": second["id"],
        "model": "glyphs",
        "version": 2,
        "seq": problem["seq"],
        "problem": "the contract_fitted event has no contract row: the contract was deleted",
    }
    assert problem["seq"] == 2
    assert verify(client)["reason"] == f"contract {second['id']}: {problem['problem']}"


def test_a_flipped_decision_is_found(client: FlaskClient, db: Database) -> None:
    decision = decided(client, fitted(client)["id"])
    flipped = "pass" if decision["decision"] == "fail" else "fail"
    assert verify(client)["valid"] is True
    sql(db, "UPDATE gate_decisions SET decision = :d WHERE id = :i", d=flipped, i=decision["id"])
    problem = only_problem(verify(client))
    assert problem["check"] == "decision" and problem["decision_id"] == decision["id"]
    assert problem["differences"] == {"decision": {"row": flipped, "event": decision["decision"]}}
    assert problem["problem"] == "the decision differs from its gate_decided event: decision"


def test_a_decision_with_rewritten_evidence_is_found(client: FlaskClient, db: Database) -> None:
    decision = decided(client, fitted(client)["id"])
    sql(
        db,
        "UPDATE gate_decisions SET evidence = :e, checks = :c WHERE id = :i",
        e='{"n_eval": 5000}',
        c="[]",
        i=decision["id"],
    )
    problem = only_problem(verify(client))
    assert set(problem["differences"]) == {"evidence", "failed_checks"}
    assert problem["differences"]["failed_checks"]["row"] == []


def test_a_deleted_decision_is_found(client: FlaskClient, db: Database) -> None:
    contract = fitted(client)
    kept, deleted = decided(client, contract["id"]), decided(client, contract["id"])
    sql(db, "DELETE FROM gate_decisions WHERE id = :i", i=deleted["id"])
    problem = only_problem(verify(client))
    assert problem["check"] == "decision" and problem["decision_id"] == deleted["id"]
    assert problem["decision_id"] != kept["id"]
    assert "has no decision row" in problem["problem"]


def test_a_deleted_event_is_found_after_the_chain_is_rehashed(
    client: FlaskClient, db: Database
) -> None:
    """Without a key, whoever deletes an event can rebuild the chain; the row the event
    recorded is then left without it."""
    contract = fitted(client)
    decision = decided(client, contract["id"])
    sql(db, "DELETE FROM audit_events WHERE type = 'gate_decided'")
    rehash(db, 1)
    report = verify(client)
    assert report["chain"]["valid"], "the rebuilt chain links"
    problem = only_problem(report)
    assert problem["check"] == "decision" and problem["decision_id"] == decision["id"]
    assert problem["seq"] is None and "has no gate_decided event" in problem["problem"]

    sql(db, "DELETE FROM audit_events WHERE type = 'contract_fitted'")
    rehash(db, 1)
    problems = verify(client)["problems"]
    assert [(p["check"], p.get("contract_id")) for p in problems] == [
        ("contract", contract["id"]),
        ("decision", contract["id"]),
    ]
    alone = verify_contract(client, contract["id"])
    assert alone["valid"] is False and alone["event"] is None


def test_problems_are_counted_and_the_first_hundred_listed(
    client: FlaskClient,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    contract = fitted(client)
    template = decided(client, contract["id"])
    with db.session() as session:
        for i in range(LISTED_PROBLEMS + 5):
            insert_decision(
                session,
                GateDecision(
                    seq=0,
                    id=f"00000000-0000-0000-0000-{i:012d}",
                    contract_id=contract["id"],
                    model="glyphs",
                    decided_at=utcnow(),
                    decided_by="nobody",
                    decision="pass",
                    policy=template["policy"],
                    checks=[],
                    evidence={},
                    policy_sha256="0" * 64,
                    evidence_sha256="0" * 64,
                ),
            )
        session.commit()
    report = verify(client)
    assert report["problem_count"] == LISTED_PROBLEMS + 5
    assert len(report["problems"]) == LISTED_PROBLEMS
    assert report["decisions"] == {
        "valid": False,
        "checked": LISTED_PROBLEMS + 6,
        "problem_count": LISTED_PROBLEMS + 5,
    }

    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.delenv("CALMON_AUDIT_KEY", raising=False)
    assert main(["audit", "verify"]) == 1
    err = capsys.readouterr().err
    assert f"does not verify: {LISTED_PROBLEMS + 5} problems" in err
    assert err.count("has no gate_decided event") == LISTED_PROBLEMS
    assert f"the first {LISTED_PROBLEMS} of {LISTED_PROBLEMS + 5} problems are listed" in err


def test_a_keyed_log_verifies_with_its_keyed_head(keyed: Flask) -> None:
    signer = keyed.test_client()
    history(signer)
    report = verify(signer)
    assert report["valid"] is True, report["problems"]
    head = report["keyed_head"]
    assert head["valid"] is True and head["reason"] is None
    assert (head["events"], head["seq"], head["sha256"]) == (
        report["events"],
        report["head"]["seq"],
        report["head"]["sha256"],
    )
    assert KEY not in str(report)


def test_an_emptied_keyed_log_is_found(keyed: Flask, db: Database) -> None:
    signer = keyed.test_client()
    decided(signer, fitted(signer)["id"])
    assert verify(signer)["valid"] is True
    for table in ("gate_decisions", "contract_retirements", "contracts", "audit_events"):
        sql(db, f"DELETE FROM {table}")
    emptied = verify(signer)
    assert emptied["events"] == 0 and emptied["chain"]["valid"]
    problem = only_problem(emptied)
    assert problem["check"] == "keyed_head"
    assert "the log is empty: its events were deleted" in problem["problem"]

    sql(db, "DELETE FROM audit_head")
    problem = only_problem(verify(signer))
    assert problem["check"] == "keyed_head" and "has no keyed head" in problem["problem"]
    fitted(signer, "after")
    assert verify(signer)["valid"] is False, "an append does not write a deleted head again"


def test_a_keyed_log_truncated_at_the_end_is_found(
    keyed: Flask,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    signer = keyed.test_client()
    fitted(signer)
    head = verify(signer)["head"]
    with keyed.extensions["calmon.database"].session() as session:
        create_token(session, role=Role.READER, name="later", actor="tests")
    assert verify(signer)["valid"] is True
    sql(db, "DELETE FROM audit_events WHERE seq > :s", s=head["seq"])
    truncated = verify(signer)
    assert truncated["chain"]["valid"] and truncated["head"] == head
    problem = only_problem(truncated)
    assert (
        problem["check"] == "keyed_head" and "the newest events were deleted" in problem["problem"]
    )

    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.setenv("CALMON_AUDIT_KEY", KEY)
    assert main(["audit", "verify"]) == 1
    assert "the newest events were deleted" in capsys.readouterr().err

    with db.session() as session:
        stored = read_head(session)
        assert stored is not None
        forged = KeyedHead(head["seq"], head["seq"], head["sha256"], stored.key_id, stored.mac)
        write_head(session, forged)
        session.commit()
    assert "does not match its HMAC" in only_problem(verify(signer))["problem"]

    fitted(signer, "after")
    assert verify(signer)["valid"] is False, "the next append does not cover it up"


def test_migrate_writes_the_first_keyed_head_only_for_a_chain_that_verifies(
    client: FlaskClient,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``calmon migrate`` under a new key starts the keyed segment of a plain log and writes
    its keyed head, but only over a chain that verifies (a head would otherwise vouch for the
    tampering)."""
    fitted(client)
    actor = fitted(client)["created_by"]
    sql(db, "UPDATE audit_events SET actor = 'someone-else' WHERE seq = 2")
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.setenv("CALMON_AUDIT_KEY", KEY)
    assert main(["migrate"]) == 0
    err = capsys.readouterr().err
    assert "no keyed audit head is written: the audit chain does not verify (seq 2" in err
    with db.session() as session:
        assert read_head(session) is None

    sql(db, "UPDATE audit_events SET actor = :a WHERE seq = 2", a=actor)
    assert main(["migrate"]) == 0
    assert "no keyed audit head is written: the log has keyed events but no keyed head" in (
        capsys.readouterr().err
    ), "the segment the first run started makes the log keyed: repaired, it needs a reseal"
    assert main(["audit", "reseal", "--i-know"]) == 0
    assert main(["audit", "verify"]) == 0


def test_a_log_keyed_without_a_head_is_sealed_by_reseal_only(
    app: Flask,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Keyed events without a keyed head (written by a keyed process before ``calmon
    migrate`` ran, or before calmon kept a head) look like a head deleted after a truncation:
    ``calmon migrate`` leaves the log invalid, ``calmon audit reseal --i-know`` seals it."""
    unsealed = keyed_app(database_url)
    try:
        signer = unsealed.test_client()
        fitted(signer)
        problem = only_problem(verify(signer))
        assert problem["check"] == "keyed_head"
        assert "`calmon audit reseal --i-know` writes one over it" in problem["problem"]

        monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
        monkeypatch.setenv("CALMON_AUDIT_KEY", KEY)
        assert main(["migrate"]) == 0
        assert "the log has keyed events but no keyed head" in capsys.readouterr().err
        assert only_problem(verify(signer))["check"] == "keyed_head"

        assert main(["audit", "reseal", "--i-know"]) == 0
        assert "the keyed head now vouches for the 3 events up to seq 3" in (
            capsys.readouterr().err
        )
        assert verify(signer)["valid"] is True
        fitted(signer, "later")
        assert verify(signer)["keyed_head"]["events"] == 4, "appends advance it"
        assert main(["migrate"]) == 0
        assert "keyed audit head" not in capsys.readouterr().err
    finally:
        unsealed.extensions["calmon.database"].dispose()
