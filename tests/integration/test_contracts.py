"""The contract registry: fit, register, version, verify, retire, list, active-at."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from service.calibration import fit_temperature, multiclass_reading
from service.db.database import Database
from tests.integration.conftest import Auth
from tests.integration.factories import (
    QUARTER_EDGES,
    REFERENCE_EVAL_LABELS,
    REFERENCE_EVAL_LOGITS,
    REFERENCE_FIT_LABELS,
    REFERENCE_FIT_LOGITS,
    contract_fields,
    fit_body,
    registration_body,
)


def fit(client: FlaskClient, auth: Auth, **overrides: Any) -> dict[str, Any]:
    response = client.post("/v1/contracts/fit", json=fit_body(**overrides), headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def errors_of(response) -> dict[str, str]:
    """``{field: message}`` of a 422 reply."""
    assert response.status_code == 422, response.get_json()
    return {d["field"]: d["message"] for d in response.get_json()["error"]["details"]}


def test_fit_reproduces_the_reference_values(client: FlaskClient, auth: Auth) -> None:
    contract = fit(client, auth)
    assert contract["version"] == 1
    assert contract["calibrator"]["method"] == "temperature"
    assert contract["calibrator"]["temperature"] == pytest.approx(1.229751, abs=1e-6)
    fit_set = contract["baseline"]["fit"]
    assert fit_set["uncalibrated"]["nll"] == pytest.approx(0.822782, abs=1e-6)
    assert fit_set["calibrated"]["nll"] == pytest.approx(0.812428, abs=1e-6)
    assert fit_set["uncalibrated"]["ece"] == pytest.approx(0.128759, abs=1e-6)
    assert fit_set["calibrated"]["ece"] == pytest.approx(0.380407, abs=1e-6)
    assert fit_set["calibrated"]["accuracy"] == pytest.approx(4 / 6)
    assert [b["n"] for b in fit_set["calibrated"]["bins"]] == [1, 3, 2]
    assert contract["split"]["fit_fingerprint"] != contract["split"]["eval_fingerprint"]
    assert contract["created_by"] == "bootstrap-admin"
    assert len(contract["content_sha256"]) == 64


def test_eval_baseline_equals_an_independent_computation(client: FlaskClient, auth: Auth) -> None:
    contract = fit(client, auth)
    T = fit_temperature(
        np.array(REFERENCE_FIT_LOGITS, float), np.array(REFERENCE_FIT_LABELS)
    ).temperature
    logits = np.array(REFERENCE_EVAL_LOGITS, float) / T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = np.array(REFERENCE_EVAL_LABELS)
    observed = contract["baseline"]["eval"]["calibrated"]
    assert observed["nll"] == pytest.approx(-np.mean(np.log(p[np.arange(8), y])), abs=1e-12)
    assert observed["brier"] == pytest.approx(np.mean(((p - np.eye(3)[y]) ** 2).sum(1)), abs=1e-12)
    direct = multiclass_reading(
        np.array(REFERENCE_EVAL_LOGITS, float), y, np.array(QUARTER_EDGES, float)
    )
    assert contract["baseline"]["eval"]["uncalibrated"]["ece"] == pytest.approx(direct.ece)


def test_the_eval_set_never_touches_the_fitter(client: FlaskClient, auth: Auth) -> None:
    first = fit(client, auth, model="m1")
    other_eval = {"logits": [[9, 0, 0], [0, 0, 9], [5, 5, 0]], "labels": [2, 0, 1]}
    second = fit(client, auth, model="m2", eval=other_eval)
    assert first["calibrator"] == second["calibrator"]
    assert first["baseline"]["fit"] == second["baseline"]["fit"]
    assert first["baseline"]["eval"] != second["baseline"]["eval"]


def test_identical_fit_and_eval_sets_are_leakage(client: FlaskClient, auth: Auth) -> None:
    body = fit_body(eval={"logits": REFERENCE_FIT_LOGITS, "labels": REFERENCE_FIT_LABELS})
    response = client.post("/v1/contracts/fit", json=body, headers=auth.headers())
    assert response.status_code == 422
    assert response.get_json()["error"]["code"] == "leakage"
    assert client.get("/v1/contracts", headers=auth.headers()).get_json()["contracts"] == []


def test_register_get_and_verify(client: FlaskClient, auth: Auth, db: Database) -> None:
    fitted = fit(client, auth, model="source")
    response = client.post(
        "/v1/contracts", json=registration_body(fitted, model="copy"), headers=auth.headers()
    )
    assert response.status_code == 201, response.get_json()
    registered = response.get_json()
    assert registered["model"] == "copy" and registered["version"] == 1
    got = client.get(f"/v1/contracts/{registered['id']}", headers=auth.headers("reader"))
    assert registered.pop("warnings") == fitted["warnings"]  # the same calibrator and baseline
    assert got.get_json() == registered
    verify = client.get(f"/v1/contracts/{registered['id']}/verify", headers=auth.headers())
    assert verify.get_json()["valid"] is True

    with db.engine.begin() as connection:
        connection.execute(
            text("UPDATE contracts SET population = 'someone else' WHERE id = :i"),
            {"i": registered["id"]},
        )
    tampered = client.get(f"/v1/contracts/{registered['id']}/verify", headers=auth.headers())
    assert tampered.get_json()["valid"] is False


def test_verify_detects_a_changed_baseline_number(
    client: FlaskClient, auth: Auth, db: Database
) -> None:
    contract = fit(client, auth)
    with db.engine.begin() as connection:
        connection.execute(
            text("UPDATE contracts SET policy = :p WHERE id = :i"),
            {
                "p": '{"max_ece": 0.5, "max_ece_increase": 0.05, "min_labeled": 5}',
                "i": contract["id"],
            },
        )
    verify = client.get(f"/v1/contracts/{contract['id']}/verify", headers=auth.headers())
    assert verify.get_json()["valid"] is False


def test_versions_active_contract_and_retirement(client: FlaskClient, auth: Auth) -> None:
    v1 = fit(client, auth)
    time.sleep(0.01)
    between = v1["created_at"]
    v2 = fit(client, auth, population="glyph images from the November intake")
    assert (v1["version"], v2["version"]) == (1, 2)

    active = client.get("/v1/models/glyphs/contract", headers=auth.headers()).get_json()
    assert active["id"] == v2["id"]
    past = client.get(f"/v1/models/glyphs/contract?at={between}", headers=auth.headers())
    assert past.get_json()["id"] == v1["id"]

    retired = client.post(
        f"/v1/contracts/{v2['id']}/retire", json={"reason": "bad intake"}, headers=auth.headers()
    )
    assert retired.status_code == 200
    assert retired.get_json()["retirement"]["reason"] == "bad intake"
    assert retired.get_json()["content_sha256"] == v2["content_sha256"]
    active = client.get("/v1/models/glyphs/contract", headers=auth.headers()).get_json()
    assert active["id"] == v1["id"]
    still_valid = client.get(f"/v1/contracts/{v2['id']}/verify", headers=auth.headers())
    assert still_valid.get_json()["valid"] is True

    again = client.post(
        f"/v1/contracts/{v2['id']}/retire", json={"reason": "twice"}, headers=auth.headers()
    )
    assert again.status_code == 409
    events = client.get("/v1/audit/events?model=glyphs", headers=auth.headers()).get_json()
    kinds = [(e["type"], e["actor"], e["contract_id"]) for e in events["events"]]
    assert kinds == [
        ("contract_fitted", "bootstrap-admin", v1["id"]),
        ("contract_fitted", "bootstrap-admin", v2["id"]),
        ("contract_retired", "bootstrap-admin", v2["id"]),
    ]
    assert events["events"][2]["details"]["reason"] == "bad intake"


def test_a_retired_contract_was_still_active_before_its_retirement(
    client: FlaskClient, auth: Auth
) -> None:
    only = fit(client, auth)
    time.sleep(0.01)
    before = client.get("/v1/contracts", headers=auth.headers()).get_json()
    assert before["contracts"][0]["id"] == only["id"]
    client.post(f"/v1/contracts/{only['id']}/retire", json={"reason": "x"}, headers=auth.headers())
    none_now = client.get("/v1/models/glyphs/contract", headers=auth.headers())
    assert none_now.status_code == 404
    then = client.get(f"/v1/models/glyphs/contract?at={only['created_at']}", headers=auth.headers())
    assert then.get_json()["id"] == only["id"]
    listed = client.get(f"/v1/contracts?active_at={only['created_at']}", headers=auth.headers())
    assert [c["id"] for c in listed.get_json()["contracts"]] == [only["id"]]


def test_list_is_newest_first_and_paginates(client: FlaskClient, auth: Auth) -> None:
    ids = [fit(client, auth, model=f"m{i % 2}")["id"] for i in range(5)]
    seen, cursor = [], None
    while True:
        url = "/v1/contracts?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(url, headers=auth.headers()).get_json()
        assert len(page["contracts"]) <= 2
        seen += [c["id"] for c in page["contracts"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    only_m1 = client.get("/v1/contracts?model=m1", headers=auth.headers()).get_json()
    assert [c["id"] for c in only_m1["contracts"]] == [ids[3], ids[1]]
    soon = (datetime.now(UTC) + timedelta(hours=23)).isoformat().replace("+00:00", "Z")
    active = client.get(f"/v1/contracts?active_at={soon}", headers=auth.headers())
    assert {c["id"] for c in active.get_json()["contracts"]} == {ids[3], ids[4]}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("cursor=%%%", "cursor"),
        ("cursor=c2VxOng", "cursor"),
        ("active_at=yesterday", "active_at"),
        ("colour=red", "colour"),
        ("model=a%20b", "model"),
    ],
)
def test_bad_list_parameters_are_422(
    client: FlaskClient, auth: Auth, query: str, field: str
) -> None:
    assert field in errors_of(client.get(f"/v1/contracts?{query}", headers=auth.headers()))


def test_unknown_ids_are_404(client: FlaskClient, auth: Auth) -> None:
    for url in ("/v1/contracts/nope", "/v1/contracts/nope/verify", "/v1/models/nope/contract"):
        response = client.get(url, headers=auth.headers())
        assert response.status_code == 404, url
        assert response.get_json()["error"]["code"] == "not_found"
    retire = client.post("/v1/contracts/nope/retire", json={"reason": "x"}, headers=auth.headers())
    assert retire.status_code == 404


BAD_FIT_BODIES = [
    ({"classes": ["a", "b", "b"]}, "classes"),
    ({"classes": ["a"]}, "classes"),
    ({"bin_edges": [0, 0.5, 0.4, 1]}, "bin_edges"),
    ({"bin_edges": [0.1, 1]}, "bin_edges"),
    ({"bin_edges": [0, 0.5]}, "bin_edges"),
    ({"method": "platt"}, "method"),
    ({"method": "splines"}, "method"),
    ({"method": "beta"}, "method"),
    ({"method": "histogram"}, "method"),
    ({"task": "ternary"}, "task"),
    ({"objective": "ece"}, "objective"),
    ({"surprise": 1}, "surprise"),
    ({"data_window": {"start": "2026-10-01", "end": "2026-10-31T00:00:00Z"}}, "data_window.start"),
    (
        {"data_window": {"start": "2026-10-31T00:00:00Z", "end": "2026-10-01T00:00:00Z"}},
        "data_window.end",
    ),
    ({"policy": {"max_ece": -1}}, "policy.max_ece"),
    ({"policy": {"min_labeled": 2.5}}, "policy.min_labeled"),
    ({"policy": {"nonsense": 1}}, "policy.nonsense"),
    ({"model": "has space"}, "model"),
    ({"fit": {"logits": [[1, 2]] * 6, "labels": REFERENCE_FIT_LABELS}}, "fit.logits[0]"),
    ({"fit": {"logits": REFERENCE_FIT_LOGITS, "labels": [0, 0, 1]}}, "fit.labels"),
    ({"fit": {"logits": REFERENCE_FIT_LOGITS, "labels": [0, 0, 1, 1, 2, 3]}}, "fit.labels[5]"),
    ({"fit": {"logits": REFERENCE_FIT_LOGITS, "labels": [0, 0, 1, 1, 2, "zz"]}}, "fit.labels[5]"),
    (
        {
            "fit": {
                "logits": [*REFERENCE_FIT_LOGITS[:5], [1, "x", 0]],
                "labels": REFERENCE_FIT_LABELS,
            }
        },
        "fit.logits[5]",
    ),
    ({"eval": {"logits": REFERENCE_EVAL_LOGITS}}, "eval.labels"),
    ({"eval": {"scores": [0.5], "labels": [1]}}, "eval.scores"),
]


@pytest.mark.parametrize(("override", "field"), BAD_FIT_BODIES)
def test_invalid_fit_fields_are_422_naming_the_field(
    client: FlaskClient, auth: Auth, override: dict, field: str
) -> None:
    response = client.post("/v1/contracts/fit", json=fit_body(**override), headers=auth.headers())
    assert field in errors_of(response)
    assert client.get("/v1/contracts", headers=auth.headers()).get_json()["contracts"] == []


def test_huge_numbers_are_rejected_not_turned_into_infinity(
    client: FlaskClient, auth: Auth
) -> None:
    raw = client.application.json.dumps(fit_body()).replace("[3, 1, 0]", "[3e400, 1, 0]", 1)
    response = client.post(
        "/v1/contracts/fit",
        data=raw,
        headers={**auth.headers(), "Content-Type": "application/json"},
    )
    assert errors_of(response)["fit.logits[0]"] == "must be finite"


@pytest.mark.parametrize("key", ["accuracy", "mean_confidence"])
@pytest.mark.parametrize("value", [4e307, 1.5, -0.25])
def test_a_baseline_bin_outside_zero_one_is_named_not_overflowed(
    client: FlaskClient, auth: Auth, key: str, value: float
) -> None:
    fitted = fit(client, auth)
    body = registration_body(fitted, model="overflow")
    reading = body["baseline"]["eval"]["calibrated"]
    reading.pop("ece_debiased", None)
    reading["bins"][0][key] = value
    response = client.post("/v1/contracts", json=body, headers=auth.headers())
    field = f"baseline.eval.calibrated.bins[0].{key}"
    assert errors_of(response)[field] == "must lie in [0, 1]"


def test_every_problem_is_listed_at_once(client: FlaskClient, auth: Auth) -> None:
    body = fit_body(task="multiclass", bin_edges=[0, 2], method="nope")
    del body["population"]
    fields = errors_of(client.post("/v1/contracts/fit", json=body, headers=auth.headers()))
    assert {"bin_edges", "method", "population"} <= set(fields)


def test_invalid_registrations_are_422(client: FlaskClient, auth: Auth) -> None:
    fitted = fit(client, auth, model="source")
    cases = [
        ({"calibrator": {"method": "temperature", "temperature": 0}}, "calibrator.temperature"),
        ({"calibrator": {"method": "temperature", "temperature": -1}}, "calibrator.temperature"),
        ({"calibrator": {"method": "platt", "slope": 1, "intercept": 0}}, "calibrator.method"),
        ({"calibrator": {"method": "temperature", "temperature": 1, "x": 2}}, "calibrator.x"),
        ({"baseline": {"fit": {}}}, "baseline.eval"),
        ({"split": {"method": "random", "fit_fingerprint": "xyz"}}, "split.fit_fingerprint"),
        ({"id": "mine"}, "id"),
    ]
    for override, field in cases:
        body = {**registration_body(fitted, model="target"), **override}
        response = client.post("/v1/contracts", json=body, headers=auth.headers())
        assert field in errors_of(response), (override, response.get_json())
    bad_bins = registration_body(fitted, model="target")
    bad_bins["baseline"]["eval"]["calibrated"]["bins"][0]["n"] += 1
    fields = errors_of(client.post("/v1/contracts", json=bad_bins, headers=auth.headers()))
    assert "baseline.eval.calibrated.bins" in fields
    same = "0" * 64
    leaky = {
        **registration_body(fitted, model="target"),
        "split": {"method": "x", "fit_fingerprint": same, "eval_fingerprint": same},
    }
    response = client.post("/v1/contracts", json=leaky, headers=auth.headers())
    assert response.get_json()["error"]["code"] == "leakage"
    listed = client.get("/v1/contracts?model=target", headers=auth.headers()).get_json()
    assert listed["contracts"] == []


def test_binary_fit_with_platt(client: FlaskClient, auth: Auth) -> None:
    rng = np.random.default_rng(7)
    scores = rng.uniform(0.01, 0.99, size=400)
    sharpened = scores**3 / (scores**3 + (1 - scores) ** 3)
    labels = (rng.uniform(size=400) < scores).astype(int)
    body = contract_fields(
        "churn",
        task="binary",
        classes=["stay", "churn"],
        bin_edges=[0, 0.2, 0.4, 0.6, 0.8, 1],
        policy={"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 5, "c_fp": 1, "c_fn": 3},
    )
    body.update(
        method="platt",
        fit={"scores": sharpened[:200].tolist(), "labels": labels[:200].tolist()},
        eval={
            "scores": sharpened[200:].tolist(),
            "labels": ["churn" if y else "stay" for y in labels[200:]],
        },
    )
    response = client.post("/v1/contracts/fit", json=body, headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    contract = response.get_json()
    slope = contract["calibrator"]["slope"]
    assert 0.2 < slope < 0.5
    evaluated = contract["baseline"]["eval"]
    assert evaluated["calibrated"]["ece"] < evaluated["uncalibrated"]["ece"]
    assert evaluated["calibrated"]["threshold"] == pytest.approx(0.25)
    assert evaluated["calibrated"]["auc"] == pytest.approx(evaluated["uncalibrated"]["auc"])


def test_concurrent_registrations_get_gap_free_versions(client: FlaskClient, auth: Auth) -> None:
    fitted = fit(client, auth, model="source")
    body = registration_body(fitted, model="busy")
    app = client.application
    statuses: list[int] = []
    lock = threading.Lock()

    def register_many() -> None:
        local = app.test_client()
        for _ in range(5):
            status = local.post("/v1/contracts", json=body, headers=auth.headers()).status_code
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=register_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [201] * 40
    listed = client.get("/v1/contracts?model=busy&limit=100", headers=auth.headers()).get_json()
    assert sorted(c["version"] for c in listed["contracts"]) == list(range(1, 41))


def _binary_body(model: str) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    scores = rng.uniform(0.05, 0.95, size=300)
    labels = (rng.uniform(size=300) < scores**1.5).astype(int).tolist()
    body = contract_fields(
        model,
        task="binary",
        classes=["stay", "churn"],
        bin_edges=[0, 0.2, 0.4, 0.6, 0.8, 1],
        policy={"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 5, "c_fp": 1, "c_fn": 3},
    )
    body.update(
        method="platt",
        fit={"scores": scores[:150].tolist(), "labels": labels[:150]},
        eval={"scores": scores[150:].tolist(), "labels": labels[150:]},
    )
    return body


def _stripped(fitted: dict[str, Any], model: str, absent: str) -> dict[str, Any]:
    """A registration of ``fitted`` whose four baseline readings lack ``absent`` (or whose
    splits lack ``nll_difference``); ``key=null`` sets the key to null instead."""
    body = registration_body(fitted, model=model)
    key, _, null = absent.partition("=")
    for part in body["baseline"].values():
        if absent == "nll_difference":
            del part["nll_difference"]
            continue
        for which in ("uncalibrated", "calibrated"):
            if null:
                part[which][key] = None
            else:
                del part[which][key]
    return body


def _reads_back(client: FlaskClient, auth: Auth, contract: dict[str, Any]) -> None:
    """Every view of a contract's baseline answers 200: readings, diagrams, pages, the gate."""
    model, cid = contract["model"], contract["id"]
    urls = [
        f"/v1/models/{model}/calibration",
        f"/v1/models/{model}/reliability.svg",
        f"/ui/models/{model}",
        f"/ui/contracts/{cid}",
        *(
            f"/v1/contracts/{cid}/reliability.svg?split={split}&which={which}"
            for split in ("fit", "eval")
            for which in ("calibrated", "uncalibrated")
        ),
    ]
    for url in urls:
        response = client.get(url, headers=auth.headers("reader"))
        assert response.status_code == 200, (url, response.get_data(as_text=True)[:300])
    baseline = client.get(f"/v1/models/{model}/calibration", headers=auth.headers()).get_json()
    assert baseline["baseline"]["n"] == contract["baseline"]["eval"]["calibrated"]["n"]
    assert baseline["baseline"]["ece_debiased"] is not None
    gate = client.post(
        "/v1/gate",
        json={"contract_id": cid, "policy": {"min_eval_samples": 1}},
        headers=auth.headers(),
    )
    assert gate.status_code == 201, gate.get_json()


