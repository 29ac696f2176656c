"""A keyed log cut at its end stays invalid through ``calmon migrate``; only
``calmon audit reseal --i-know``, with the key, writes a head over it, as an audit event.

Each truncation deletes the newest events together with the rows they recorded (a retirement,
a gate decision, a contract), the way someone with write access but without the key covers it
up, so that only the keyed head can tell.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text

from service.audit.head_store import read_head
from service.audit.store import list_events, seal
from service.auth.service import create_token
from service.auth.tokens import Role
from service.cli import main
from service.common.clock import utcnow
from service.db.database import Database
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.factories import fit_body
from tests.integration.test_audit import KEY, OLD_KEY, keyed_app, sql

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: The rows an event recorded, by its type: deleted with it.
RECORDED_ROWS = {
    "contract_retired": "DELETE FROM contract_retirements WHERE contract_id = :contract",
    "gate_decided": "DELETE FROM gate_decisions WHERE contract_id = :contract",
    "contract_fitted": "DELETE FROM contracts WHERE id = :contract",
}


def ok(response: Any, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def fitted(client: FlaskClient, model: str = "glyphs") -> dict[str, Any]:
    return ok(client.post("/v1/contracts/fit", json=fit_body(model), headers=ADMIN), 201)


def verify(client: FlaskClient) -> dict[str, Any]:
    return ok(client.get("/v1/audit/verify", headers=ADMIN))


@pytest.fixture
def keyed(app: Flask, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flask]:
    """An app under ``CALMON_AUDIT_KEY`` on the test database, its log sealed, and the
    environment the ``calmon`` command reads set to the same database and key."""
    application = keyed_app(database_url)
    database: Database = application.extensions["calmon.database"]
    with database.session() as session:
        assert seal(session, actor="tests", now=utcnow())
        session.commit()
    monkeypatch.setenv("CALMON_DATABASE_URL", database_url)
    monkeypatch.setenv("CALMON_AUDIT_KEY", KEY)
    try:
        yield application
    finally:
        database.dispose()


def keyed_history(application: Flask) -> str:
    """Thirteen keyed events after the one that starts the segment, the newest a
    ``contract_retired``; returns the retired contract's id."""
    signer = application.test_client()
    first = fitted(signer)
    ok(signer.post("/v1/gate", json={"contract_id": first["id"]}, headers=ADMIN), 201)
    with application.extensions["calmon.database"].session() as session:
        for n in range(8):
            create_token(session, role=Role.READER, name=f"reader-{n}", actor="tests")
    second = fitted(signer, "later")
    ok(signer.post("/v1/gate", json={"contract_id": second["id"]}, headers=ADMIN), 201)
    ok(signer.post(f"/v1/contracts/{first['id']}/retire", json={"reason": "v2"}, headers=ADMIN))
    report = verify(signer)
    assert report["valid"] is True, report["problems"]
    assert report["events"] == 14 and report["chain"]["keyed_from_seq"] == 1
    contract_id: str = first["id"]
    return contract_id


def events(db: Database) -> list[dict[str, Any]]:
    with db.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT seq, type, contract_id FROM audit_events ORDER BY seq")
        ).mappings()
        return [dict(row) for row in rows]


def truncate(db: Database, newest: int) -> list[str]:
    """Delete the ``newest`` events and the rows they recorded; return their types."""
    cut = events(db)[-newest:]
    for event in reversed(cut):
        if event["type"] in RECORDED_ROWS:
            sql(db, RECORDED_ROWS[event["type"]], contract=event["contract_id"])
    sql(db, "DELETE FROM audit_events WHERE seq >= :s", s=cut[0]["seq"])
    return [event["type"] for event in cut]


