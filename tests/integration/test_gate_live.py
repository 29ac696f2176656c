"""``policy.max_live_status``: the gate also judges the model's exported slices now (both
backends, through the Flask client and the real refresher)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.db.database import Database
from service.export.reading_store import replace_model_readings
from service.export.refresher import refresh_all
from service.gate.record import decision_record
from tests.integration.conftest import Auth
from tests.integration.test_gate import checks_of, gate
from tests.integration.test_stream import _multiclass_contract, _send_labels, _send_predictions
from tests.integration.test_ui_pages import overconfident, page


def _drifting_model(app: Flask, client: FlaskClient, auth: Auth, db: Database) -> dict:
    """A model whose region=apac cohort is in ``alert`` in the exported readings, and whose
    region=emea cohort has too few labels for a status."""
    contract = _multiclass_contract(client, auth, model="router", min_labeled=50)
    rows = overconfident("router", 300, seed=3, cohort={"region": "apac"})
    _send_predictions(client, auth, "router", rows)
    calm = overconfident("router-emea", 10, seed=4, cohort={"region": "emea"})
    _send_predictions(client, auth, "router", calm)
    _send_labels(client, auth, "router", rows[:250])
    refresh_all(db, app.config["CALMON_SETTINGS"])
    return contract


def test_a_slice_in_alert_fails_the_gate_only_when_the_policy_looks(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = _drifting_model(app, client, auth, db)
    blind = gate(client, auth, contract_id=contract["id"])
    assert "live_status" not in checks_of(blind)
    assert blind["policy"]["max_live_status"] is None and blind["evidence"].get("live") is None

    for limit in ("alert", "warn"):
        decision = gate(client, auth, contract_id=contract["id"], policy={"max_live_status": limit})
        check = checks_of(decision)["live_status"]
        assert decision["decision"] == "fail" and not check["passed"]
        assert check["threshold"] == limit
        apac = [s for s in check["observed"] if s["cohort"] == "region=apac"]
        assert apac and all(s["status"] == "alert" and s["reasons"] for s in apac)
        assert {s["status"] for s in check["observed"]} <= {"warn", "alert"}
        assert "region=apac in 24h (alert)" in check["message"]
        assert check["observed"][0]["reasons"][0] in check["message"]
        slices = decision["evidence"]["live"]["slices"]
        assert {(s["cohort"], s["window"]) for s in check["observed"]} <= {
            (s["cohort"], s["window"]) for s in slices
        }
        emea = [s for s in slices if s["cohort"] == "region=emea"]
        assert emea and {s["status"] for s in emea} == {"insufficient_data"}
        events = client.get("/v1/audit/events?type=gate_decided", headers=auth.headers()).json
        assert "live_status" in events["events"][-1]["details"]["failed_checks"]


def test_a_calm_model_passes_the_live_check(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = _multiclass_contract(client, auth, model="calm", min_labeled=50)
    none_yet = gate(client, auth, contract_id=contract["id"], policy={"max_live_status": "warn"})
    check = checks_of(none_yet)["live_status"]
    assert check["passed"] and check["observed"] == [] and "no exported reading" in check["message"]
    assert none_yet["evidence"]["live"] == {"slices": []}

    rows = overconfident("calm", 20, seed=1, cohort={"region": "emea"})
    _send_predictions(client, auth, "calm", rows)
    refresh_all(db, app.config["CALMON_SETTINGS"])
    decision = gate(client, auth, contract_id=contract["id"], policy={"max_live_status": "warn"})
    check = checks_of(decision)["live_status"]
    slices = decision["evidence"]["live"]["slices"]
    assert check["passed"] and check["observed"] == [] and slices
    assert {s["status"] for s in slices} == {"insufficient_data"}
    assert f"none of the {len(slices)} exported slices" in check["message"]


def test_a_decision_keeps_the_live_statuses_of_its_time(
    app: Flask, client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = _drifting_model(app, client, auth, db)
    policy = {"max_live_status": "alert"}
    failed = gate(client, auth, contract_id=contract["id"], policy=policy)
    assert not checks_of(failed)["live_status"]["passed"]

    with db.session() as session:
        replace_model_readings(session, "router", [])
        session.commit()
    passed = gate(client, auth, contract_id=contract["id"], policy=policy)
    assert checks_of(passed)["live_status"]["passed"]
    assert passed["evidence"]["live"] == {"slices": []}

    listed = client.get(
        f"/v1/gate/decisions?contract_id={contract['id']}", headers=auth.headers("reader")
    ).json["decisions"]
    stored = next(d for d in listed if d["id"] == failed["id"])
    assert stored == failed
    with db.session() as session:
        record = decision_record(session, failed["id"])
    assert record.policy_digest_matches and record.evidence_digest_matches
    assert record.event is not None
    assert record.event.details["evidence_sha256"] == failed["evidence_sha256"]
    fleet = page(client, auth, "/ui")
    note = fleet.find("p", id="gate-note")[0].all_text()
    assert "judged held-out evidence, at its time" in note and "max_live_status" in note
    shown = page(client, auth, f"/ui/gate/{failed['id']}")
    row = shown.find("tr", **{"data-check": "live_status"})[0]
    assert "region=apac" in row.all_text()


@pytest.mark.parametrize(
    "value", ["ok", "insufficient_data", "ALERT", "", 2, 1.5, True, [], ["alert"], {"a": 1}]
)
def test_a_bad_max_live_status_is_a_422_naming_it(
    client: FlaskClient, auth: Auth, value: Any
) -> None:
    contract = _multiclass_contract(client, auth, model="router")
    response = client.post(
        "/v1/gate",
        json={"contract_id": contract["id"], "policy": {"max_live_status": value}},
        headers=auth.headers(),
    )
    assert response.status_code == 422, response.get_json()
    details = response.get_json()["error"]["details"]
    assert [d["field"] for d in details] == ["policy.max_live_status"]


def test_the_openapi_document_states_max_live_status(client: FlaskClient) -> None:
    schemas = client.get("/v1/openapi.json").json["components"]["schemas"]
    policy = next(
        s for s in schemas["GateRequest"]["properties"]["policy"]["anyOf"] if s.get("properties")
    )
    stated = policy["properties"]["max_live_status"]["anyOf"]
    assert {"enum": ["warn", "alert"], "type": "string"} in stated and {"type": "null"} in stated
