"""Every calibrator family fits, registers, streams and gates end to end, and a registration
with bad parameters is a 422 naming the field with nothing stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from service.calibration import (
    binary_probabilities,
    binary_reading,
    calibrator_from_dict,
    multiclass_probabilities,
    multiclass_reading,
)
from service.cli import build_parser
from service.contracts.model import FIT_METHODS
from tests.integration.conftest import Auth
from tests.integration.factories import contract_fields, registration_body
from tests.integration.test_served import CALMON, Served, served  # noqa: F401 - fixture

EDGES = [0, 0.2, 0.4, 0.6, 0.8, 1]
FAMILIES = [
    ("binary", "isotonic"),
    ("binary", "histogram"),
    ("binary", "beta"),
    ("multiclass", "vector"),
    ("multiclass", "matrix"),
    ("multiclass", "isotonic"),
]


def _minutes_ago(m: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=m)).isoformat().replace("+00:00", "Z")


def _data(task: str, n: int, seed: int) -> tuple[list[Any], list[int]]:
    rng = np.random.default_rng(seed)
    if task == "binary":
        scores = rng.beta(1.2, 1.5, size=n)
        truth = scores**2 / (scores**2 + 0.4 * (1 - scores) ** 0.7)
        return np.round(scores, 4).tolist(), (rng.random(n) < truth).astype(int).tolist()
    logits = rng.normal(size=(n, 3)) * 2.5
    p = np.exp(0.6 * logits + [0.3, 0.0, -0.3])
    p /= p.sum(axis=1, keepdims=True)
    labels = [int(rng.choice(3, p=row)) for row in p]
    return logits.round(4).tolist(), labels


def _fit_body(task: str, method: str, model: str) -> dict[str, Any]:
    key = "scores" if task == "binary" else "logits"
    fit_x, fit_y = _data(task, 400, 1)
    eval_x, eval_y = _data(task, 300, 2)
    extra = {"classes": ["no", "yes"]} if task == "binary" else {}
    body = contract_fields(
        model,
        task=task,
        bin_edges=EDGES,
        policy={"max_ece": 0.2, "max_ece_increase": 0.1, "min_labeled": 5},
        **extra,
    )
    body.update(
        method=method,
        fit={key: fit_x, "labels": fit_y},
        eval={key: eval_x, "labels": eval_y},
    )
    return body


def _post(client: FlaskClient, auth: Auth, url: str, body: Any, role: str = "admin") -> Any:
    return client.post(url, json=body, headers=auth.headers(role))


def _stream(client: FlaskClient, auth: Auth, model: str, body: dict[str, Any]) -> None:
    key = "score" if body["task"] == "binary" else "logits"
    inputs = body["eval"]["scores" if key == "score" else "logits"]
    rows = [{"id": f"r{i}", "ts": _minutes_ago(5 + i % 200), key: x} for i, x in enumerate(inputs)]
    reply = _post(client, auth, "/v1/predictions", {"model": model, "predictions": rows}, "ingest")
    assert reply.status_code in (200, 201), reply.get_json()
    labels = [
        {"id": f"r{i}", "label": y, "ts": _minutes_ago(1)}
        for i, y in enumerate(body["eval"]["labels"])
    ]
    reply = _post(client, auth, "/v1/labels", {"model": model, "labels": labels}, "ingest")
    assert reply.status_code in (200, 201), reply.get_json()


@pytest.mark.parametrize(("task", "method"), FAMILIES)
def test_a_family_fits_registers_streams_and_gates(
    client: FlaskClient, auth: Auth, task: str, method: str
) -> None:
    body = _fit_body(task, method, "fam")
    reply = _post(client, auth, "/v1/contracts/fit", body)
    assert reply.status_code == 201, reply.get_json()
    contract = reply.get_json()
    assert contract["calibrator"]["method"] == method
    calibrator = calibrator_from_dict(contract["calibrator"], 2 if task == "binary" else 3)
    key = "scores" if task == "binary" else "logits"
    reader = binary_reading if task == "binary" else multiclass_reading
    direct = reader(body["eval"][key], body["eval"]["labels"], np.array(EDGES), calibrator)
    evaluated = contract["baseline"]["eval"]
    assert evaluated["calibrated"]["nll"] == pytest.approx(direct.nll, abs=1e-12)
    fitted = contract["baseline"]["fit"]
    assert fitted["calibrated"]["nll"] < fitted["uncalibrated"]["nll"]

    # A streamed window of exactly the eval set reproduces the eval baseline.
    _stream(client, auth, "fam", body)
    got = client.get("/v1/models/fam/calibration?window=24h", headers=auth.headers()).get_json()
    assert got["n_labeled"] == 300
    for name in ("ece", "mce", "mce_supported", "nll", "brier", "accuracy"):
        assert got["metrics"][name] == pytest.approx(evaluated["calibrated"][name], abs=1e-9)
    assert [b["n"] for b in got["bins"]] == [b["n"] for b in evaluated["calibrated"]["bins"]]
    assert got["drift"]["refit_temperature"] is not None

    gate = _post(
        client, auth, "/v1/gate", {"contract_id": contract["id"], "policy": {"min_eval_samples": 1}}
    )
    assert gate.status_code == 201, gate.get_json()

    # The same parameters register as given and read back bit for bit.
    registered = _post(client, auth, "/v1/contracts", registration_body(contract, model="copy"))
    assert registered.status_code == 201, registered.get_json()
    stored = client.get(f"/v1/contracts/{registered.get_json()['id']}", headers=auth.headers())
    assert stored.get_json()["calibrator"] == contract["calibrator"]


def _bad_cases() -> list[tuple[str, dict[str, Any], str]]:
    iso = {"method": "isotonic", "x": [0.1, 0.5, 0.9], "y": [0.1, 0.6, 0.4]}
    return [
        ("binary", iso, "calibrator.y[2]"),
        ("binary", {**iso, "x": [0.1, 0.1, 0.9], "y": [0.1, 0.2, 0.4]}, "calibrator.x[1]"),
        ("binary", {"method": "beta", "a": -1.0, "b": 1.0, "c": 0.0}, "calibrator.a"),
        ("binary", {"method": "histogram", "cuts": [0.5], "values": [0.1]}, "calibrator.values"),
        ("binary", {"method": "vector", "scale": [1, 1], "bias": [0, 0]}, "calibrator.method"),
        (
            "multiclass",
            {"method": "matrix", "weights": [[1, 0], [0, 1]], "bias": [0, 0, 0]},
            "calibrator.weights",
        ),
        (
            "multiclass",
            {"method": "matrix", "weights": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "bias": [0, 0]},
            "calibrator.bias",
        ),
        (
            "multiclass",
            {"method": "vector", "scale": [1, 1, 1e9], "bias": [0, 0, 0]},
            "calibrator.scale[2]",
        ),
        ("multiclass", {"method": "isotonic", "per_class": [iso, iso]}, "calibrator.per_class"),
        ("multiclass", {"method": "beta", "a": 1, "b": 1, "c": 0}, "calibrator.method"),
    ]


@pytest.mark.parametrize(("task", "calibrator", "field"), _bad_cases())
def test_bad_family_parameters_are_422_naming_the_field_and_nothing_is_stored(
    client: FlaskClient, auth: Auth, task: str, calibrator: dict[str, Any], field: str
) -> None:
    fitted = _post(client, auth, "/v1/contracts/fit", _fit_body(task, "temperature", "source"))
    body = registration_body(fitted.get_json(), model="bad")
    body["calibrator"] = calibrator
    reply = _post(client, auth, "/v1/contracts", body)
    assert reply.status_code == 422, reply.get_json()
    fields = [d["field"] for d in reply.get_json()["error"]["details"]]
    assert field in fields
    listed = client.get("/v1/contracts?model=bad", headers=auth.headers()).get_json()
    assert listed["contracts"] == []


def test_a_nan_parameter_is_422(client: FlaskClient, auth: Auth) -> None:
    fitted = _post(client, auth, "/v1/contracts/fit", _fit_body("binary", "temperature", "src"))
    body = registration_body(fitted.get_json(), model="bad")
    text = json.dumps({**body, "calibrator": "__nan__"})
    text = text.replace('"__nan__"', '{"method": "beta", "a": NaN, "b": 1.0, "c": 0.0}')
    reply = client.post(
        "/v1/contracts",
        data=text,
        headers={**auth.headers(), "Content-Type": "application/json"},
    )
    assert reply.status_code in (400, 422), reply.get_json()
    listed = client.get("/v1/contracts?model=bad", headers=auth.headers()).get_json()
    assert listed["contracts"] == []


@pytest.mark.parametrize(("task", "method"), [("multiclass", "beta"), ("binary", "matrix")])
def test_a_fit_method_of_the_other_task_is_422(
    client: FlaskClient, auth: Auth, task: str, method: str
) -> None:
    reply = _post(client, auth, "/v1/contracts/fit", _fit_body(task, method, "wrong"))
    assert reply.status_code == 422, reply.get_json()
    assert "method" in [d["field"] for d in reply.get_json()["error"]["details"]]


def test_the_cli_fit_accepts_every_family() -> None:
    parser = build_parser()
    for method in [*(m for _, m in FAMILIES), "auto"]:
        args = parser.parse_args(
            ["fit", "--url", "u", "--spec", "s", "--fit", "f", "--eval", "e", "--method", method]
        )
        assert args.method == method


@pytest.mark.parametrize(("task", "method"), [("multiclass", "temperature"), ("binary", "beta")])
def test_equal_mass_edges_are_quantiles_of_the_fit_sets_calibrated_confidences(
    client: FlaskClient, auth: Auth, task: str, method: str
) -> None:
    body = {**_fit_body(task, method, "mass"), "bin_edges": {"equal_mass": 8}}
    reply = _post(client, auth, "/v1/contracts/fit", body)
    assert reply.status_code == 201, reply.get_json()
    contract = reply.get_json()
    calibrator = calibrator_from_dict(contract["calibrator"], 2 if task == "binary" else 3)
    if task == "binary":
        confidence = np.asarray(binary_probabilities(calibrator, body["fit"]["scores"]))
    else:
        confidence = multiclass_probabilities(calibrator, body["fit"]["logits"]).max(axis=1)
    ranked = np.sort(confidence)
    n = ranked.size
    want = [0.0, *(ranked[int(np.ceil(j * n / 8)) - 1] for j in range(1, 8)), 1.0]
    assert contract["bin_edges"] == pytest.approx(want, abs=1e-15)
    counts = [b["n"] for b in contract["baseline"]["fit"]["calibrated"]["bins"]]
    assert len(counts) == 8 and max(counts) - min(counts) <= 3
    stored = client.get(f"/v1/contracts/{contract['id']}", headers=auth.headers()).get_json()
    assert stored["bin_edges"] == contract["bin_edges"]


def test_tied_quantiles_merge_into_fewer_bins(client: FlaskClient, auth: Auth) -> None:
    body = _fit_body("binary", "histogram", "ties")
    body["bin_edges"] = {"equal_mass": 20}
    reply = _post(client, auth, "/v1/contracts/fit", body)
    assert reply.status_code == 201, reply.get_json()
    edges = reply.get_json()["bin_edges"]
    # A 10-bin histogram map takes at most 10 values, so 19 quantiles merge into at most 10.
    assert len(edges) <= 12 and edges == sorted(set(edges)) and edges[0] == 0 and edges[-1] == 1


@pytest.mark.parametrize(
    ("edges", "field", "url"),
    [
        ({"equal_mass": 0}, "bin_edges.equal_mass", "/v1/contracts/fit"),
        ({"equal_mass": 2.5}, "bin_edges.equal_mass", "/v1/contracts/fit"),
        ({"equal_width": 5}, "bin_edges.equal_width", "/v1/contracts/fit"),
        ({"equal_mass": 5}, "bin_edges", "/v1/contracts"),
    ],
)
def test_bad_equal_mass_requests_are_422(
    client: FlaskClient, auth: Auth, edges: Any, field: str, url: str
) -> None:
    body = _fit_body("multiclass", "temperature", "edges")
    if url == "/v1/contracts":
        fitted = _post(client, auth, "/v1/contracts/fit", body).get_json()
        body = registration_body(fitted, model="edges2")
    body["bin_edges"] = edges
    reply = _post(client, auth, url, body)
    assert reply.status_code == 422, reply.get_json()
    assert field in [d["field"] for d in reply.get_json()["error"]["details"]]


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_auto_records_its_choice_and_every_candidates_evidence(
    client: FlaskClient, auth: Auth, task: str
) -> None:
    reply = _post(client, auth, "/v1/contracts/fit", _fit_body(task, "auto", "auto"))
    assert reply.status_code == 201, reply.get_json()
    contract = reply.get_json()
    selection = contract["baseline"]["selection"]
    methods = [c["method"] for c in selection["candidates"]]
    assert methods == list(FIT_METHODS[task])
    assert contract["calibrator"]["method"] == selection["chosen"]
    chosen = next(c for c in selection["candidates"] if c["method"] == selection["chosen"])
    assert chosen["p_value"] >= selection["alpha"] and chosen["beaten_by"] is None
    # The selection is part of the hashed, stored contract and registers as given.
    copy = _post(client, auth, "/v1/contracts", registration_body(contract, model="auto2"))
    assert copy.status_code == 201, copy.get_json()
    assert copy.get_json()["baseline"]["selection"] == selection
    body = registration_body(contract, model="auto3")
    body["baseline"]["selection"]["chosen"] = "splines"
    bad = _post(client, auth, "/v1/contracts", body)
    assert "baseline.selection.chosen" in [d["field"] for d in bad.get_json()["error"]["details"]]


def test_the_contract_page_shows_the_choice_table(client: FlaskClient, auth: Auth) -> None:
    contract = _post(client, auth, "/v1/contracts/fit", _fit_body("binary", "auto", "page"))
    selection = contract.get_json()["baseline"]["selection"]
    page = client.get(f"/ui/contracts/{contract.get_json()['id']}", headers=auth.headers())
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'id="selection"' in html and f"<strong>{selection['chosen']}</strong>" in html
    for candidate in selection["candidates"]:
        assert f"<td>{candidate['method']}</td>" in html
    plain = _post(client, auth, "/v1/contracts/fit", _fit_body("binary", "beta", "page2"))
    other = client.get(f"/ui/contracts/{plain.get_json()['id']}", headers=auth.headers())
    assert 'id="selection"' not in other.get_data(as_text=True)


@pytest.mark.slow
def test_calmon_fit_takes_a_family_and_auto(served: Served, tmp_path: Path) -> None:  # noqa: F811
    fit_x, fit_y = _data("multiclass", 400, 1)
    eval_x, eval_y = _data("multiclass", 300, 2)
    np.savez(tmp_path / "fit.npz", logits=np.array(fit_x), labels=np.array(fit_y))
    np.savez(tmp_path / "eval.npz", logits=np.array(eval_x), labels=np.array(eval_y))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(contract_fields("cli-families", bin_edges=EDGES)))

    def fit_cli(*extra: str) -> dict[str, Any]:
        result = served.cli(
            "fit",
            *("--spec", str(spec), *extra),
            *("--fit", str(tmp_path / "fit.npz"), "--eval", str(tmp_path / "eval.npz")),
        )
        return json.loads(result.stdout)

    matrix = fit_cli("--method", "matrix")
    assert matrix["calibrator"]["method"] == "matrix" and matrix["baseline_source"] == "measured"
    assert len(matrix["calibrator"]["weights"]) == 3
    chosen = fit_cli("--method", "auto", "--local")
    status, stored = served.call("GET", f"/v1/contracts/{chosen['id']}")
    assert status == 200 and chosen["baseline_source"] == "supplied"
    selection = stored["baseline"]["selection"]
    assert stored["calibrator"]["method"] == selection["chosen"]
    assert [c["method"] for c in selection["candidates"]] == list(FIT_METHODS["multiclass"])
