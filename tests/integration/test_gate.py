"""The review gate and the audit trail: decisions with evidence, a verifiable hash chain."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from service.calibration import fit_temperature
from service.db.database import Database
from service.gate.ece_rule import fmt
from tests.integration.conftest import ADMIN_TOKEN, Auth
from tests.integration.factories import (
    REFERENCE_FIT_LABELS,
    REFERENCE_FIT_LOGITS,
    contract_fields,
    fit_body,
    registration_body,
)
from tests.integration.test_served import CALMON, Served, served  # noqa: F401 - fixture


def fitted(client: FlaskClient, auth: Auth, body: dict[str, Any] | None = None) -> dict:
    response = client.post("/v1/contracts/fit", json=body or fit_body(), headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def gate(client: FlaskClient, auth: Auth, **body: Any) -> dict:
    response = client.post("/v1/gate", json=body, headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def checks_of(decision: dict) -> dict[str, dict]:
    return {c["name"]: c for c in decision["checks"]}


def calibrated_sets(n: int, seed: int, sharpen: float = 1.0) -> tuple[dict, dict, np.ndarray]:
    """Fit and eval sets whose labels are drawn from softmax(z): calibrated at T = sharpen."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(2 * n, 3)) * 1.5
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = np.array([rng.choice(3, p=row) for row in p])
    logits = np.round(z * sharpen, 6)
    return (
        {"logits": logits[:n].tolist(), "labels": y[:n].tolist()},
        {"logits": logits[n:].tolist(), "labels": y[n:].tolist()},
        logits,
    )


def test_a_small_eval_set_fails_the_gate_with_the_table_as_evidence(
    client: FlaskClient, auth: Auth
) -> None:
    contract = fitted(client, auth)
    decision = gate(client, auth, contract_id=contract["id"])
    assert decision["decision"] == "fail"
    checks = checks_of(decision)
    assert set(checks) == {
        "required_fields",
        "disjoint_eval",
        "eval_samples",
        "calibrator_bound",
        "eval_ece",
        "nll_improvement",
        "bin_samples",
    }
    assert checks["eval_samples"] == {
        **checks["eval_samples"],
        "passed": False,
        "observed": 8,
        "threshold": 500,
    }
    assert checks["required_fields"]["passed"] and checks["disjoint_eval"]["passed"]
    evidence = decision["evidence"]
    baseline = contract["baseline"]["eval"]["calibrated"]
    assert evidence["reliability"] == baseline["bins"]
    assert sum(b["n"] for b in evidence["reliability"]) == 8
    assert evidence["ece"] == baseline["ece"] and evidence["ece_ci"] == baseline["ece_ci"]
    assert evidence["contract"]["content_sha256"] == contract["content_sha256"]
    assert len(decision["evidence_sha256"]) == 64


def test_a_calibrated_model_passes_and_decisions_are_stored(
    client: FlaskClient, auth: Auth
) -> None:
    fit_set, eval_set, _ = calibrated_sets(3000, seed=1, sharpen=2.0)
    contract = fitted(
        client,
        auth,
        fit_body("big", fit=fit_set, eval=eval_set, bin_edges=[0, 0.2, 0.4, 0.6, 0.8, 1]),
    )
    assert contract["calibrator"]["temperature"] == pytest.approx(2.0, rel=0.1)
    policy = {
        "max_ece": 0.05,
        "max_ece_ci_upper": 0.08,
        "min_eval_samples": 1000,
        "min_bin_samples": 10,
    }
    decision = gate(client, auth, contract_id=contract["id"], policy=policy)
    assert decision["decision"] == "pass", decision["checks"]
    assert checks_of(decision)["eval_ece_ci_upper"]["threshold"] == 0.08
    evidence = decision["evidence"]
    assert evidence["ece_ci"][0] <= evidence["ece_debiased"] <= evidence["ece"]
    assert evidence["nll_difference"]["tolerance"] > 0
    lenient = gate(
        client,
        auth,
        contract_id=contract["id"],
        policy={**policy, "max_ece": 0.0001, "ece_rule": "shown_above"},
    )
    assert lenient["decision"] == "pass", "a calibrated set shows no miscalibration to fail on"
    assert "does not show the ECE above" in checks_of(lenient)["eval_ece"]["message"]
    strict = gate(
        client, auth, contract_id=contract["id"], policy={**policy, "max_ece_ci_upper": 0.001}
    )
    assert strict["decision"] == "fail"
    assert not checks_of(strict)["eval_ece_ci_upper"]["passed"]
    listed = client.get(
        f"/v1/gate/decisions?contract_id={contract['id']}", headers=auth.headers("reader")
    ).get_json()["decisions"]
    assert [d["id"] for d in listed] == [strict["id"], lenient["id"], decision["id"]]
    assert listed[1]["policy"]["ece_rule"] == "shown_above"
    assert listed[2]["evidence"] == decision["evidence"]
    by_model = client.get("/v1/gate/decisions?model=big", headers=auth.headers()).get_json()
    assert len(by_model["decisions"]) == 3
    events = client.get("/v1/audit/events?type=gate_decided", headers=auth.headers()).get_json()
    assert [e["details"]["decision"] for e in events["events"]] == ["pass", "pass", "fail"]
    assert events["events"][2]["details"]["failed_checks"] == ["eval_ece_ci_upper"]