@pytest.mark.parametrize(
    ("task", "absent"),
    [
        ("multiclass", "ece_debiased"),
        ("multiclass", "calibration_p_value"),
        ("multiclass", "mce_n"),
        ("multiclass", "classwise_ece"),
        ("multiclass", "nll_difference"),
        ("multiclass", "mce=null"),
        ("multiclass", "classwise_ece=null"),
        ("multiclass", "calibration_p_value=null"),
        ("binary", "ece_debiased"),
        ("binary", "calibration_p_value"),
        ("binary", "mce_n"),
        ("binary", "expected_cost"),
        ("binary", "nll_difference"),
        ("binary", "auc=null"),
        ("binary", "expected_cost=null"),
        ("binary", "mce=null"),
    ],
)
def test_a_baseline_without_an_optional_field_reads_back_forever(
    client: FlaskClient, auth: Auth, task: str, absent: str
) -> None:
    source = fit(client, auth) if task == "multiclass" else fit_binary(client, auth)
    response = client.post(
        "/v1/contracts", json=_stripped(source, "sparse", absent), headers=auth.headers()
    )
    assert response.status_code == 201, response.get_json()
    contract = response.get_json()
    assert contract["baseline"] == _stripped(source, "sparse", absent)["baseline"]
    if task == "multiclass":
        rows = [
            {"id": f"p{i}", "ts": _minutes_ago(5), "logits": [i % 3, 1.0, 0.5]} for i in range(9)
        ]
    else:
        rows = [{"id": f"p{i}", "ts": _minutes_ago(5), "score": i / 10} for i in range(9)]
    posted = client.post(
        "/v1/predictions", json={"model": "sparse", "predictions": rows}, headers=auth.headers()
    )
    assert posted.status_code == 200, posted.get_json()
    labels = [{"id": r["id"], "label": i % 2, "ts": _minutes_ago(1)} for i, r in enumerate(rows)]
    joined = client.post(
        "/v1/labels", json={"model": "sparse", "labels": labels}, headers=auth.headers()
    )
    assert joined.get_json()["joined"] == 9
    _reads_back(client, auth, contract)