@pytest.mark.parametrize("head_row", ["kept", "deleted"])
@pytest.mark.parametrize("newest", [1, 2, 10])
def test_a_truncated_keyed_log_stays_invalid_through_migrate(
    keyed: Flask,
    db: Database,
    newest: int,
    head_row: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    retired = keyed_history(keyed)
    cut = truncate(db, newest)
    assert cut[-1] == "contract_retired" and len(cut) == newest
    if head_row == "deleted":
        sql(db, "DELETE FROM audit_head")
    signer = keyed.test_client()
    assert verify(signer)["valid"] is False

    assert main(["migrate"]) == 0
    err = capsys.readouterr().err
    report = verify(signer)
    assert report["valid"] is False, "migrate does not seal a truncated keyed log"
    assert report["chain"]["valid"] is True, "only the keyed head tells"
    assert [p["check"] for p in report["problems"]] == ["keyed_head"]
    with db.session() as session:
        head = read_head(session)
    if head_row == "deleted":
        assert head is None
        assert "the log has keyed events but no keyed head" in err
        assert "calmon audit reseal --i-know" in err
        assert "has no keyed head" in report["problems"][0]["problem"]
    else:
        assert head is not None and head.events == 14
        assert "the newest events were deleted" in report["problems"][0]["problem"]
    assert main(["audit", "verify"]) == 1
    assert ok(signer.get(f"/v1/contracts/{retired}", headers=ADMIN))["retired"] is False

    fitted(signer, "after")
    assert verify(signer)["valid"] is False, "an append does not cover it up either"
    assert main(["migrate"]) == 0
    assert verify(signer)["valid"] is False


def newest_event(db: Database) -> dict[str, Any]:
    with db.session() as session:
        event = list_events(session, limit=1, newest_first=True)[0]
    return {"seq": event.seq, "type": event.type, "actor": event.actor, "details": event.details}


def test_reseal_needs_the_key_and_a_confirmation(
    keyed: Flask, db: Database, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed_history(keyed)
    truncate(db, 1)
    sql(db, "DELETE FROM audit_head")
    assert main(["audit", "reseal"]) == 2
    assert "then run it again with --i-know" in capsys.readouterr().err
    monkeypatch.delenv("CALMON_AUDIT_KEY")
    assert main(["audit", "reseal", "--i-know"]) == 2
    assert "needs the audit key" in capsys.readouterr().err
    with db.session() as session:
        assert read_head(session) is None
    assert len(events(db)) == 13, "nothing written"


@pytest.mark.parametrize("head_row", ["kept", "deleted"])
def test_reseal_writes_the_head_after_an_event_that_records_it(
    keyed: Flask, db: Database, head_row: str, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed_history(keyed)
    truncate(db, 2)
    if head_row == "deleted":
        sql(db, "DELETE FROM audit_head")
    signer = keyed.test_client()
    before = verify(signer)
    assert before["valid"] is False

    assert main(["audit", "reseal", "--i-know", "--reason", "restored from ticket 12"]) == 0
    out, err = capsys.readouterr()
    report = verify(signer)
    assert report["valid"] is True, report["problems"]
    assert out.split() == [str(report["head"]["seq"]), report["head"]["sha256"]]
    assert "resealed the audit log" in err and before["problems"][0]["problem"] in err
    event = newest_event(db)
    assert (event["seq"], event["type"], event["actor"]) == (
        report["head"]["seq"],
        "audit_resealed",
        "cli",
    )
    details = event["details"]
    assert details["reason"] == "restored from ticket 12"
    assert details["problem"] == before["problems"][0]["problem"]
    assert details["log_end"] == {
        "events": 12,
        "seq": 12,
        "sha256": before["head"]["sha256"],
    }
    if head_row == "deleted":
        assert details["previous_head"] is None
    else:
        assert details["previous_head"]["events"] == 14 and details["previous_head"]["seq"] == 14
    assert report["keyed_head"]["events"] == 13 and report["keyed_head"]["seq"] == event["seq"]

    fitted(signer, "after")
    assert verify(signer)["valid"] is True, "appends advance the new head"
    assert main(["audit", "reseal", "--i-know"]) == 0
    assert "already vouches for the log: nothing written" in capsys.readouterr().err
    assert newest_event(db)["type"] == "contract_fitted"


def test_reseal_refuses_a_chain_that_does_not_verify(
    keyed: Flask, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed_history(keyed)
    sql(db, "DELETE FROM audit_head")
    sql(db, "UPDATE audit_events SET actor = 'someone-else' WHERE seq = 3")
    assert main(["audit", "reseal", "--i-know"]) == 1
    assert "the audit chain does not verify (seq 3" in capsys.readouterr().err
    with db.session() as session:
        assert read_head(session) is None
    assert len(events(db)) == 14


def test_reseal_under_a_new_key_starts_its_segment(
    keyed: Flask,
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keyed_history(keyed)
    sql(db, "DELETE FROM audit_head")
    rotated = f"{OLD_KEY},{KEY}"
    monkeypatch.setenv("CALMON_AUDIT_KEY", rotated)
    assert main(["audit", "reseal", "--i-know"]) == 0
    assert [e["type"] for e in events(db)[-2:]] == ["audit_key_enabled", "audit_resealed"]
    application = keyed_app(database_url, rotated)
    try:
        report = verify(application.test_client())
    finally:
        application.extensions["calmon.database"].dispose()
    assert report["valid"] is True, report["problems"]
    assert report["keyed_head"]["events"] == 16