def test_the_gate_fails_a_miscalibrated_set_and_a_harmful_calibrator(
    client: FlaskClient, auth: Auth
) -> None:
    fit_set, eval_set, _ = calibrated_sets(2000, seed=4, sharpen=2.0)
    contract = fitted(client, auth, fit_body("drifting", fit=fit_set, eval=eval_set))
    policy = {"max_ece": 0.05, "min_eval_samples": 500}
    _, sharper, _ = calibrated_sets(3000, seed=5, sharpen=4.0)
    over = gate(client, auth, contract_id=contract["id"], evaluation=sharper, policy=policy)
    ece = checks_of(over)["eval_ece"]
    assert not ece["passed"] and ece["observed"]["lower_bound"] > 0.05
    debiased, (lower, upper) = ece["observed"]["ece_debiased"], ece["observed"]["ece_ci"]
    assert ece["message"] == (
        f"debiased ECE {fmt(debiased)} is above max_ece 0.05, and the one-sided 95% lower "
        f"bound {fmt(ece['observed']['lower_bound'])} is above half of it; 95% interval "
        f"[{fmt(lower)}, {fmt(upper)}]"
    )
    assert over["policy"]["ece_rule"] == "estimate"
    assert checks_of(over)["nll_improvement"]["passed"]
    _, softer, _ = calibrated_sets(3000, seed=6, sharpen=0.7)
    harmed = checks_of(
        gate(client, auth, contract_id=contract["id"], evaluation=softer, policy=policy)
    )["nll_improvement"]
    assert not harmed["passed"]
    assert harmed["observed"]["lower_bound"] > harmed["threshold"] > 0


def test_max_ece_is_the_number_checked_whatever_the_interval_holds(
    client: FlaskClient, auth: Auth
) -> None:
    """A debiased ECE above max_ece fails by default even when the interval holds max_ece;
    each rule is chosen by name and states itself in the message."""
    fit_set, eval_set, _ = calibrated_sets(2000, seed=4, sharpen=2.0)
    contract = fitted(client, auth, fit_body("threshold", fit=fit_set, eval=eval_set))
    _, sharper, _ = calibrated_sets(3000, seed=5, sharpen=4.0)

    def eval_ece(**policy: Any) -> dict[str, Any]:
        decision = gate(client, auth, contract_id=contract["id"], evaluation=sharper, policy=policy)
        assert decision["policy"]["ece_rule"] == policy.get("ece_rule", "estimate")
        return checks_of(decision)["eval_ece"]

    observed = eval_ece(max_ece=0.05)["observed"]
    lower, upper = observed["ece_ci"]
    limit = round((observed["ece_debiased"] + lower) / 2, 4)
    assert lower < limit < observed["ece_debiased"] < upper
    by_default = eval_ece(max_ece=limit)
    assert not by_default["passed"]
    assert by_default["message"].startswith(
        f"debiased ECE {fmt(observed['ece_debiased'])} is above max_ece {fmt(limit)}"
    )
    assert by_default["observed"]["rule"] == "estimate"
    shown_above = eval_ece(max_ece=limit, ece_rule="shown_above")
    assert shown_above["passed"], shown_above["message"]
    assert shown_above["message"].startswith("the one-sided 95% lower bound")
    shown_below = eval_ece(max_ece=round(upper + 0.001, 4), ece_rule="shown_below")
    assert shown_below["passed"], shown_below["message"]
    assert "shows the ECE at or below it" in shown_below["message"]


