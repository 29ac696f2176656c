"""The review gate's error rates by seeded simulation: a smaller bench/bench_statistics.py.

Contracts are fitted by calmon's own fit on perfectly calibrated rows; the gate judges the stored
eval baseline (calibrated models), or a fresh evaluation set drawn at twice max_ece (a drifted
model the calibrator cannot fix).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from service.calibration.binning import default_edges
from service.calibration.simulation import SCENARIOS
from service.common.errors import ErrorCollector
from service.contracts.fitting import fit_contract_spec
from service.contracts.labeled_sets import LabeledSet
from service.contracts.model import Contract
from service.contracts.requests import FitRequest, parse_spec_fields
from service.gate.checks import evaluate_gate
from service.gate.requests import parse_gate_request


def contract_of(task: str, method: str, rng: np.random.Generator, rows: int) -> Contract:
    body = {
        "model": "simulated",
        "checkpoint": "sha256:" + "ab" * 32,
        "task": task,
        "population": "simulated rows",
        "outcome": "simulated labels",
        "data_window": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
        "split": {"method": "independent draws"},
        "bin_edges": default_edges(15).tolist(),
    }
    if task == "multiclass":
        body["classes"] = [f"class{k}" for k in range(10)]
    errors = ErrorCollector()
    fields = parse_spec_fields(body, errors)
    errors.raise_if_any()
    calibrated = SCENARIOS[(task, 0.0)]
    fit = LabeledSet(*calibrated.draw(rng, rows))
    held_out = LabeledSet(*calibrated.draw(rng, rows))
    spec = fit_contract_spec(FitRequest(fields, method, fit, held_out))
    return Contract("simulated", 1, spec, datetime(2026, 2, 1, tzinfo=UTC), "tests", "0" * 64)


REQUEST = parse_gate_request({"contract_id": "simulated", "policy": {"max_ece": 0.05}})


@pytest.mark.parametrize(
    ("task", "method"),
    [("multiclass", "temperature"), ("binary", "temperature"), ("binary", "platt")],
)
def test_calibrated_models_with_500_eval_rows_rarely_fail(task: str, method: str) -> None:
    rng = np.random.default_rng(17)
    runs = 120
    failed = sum(
        evaluate_gate(contract_of(task, method, rng, 500), REQUEST, "measured").decision == "fail"
        for _ in range(runs)
    )
    assert failed / runs <= 0.08


@pytest.mark.parametrize("task", ["multiclass", "binary"])
def test_models_at_twice_max_ece_fail(task: str) -> None:
    rng = np.random.default_rng(18)
    runs = 40
    key = "logits" if task == "multiclass" else "scores"
    failed = 0
    for _ in range(runs):
        contract = contract_of(task, "temperature", rng, 1000)
        inputs, labels = SCENARIOS[(task, 0.10)].draw(rng, 3000)
        drifted = replace(REQUEST, evaluation={key: inputs.tolist(), "labels": labels.tolist()})
        failed += evaluate_gate(contract, drifted, "measured").decision == "fail"
    assert failed / runs >= 0.95