def fit_binary(client: FlaskClient, auth: Auth) -> dict[str, Any]:
    response = client.post("/v1/contracts/fit", json=_binary_body("churn"), headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def _minutes_ago(minutes: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


REQUIRED_READING_FIELDS = [
    "n",
    "ece",
    "ece_ci",
    "mce",
    "nll",
    "brier",
    "accuracy",
    "mean_confidence",
    "bins",
    "label_counts",
]


@pytest.mark.parametrize("task", [None, "regression", {"task": "binary"}])
def test_a_baseline_beside_a_missing_or_unknown_task_is_422_naming_the_task(
    client: FlaskClient, auth: Auth, task: Any
) -> None:
    body = registration_body(fit(client, auth), model="target")
    if task is None:
        del body["task"]
    else:
        body["task"] = task
    response = client.post("/v1/contracts", json=body, headers=auth.headers())
    assert response.status_code == 422, response.get_json()
    assert "task" in errors_of(response)


@pytest.mark.parametrize("missing", REQUIRED_READING_FIELDS)
def test_a_baseline_reading_without_a_required_field_is_422_naming_it(
    client: FlaskClient, auth: Auth, missing: str
) -> None:
    body = registration_body(fit(client, auth), model="target")
    del body["baseline"]["eval"]["calibrated"][missing]
    fields = errors_of(client.post("/v1/contracts", json=body, headers=auth.headers()))
    assert f"baseline.eval.calibrated.{missing}" in fields


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["bins"][0].pop("ci"), "baseline.eval.calibrated.bins[0].ci"),
        (lambda r: r["bins"][0].update(lo=0.3), "baseline.eval.calibrated.bins[0].lo"),
        (lambda r: r["bins"][0].update(hi=0.75), "baseline.eval.calibrated.bins[0].hi"),
        (lambda r: r["bins"].append(dict(r["bins"][0])), "baseline.eval.calibrated.bins[3]"),
        (lambda r: r["bins"][0].update(accuracy=1.5), "baseline.eval.calibrated.bins[0].accuracy"),
        (lambda r: r["bins"][0].update(ci=[0.9, 0.1]), "baseline.eval.calibrated.bins[0].ci"),
        (lambda r: r.update(label_counts=[8, 0]), "baseline.eval.calibrated.label_counts"),
        (lambda r: r.update(label_counts=[1, 1, 1]), "baseline.eval.calibrated.label_counts"),
        (lambda r: r.update(n=0, bins=[], label_counts=[0, 0, 0]), "baseline.eval.calibrated.n"),
        (lambda r: r.update(ece=None), "baseline.eval.calibrated.ece"),
        (lambda r: r.update(ece=1.5), "baseline.eval.calibrated.ece"),
        (lambda r: r.update(ece_ci=[0.3, 0.1]), "baseline.eval.calibrated.ece_ci"),
        (lambda r: r.update(nll=1e300), "baseline.eval.calibrated.nll"),
        (lambda r: r.update(brier=2.5), "baseline.eval.calibrated.brier"),
        (lambda r: r.update(mce_n=10**6), "baseline.eval.calibrated.mce_n"),
        (lambda r: r.update(auc=0.5), "baseline.eval.calibrated.auc"),
        (lambda r: r.update(surprise=1), "baseline.eval.calibrated.surprise"),
    ],
)
def test_baseline_readings_are_checked_against_the_contract(
    client: FlaskClient, auth: Auth, change: Any, field: str
) -> None:
    body = registration_body(fit(client, auth), model="target")
    change(body["baseline"]["eval"]["calibrated"])
    assert field in errors_of(client.post("/v1/contracts", json=body, headers=auth.headers()))