def test_an_unknown_ece_rule_is_a_422_naming_it(client: FlaskClient, auth: Auth) -> None:
    contract = fitted(client, auth)
    response = client.post(
        "/v1/gate",
        json={"contract_id": contract["id"], "policy": {"ece_rule": "roughly"}},
        headers=auth.headers(),
    )
    assert response.status_code == 422
    details = response.get_json()["error"]["details"]
    assert details == [
        {"field": "policy.ece_rule", "message": "must be one of estimate, shown_above, shown_below"}
    ]


def test_a_fresh_evaluation_set_is_measured_and_the_fit_set_is_refused(
    client: FlaskClient, auth: Auth
) -> None:
    fit_set, eval_set, _ = calibrated_sets(1500, seed=2)
    contract = fitted(client, auth, fit_body("fresh", fit=fit_set, eval=eval_set))
    _, newer, _ = calibrated_sets(800, seed=3)
    decision = gate(
        client,
        auth,
        contract_id=contract["id"],
        evaluation=newer,
        policy={"max_ece": 0.1, "min_eval_samples": 500},
    )
    assert decision["evidence"]["source"]["kind"] == "evaluation"
    assert decision["evidence"]["n"] == 800
    assert decision["decision"] == "pass", decision["checks"]
    leaked = gate(
        client,
        auth,
        contract_id=contract["id"],
        evaluation=fit_set,
        policy={"max_ece": 0.1, "min_eval_samples": 500},
    )
    assert leaked["decision"] == "fail"
    assert not checks_of(leaked)["disjoint_eval"]["passed"]


def test_missing_fingerprints_fail_required_fields(client: FlaskClient, auth: Auth) -> None:
    source = fitted(client, auth)
    body = registration_body(source, model="bare")
    body["split"] = {"method": "unknown"}
    contract = client.post("/v1/contracts", json=body, headers=auth.headers()).get_json()
    decision = gate(client, auth, contract_id=contract["id"], policy={"min_eval_samples": 1})
    checks = checks_of(decision)
    assert not checks["required_fields"]["passed"]
    assert "split.fit_fingerprint" in checks["required_fields"]["observed"]
    assert not checks["disjoint_eval"]["passed"]


def test_bad_gate_requests(client: FlaskClient, auth: Auth) -> None:
    contract = fitted(client, auth)
    cases = [
        ({"contract_id": contract["id"], "policy": {"max_ece": 2}}, 422, "policy.max_ece"),
        ({"contract_id": contract["id"], "policy": {"surprise": 1}}, 422, "policy.surprise"),
        (
            {"contract_id": contract["id"], "policy": {"require_disjoint_eval": "yes"}},
            422,
            "policy.require_disjoint_eval",
        ),
        (
            {"contract_id": contract["id"], "evaluation": {"logits": [[1, 2]], "labels": [0]}},
            422,
            "evaluation.logits[0]",
        ),
        ({"policy": {}}, 422, "contract_id"),
        ({"contract_id": "nope"}, 404, None),
    ]
    for body, status, field in cases:
        response = client.post("/v1/gate", json=body, headers=auth.headers())
        assert response.status_code == status, (body, response.get_json())
        if field:
            assert field in {d["field"] for d in response.get_json()["error"]["details"]}
    assert (
        client.post(
            "/v1/gate", json={"contract_id": contract["id"]}, headers=auth.headers("reader")
        ).status_code
        == 403
    )


def test_the_audit_chain_verifies_and_detects_tampering(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = fitted(client, auth)
    client.post(
        f"/v1/contracts/{contract['id']}/retire",
        json={"reason": "replaced"},
        headers=auth.headers(),
    )
    gate(client, auth, contract_id=contract["id"])
    auth.token("reader")
    verified = client.get("/v1/audit/verify", headers=auth.headers()).get_json()
    assert verified["valid"] is True and verified["events"] == 4
    events = client.get("/v1/audit/events", headers=auth.headers()).get_json()["events"]
    assert [e["prev_sha256"] for e in events[1:]] == [e["sha256"] for e in events[:-1]]
    with db.engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_events SET actor = 'someone' WHERE seq = :s"),
            {"s": events[1]["seq"]},
        )
    broken = client.get("/v1/audit/verify", headers=auth.headers()).get_json()
    assert broken == {**broken, "valid": False, "first_invalid_seq": events[1]["seq"]}
    with db.engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_events SET actor = :a WHERE seq = :s"),
            {"a": events[1]["actor"], "s": events[1]["seq"]},
        )
        connection.execute(text("DELETE FROM audit_events WHERE seq = :s"), {"s": events[2]["seq"]})
    removed = client.get("/v1/audit/verify", headers=auth.headers()).get_json()
    assert removed["valid"] is False and removed["first_invalid_seq"] == events[3]["seq"]


