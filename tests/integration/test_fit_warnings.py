"""The fit reply's ``warnings``: each code appears exactly when its condition holds on the
stored baseline, for fits of several families, and ``calmon fit`` prints them on stderr."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from tests.integration.conftest import Auth
from tests.integration.factories import contract_fields
from tests.integration.test_served import CALMON, Served, served  # noqa: F401 - fixture

SIGNAL = 2.0
MIN_ROWS = 500  # the gate's default min_eval_samples


def _calibrated(n: int, seed: int, K: int = 3) -> tuple[list[list[float]], list[int]]:
    """Logits ``m x``, ``x ~ N(m e_y, I)``: ``softmax`` of them is the label's posterior."""
    rng = np.random.default_rng(seed)
    y = rng.integers(K, size=n)
    x = rng.normal(size=(n, K))
    x[np.arange(n), y] += SIGNAL
    return (SIGNAL * x).round(6).tolist(), y.tolist()


def _separated(n: int, seed: int) -> tuple[list[list[float]], list[int]]:
    """Logits whose top class is always the label: a temperature fit runs to its bound."""
    rng = np.random.default_rng(seed)
    y = rng.integers(3, size=n)
    z = rng.normal(size=(n, 3))
    z[np.arange(n), y] += 5.0
    return z.round(6).tolist(), y.tolist()


def _body(model: str, method: str, fit: Any, held: Any) -> dict[str, Any]:
    body = contract_fields(model)
    body.update(
        method=method,
        fit={"logits": fit[0], "labels": fit[1]},
        eval={"logits": held[0], "labels": held[1]},
    )
    return body


def _expected(contract: dict[str, Any]) -> set[str]:
    """The warning codes the stored calibrator and baseline call for, derived here."""
    baseline = contract["baseline"]
    fit, held = baseline["fit"], baseline["eval"]
    codes = set()
    d = held["nll_difference"]
    if d["mean"] > 2 * d["sd"] / math.sqrt(d["n"]):
        codes.add("eval_nll_worse")
    calibrator = contract["calibrator"]
    if calibrator["method"] == "temperature" and any(
        math.isclose(calibrator["temperature"], bound, rel_tol=1e-6) for bound in (0.05, 20.0)
    ):
        codes.add("parameter_on_bound")
    if calibrator["method"] == "isotonic" and any(
        v in (0.0, 1.0) for m in calibrator["per_class"] for v in m["y"]
    ):
        codes.add("parameter_on_bound")
    optimism = (held["calibrated"]["nll"] - fit["calibrated"]["nll"]) - (
        held["uncalibrated"]["nll"] - fit["uncalibrated"]["nll"]
    )
    if optimism > 0.02:
        codes.add("overfit")
    if fit["calibrated"]["n"] < MIN_ROWS:
        codes.add("small_fit_set")
    if held["calibrated"]["n"] < MIN_ROWS:
        codes.add("small_eval_set")
    return codes


CASES = {
    "calibrated-temperature": ("temperature", _calibrated(600, 1), _calibrated(600, 2)),
    "calibrated-matrix": ("matrix", _calibrated(600, 3), _calibrated(600, 4)),
    "small-sets": ("temperature", _calibrated(100, 5), _calibrated(200, 6)),
    "separated-temperature": ("temperature", _separated(600, 7), _calibrated(600, 8)),
    "overfit-isotonic": ("isotonic", _calibrated(60, 9), _calibrated(3000, 10)),
}


def test_each_warning_appears_exactly_when_its_condition_holds(
    client: FlaskClient, auth: Auth
) -> None:
    seen: dict[str, set[str]] = {}
    for name, (method, fit, held) in CASES.items():
        response = client.post(
            "/v1/contracts/fit", json=_body(name, method, fit, held), headers=auth.headers()
        )
        assert response.status_code == 201, response.get_json()
        contract = response.get_json()
        codes = [w["code"] for w in contract["warnings"]]
        assert set(codes) == _expected(contract), (name, contract["warnings"])
        assert all(w["message"] for w in contract["warnings"])
        seen[name] = set(codes)
    assert seen["calibrated-temperature"] == set() and seen["calibrated-matrix"] == set()
    assert seen["small-sets"] == {"small_fit_set", "small_eval_set"}
    assert "parameter_on_bound" in seen["separated-temperature"]
    assert {"overfit", "eval_nll_worse"} <= seen["overfit-isotonic"]


def test_the_warning_of_a_temperature_on_its_bound_names_the_gate_check(
    client: FlaskClient, auth: Auth
) -> None:
    body = _body("bound", "temperature", _separated(600, 7), _calibrated(600, 8))
    contract = client.post("/v1/contracts/fit", json=body, headers=auth.headers()).get_json()
    (bound,) = [w for w in contract["warnings"] if w["code"] == "parameter_on_bound"]
    assert "0.05" in bound["message"] and "calibrator_bound" in bound["message"]


def test_warnings_are_declared_in_the_openapi_document(client: FlaskClient) -> None:
    document = client.get("/v1/openapi.json").get_json()
    schemas = document["components"]["schemas"]
    warnings = schemas["Contract"]["properties"]["warnings"]
    item = warnings["items"]
    ref = item["$ref"].rsplit("/", 1)[-1]
    declared = schemas[ref]
    assert set(declared["required"]) == {"code", "message"}
    code = declared["properties"]["code"]
    enum = schemas[code["$ref"].rsplit("/", 1)[-1]]["enum"] if "$ref" in code else code["enum"]
    assert set(enum) == {
        "eval_nll_worse",
        "parameter_on_bound",
        "overfit",
        "small_fit_set",
        "small_eval_set",
    }


@pytest.mark.slow
def test_calmon_fit_prints_each_warning_on_stderr(served: Served, tmp_path: Path) -> None:  # noqa: F811
    def fit_cli(model: str, fit: Any, held: Any) -> subprocess.CompletedProcess[str]:
        for name, (x, y) in (("fit", fit), ("eval", held)):
            np.savez(tmp_path / f"{name}.npz", logits=np.array(x), labels=np.array(y))
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps(contract_fields(model)))
        return served.cli(
            "fit",
            *("--spec", str(spec), "--method", "temperature"),
            *("--fit", str(tmp_path / "fit.npz"), "--eval", str(tmp_path / "eval.npz")),
        )

    small = fit_cli("cli-small", _calibrated(100, 5), _calibrated(200, 6))
    lines = [line for line in small.stderr.splitlines() if line.startswith("warning")]
    assert [line.split("]")[0] for line in lines] == [
        "warning [small_fit_set",
        "warning [small_eval_set",
    ], small.stderr
    assert "100 rows" in lines[0] and "200 rows" in lines[1]
    assert "warning" not in small.stdout
    quiet = fit_cli("cli-quiet", _calibrated(600, 1), _calibrated(600, 2))
    assert "warning" not in quiet.stderr, quiet.stderr
    bound = fit_cli("cli-bound", _separated(600, 7), _calibrated(600, 8))
    assert "warning [parameter_on_bound]" in bound.stderr, bound.stderr