def test_binary_baselines_need_the_binary_keys(client: FlaskClient, auth: Auth) -> None:
    source = fit_binary(client, auth)
    body = registration_body(source, model="target")
    del body["baseline"]["eval"]["calibrated"]["auc"]
    body["baseline"]["eval"]["uncalibrated"]["prevalence"] = None
    body["baseline"]["fit"]["nll_difference"]["n"] += 1
    body["baseline"]["fit"]["uncalibrated"]["label_counts"] = [0, 150]
    fields = errors_of(client.post("/v1/contracts", json=body, headers=auth.headers()))
    assert {
        "baseline.eval.calibrated.auc",
        "baseline.eval.uncalibrated.prevalence",
        "baseline.fit.nll_difference.n",
        "baseline.fit.uncalibrated.label_counts",
    } <= set(fields)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"classes": [f"c{i}" for i in range(21_841)]}, "classes"),
        ({"bin_edges": [i / 101 for i in range(102)]}, "bin_edges"),
        ({"bin_edges": [0, 0.5, 10**400]}, "bin_edges[2]"),
        (
            {"data_window": {"start": "0001-01-01T00:00:00Z", "end": "2026-10-31T00:00:00Z"}},
            "data_window.start",
        ),
        (
            {"data_window": {"start": "2026-10-01T00:00:00Z", "end": "9999-12-31T23:59:59Z"}},
            "data_window.end",
        ),
        ({"policy": {"c_fp": 1e300, "c_fn": 1}}, "policy.c_fp"),
        ({"policy": {"min_labeled": 2**60}}, "policy.min_labeled"),
        ({"model": "glyphs\n"}, "model"),
        ({"population": "a\ud800b"}, "population"),
        ({"split": {"method": "a\x00b"}}, "split.method"),
        (
            {"fit": {"logits": [[1e308, -1e308, 0]] * 6, "labels": REFERENCE_FIT_LABELS}},
            "fit.logits[0]",
        ),
    ],
)
def test_fit_bounds_are_422_naming_the_field(
    client: FlaskClient, auth: Auth, override: dict[str, Any], field: str
) -> None:
    raw = json.dumps(fit_body(**override)).replace(str(10**400), "1" + "0" * 400)
    response = client.post(
        "/v1/contracts/fit",
        data=raw,
        headers={**auth.headers(), "Content-Type": "application/json"},
    )
    assert field in errors_of(response)