def test_audit_answers_who_retired_what_and_why_as_csv(client: FlaskClient, auth: Auth) -> None:
    contract = fitted(client, auth)
    auth.token("reader")
    client.post(
        f"/v1/contracts/{contract['id']}/retire",
        json={"reason": "population shift"},
        headers=auth.headers(),
    )
    response = client.get("/v1/audit/events?model=glyphs&format=csv", headers=auth.headers())
    assert response.content_type.startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert [r["type"] for r in rows] == ["contract_fitted", "contract_retired"]
    assert rows[1]["actor"] == "bootstrap-admin"
    assert json.loads(rows[1]["details"])["reason"] == "population shift"
    tokens = client.get("/v1/audit/events?type=token_created", headers=auth.headers()).get_json()
    assert tokens["events"][0]["details"] == {"name": "test-reader", "role": "reader"}
    assert auth.token("reader") not in json.dumps(tokens)
    bad = client.get("/v1/audit/events?format=xml", headers=auth.headers())
    assert bad.status_code == 422


def run_cli(*args: str, env_token: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CALMON), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "", **({"CALMON_TOKEN": env_token} if env_token else {})},
    )


@pytest.mark.slow
def test_cli_gate_exit_codes(served: Served, tmp_path: Path) -> None:  # noqa: F811
    status, contract = served.call("POST", "/v1/contracts/fit", fit_body("cli"))
    assert status == 201
    failing = run_cli(
        "gate", "--url", served.url, "--token", ADMIN_TOKEN, "--contract", contract["id"]
    )
    assert failing.returncode == 1, failing.stderr
    assert "gate FAIL" in failing.stdout and "[FAIL] eval_samples" in failing.stdout
    assert "confidence  accuracy" in failing.stdout
    assert "baseline, measured by calmon when it fitted the contract" in failing.stdout
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"min_eval_samples": 1, "max_ece": 0.9, "require_nll_improvement": False})
    )
    passing = run_cli(
        "gate",
        "--url",
        served.url,
        "--contract",
        contract["id"],
        "--policy",
        str(policy),
        env_token=ADMIN_TOKEN,
    )
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "gate PASS" in passing.stdout
    unknown = run_cli("gate", "--url", served.url, "--token", ADMIN_TOKEN, "--contract", "nope")
    assert unknown.returncode == 2 and "not_found" in unknown.stderr
    down = run_cli(
        "gate", "--url", "http://127.0.0.1:9", "--token", ADMIN_TOKEN, "--contract", contract["id"]
    )
    assert down.returncode == 2 and "cannot reach" in down.stderr
    usage = run_cli("gate", "--url", served.url)
    assert usage.returncode == 2


@pytest.mark.slow
def test_cli_fit_registers_a_contract_from_csv_and_npz(
    served: Served,  # noqa: F811
    tmp_path: Path,
) -> None:
    fit_set, eval_set, _ = calibrated_sets(400, seed=5, sharpen=1.5)
    with (tmp_path / "fit.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["logit_0", "logit_1", "logit_2", "label"])
        for z, y in zip(fit_set["logits"], fit_set["labels"], strict=True):
            writer.writerow([*z, ["a", "b", "c"][y]])
    np.savez(
        tmp_path / "eval.npz",
        logits=np.array(eval_set["logits"]),
        labels=np.array(eval_set["labels"]),
    )
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(contract_fields("from-files")))

    def fit_cli(eval_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "fit",
            "--url",
            served.url,
            "--token",
            ADMIN_TOKEN,
            "--spec",
            str(spec),
            "--fit",
            str(tmp_path / "fit.csv"),
            "--eval",
            str(eval_path),
            *extra,
        )

    result = fit_cli(tmp_path / "eval.npz")
    assert result.returncode == 0, result.stderr
    registered = json.loads(result.stdout)
    assert registered["baseline_source"] == "measured"
    expected = fit_temperature(np.array(fit_set["logits"]), np.array(fit_set["labels"]))
    assert registered["calibrator"]["temperature"] == pytest.approx(expected.temperature, rel=1e-9)
    status, stored = served.call("GET", f"/v1/contracts/{registered['id']}")
    assert status == 200 and stored["baseline"]["eval"]["calibrated"]["n"] == 400
    status, decision = served.call("POST", "/v1/gate", {"contract_id": registered["id"]})
    assert status == 201 and decision["evidence"]["baseline_source"] == "measured"
    same = fit_cli(tmp_path / "fit.csv")
    assert same.returncode == 2
    assert "same fingerprint" in same.stderr
    local = fit_cli(tmp_path / "eval.npz", "--local")
    assert local.returncode == 0, local.stderr
    here = json.loads(local.stdout)
    assert here["baseline_source"] == "supplied" and here["version"] == 2
    assert here["calibrator"] == registered["calibrator"]
    status, decision = served.call("POST", "/v1/gate", {"contract_id": here["id"]})
    assert status == 201 and decision["evidence"]["baseline_source"] == "supplied"


def test_reference_sets_are_fingerprinted_identically() -> None:
    from service.contracts.labeled_sets import LabeledSet

    a = LabeledSet(np.array(REFERENCE_FIT_LOGITS, float), np.array(REFERENCE_FIT_LABELS))
    b = LabeledSet(np.array(REFERENCE_FIT_LOGITS, float), np.array(REFERENCE_FIT_LABELS))
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != LabeledSet(a.inputs[::-1].copy(), a.labels[::-1].copy()).fingerprint()


def test_the_evidence_says_who_measured_the_baseline(client: FlaskClient, auth: Auth) -> None:
    measured = fitted(client, auth)
    supplied = client.post(
        "/v1/contracts", json=registration_body(measured, model="supplied"), headers=auth.headers()
    ).get_json()
    lenient = {"min_eval_samples": 1, "max_ece": 0.9, "require_nll_improvement": False}
    by_calmon = gate(client, auth, contract_id=measured["id"], policy=lenient)
    by_registrant = gate(client, auth, contract_id=supplied["id"], policy=lenient)
    assert by_calmon["evidence"]["baseline_source"] == "measured"
    assert by_registrant["evidence"]["baseline_source"] == "supplied"
    assert by_calmon["decision"] == by_registrant["decision"] == "pass"
    assert "measured_baseline" not in checks_of(by_registrant), "off by default"
    assert by_calmon["policy"]["require_measured_baseline"] is False
    events = client.get("/v1/audit/events?type=contract_registered", headers=auth.headers())
    assert events.get_json()["events"][0]["details"]["baseline_source"] == "supplied"

    strict = {**lenient, "require_measured_baseline": True}
    refused = gate(client, auth, contract_id=supplied["id"], policy=strict)
    assert refused["decision"] == "fail"
    check = checks_of(refused)["measured_baseline"]
    assert check["observed"] == "supplied" and not check["passed"]
    assert "send a fresh evaluation set" in check["message"]
    assert gate(client, auth, contract_id=measured["id"], policy=strict)["decision"] == "pass"
    _, fresh, _ = calibrated_sets(600, seed=8)
    evaluated = gate(client, auth, contract_id=supplied["id"], policy=strict, evaluation=fresh)
    assert checks_of(evaluated)["measured_baseline"] == {
        **checks_of(evaluated)["measured_baseline"],
        "passed": True,
        "observed": "evaluation",
    }
    assert evaluated["evidence"]["source"]["kind"] == "evaluation"
    assert evaluated["evidence"]["baseline_source"] == "supplied"

    from service.client.reports import gate_report

    assert "supplied by the registrant" in gate_report(by_registrant)
    assert "measured by calmon when it fitted" in gate_report(by_calmon)
    assert "a fresh evaluation set" in gate_report(evaluated)
    ece = checks_of(evaluated)["eval_ece"]
    assert f"  [{'PASS' if ece['passed'] else 'FAIL'}] eval_ece           {ece['message']}" in (
        gate_report(evaluated).splitlines()
    )
    assert ece["message"].startswith("debiased ECE ")


HOSTILE = "1" + "0" * 400