def test_the_largest_k_and_the_finest_bins_are_accepted(client: FlaskClient, auth: Auth) -> None:
    rng = np.random.default_rng(5)
    K = 1000
    classes = [f"c{i}" for i in range(K)]
    sets = {
        name: {"logits": rng.normal(size=(n, K)).tolist(), "labels": rng.integers(0, K, n).tolist()}
        for name, n in (("fit", 30), ("eval", 20))
    }
    body = fit_body("wide", classes=classes, bin_edges=[i / 100 for i in range(101)], **sets)
    response = client.post("/v1/contracts/fit", json=body, headers=auth.headers())
    assert response.status_code == 201, response.get_json()
    assert len(response.get_json()["classes"]) == K


@pytest.mark.parametrize(
    ("calibrator", "field"),
    [
        ({"method": "temperature", "temperature": 0.04}, "calibrator.temperature"),
        ({"method": "temperature", "temperature": 21}, "calibrator.temperature"),
        ({"method": "temperature", "temperature": 10**400}, "calibrator.temperature"),
        ({"method": "platt", "slope": 2e6, "intercept": 0}, "calibrator.slope"),
        ({"method": "platt", "slope": 1e-7, "intercept": 0}, "calibrator.slope"),
        ({"method": "platt", "slope": 1, "intercept": -2e8}, "calibrator.intercept"),
    ],
)
def test_calibrator_parameters_are_bounded(
    client: FlaskClient, auth: Auth, calibrator: dict[str, Any], field: str
) -> None:
    source = fit_binary(client, auth) if calibrator["method"] == "platt" else fit(client, auth)
    body = {**registration_body(source, model="target"), "calibrator": calibrator}
    raw = json.dumps(body).replace(str(10**400), "1" + "0" * 400)
    response = client.post(
        "/v1/contracts", data=raw, headers={**auth.headers(), "Content-Type": "application/json"}
    )
    assert field in errors_of(response)