@pytest.mark.parametrize(
    "raw, field",
    [
        ('"policy": {"max_ece": 1e400}', "policy.max_ece"),
        ('"policy": {"max_ece": -1e400}', "policy.max_ece"),
        (f'"policy": {{"max_ece": {HOSTILE}}}', "policy.max_ece"),
        (f'"policy": {{"max_ece_ci_upper": -{HOSTILE}}}', "policy.max_ece_ci_upper"),
        (f'"policy": {{"min_eval_samples": {HOSTILE}}}', "policy.min_eval_samples"),
        ('"policy": {"min_bin_samples": 1e3}', "policy.min_bin_samples"),
        ('"policy": {"min_eval_samples": 1000000001}', "policy.min_eval_samples"),
        ('"policy": {"max_ece": {"x": 1}}', "policy.max_ece"),
        ('"policy": {"max_ece": [0.1]}', "policy.max_ece"),
        ('"policy": {"max_ece": "0.1"}', "policy.max_ece"),
        ('"policy": {"max_ece": true}', "policy.max_ece"),
        ('"policy": {"require_measured_baseline": "yes"}', "policy.require_measured_baseline"),
        ('"policy": []', "policy"),
        ('"policy": 0', "policy"),
        ('"policy": false', "policy"),
        ('"policy": ""', "policy"),
        (f'"evaluation": {{"logits": [[{HOSTILE}, 0, 0]], "labels": [0]}}', "evaluation.logits"),
        ('"evaluation": {"logits": [[1e400, 0, 0]], "labels": [0]}', "evaluation.logits"),
        ('"evaluation": {"logits": [[1e308, -1e308, 0]], "labels": [0]}', "evaluation.logits"),
        ('"evaluation": {"logits": [[{}, 0, 0]], "labels": [0]}', "evaluation.logits"),
        (f'"evaluation": {{"logits": [[1, 0, 0]], "labels": [{HOSTILE}]}}', "evaluation.labels"),
        ('"evaluation": {"logits": [[1, 0, 0]], "labels": [0.5]}', "evaluation.labels"),
        ('"evaluation": {"logits": [[1, 0, 0]]}', "evaluation.labels"),
        ('"evaluation": {"scores": [0.5], "labels": [0]}', "evaluation"),
        ('"evaluation": 5', "evaluation"),
        ('"evaluation": [[1, 0, 0]]', "evaluation"),
    ],
)
def test_hostile_gate_requests_get_422_naming_the_field(
    client: FlaskClient, auth: Auth, raw: str, field: str
) -> None:
    contract = fitted(client, auth)
    response = client.post(
        "/v1/gate",
        data=f'{{"contract_id": "{contract["id"]}", {raw}}}',
        headers={**auth.headers(), "Content-Type": "application/json"},
    )
    assert response.status_code == 422, (raw, response.get_json())
    fields = [d["field"] for d in response.get_json()["error"]["details"]]
    assert any(
        f == field or f.startswith(f"{field}[") or f.startswith(f"{field}.") for f in fields
    ), (
        raw,
        fields,
    )


@pytest.mark.parametrize(
    "body", ['{"contract_id": NaN}', '{"contract_id": "x", "policy": {"max_ece": NaN}}']
)
def test_non_json_numbers_are_refused_before_the_gate(
    client: FlaskClient, auth: Auth, body: str
) -> None:
    response = client.post(
        "/v1/gate", data=body, headers={**auth.headers(), "Content-Type": "application/json"}
    )
    assert 400 <= response.status_code < 500


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.just(10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)
policy_values = st.dictionaries(
    st.sampled_from(
        [
            "max_ece",
            "max_ece_ci_upper",
            "min_eval_samples",
            "min_bin_samples",
            "require_nll_improvement",
            "require_disjoint_eval",
            "require_measured_baseline",
            "max_live_status",
            "other",
        ]
    ),
    json_values,
    max_size=4,
)
evaluations = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "logits": st.lists(
                st.one_of(st.lists(json_values, min_size=3, max_size=3), json_values), max_size=4
            ),
            "labels": st.lists(json_values, max_size=4),
        }
    ),
)


@pytest.mark.slow
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(policy=st.one_of(json_values, policy_values), evaluation=evaluations)
def test_fuzzed_policies_and_evaluations_never_fail_the_server(
    client: FlaskClient, auth: Auth, policy: Any, evaluation: Any
) -> None:
    listed = client.get("/v1/contracts?model=glyphs", headers=auth.headers()).get_json()
    contract_id = (
        listed["contracts"][0]["id"] if listed["contracts"] else fitted(client, auth)["id"]
    )
    response = client.post(
        "/v1/gate",
        json={"contract_id": contract_id, "policy": policy, "evaluation": evaluation},
        headers=auth.headers(),
    )
    assert response.status_code in (201, 422), response.get_data(as_text=True)
    if response.status_code == 422:
        details = response.get_json()["error"]["details"]
        assert details and all(d["field"] for d in details)
