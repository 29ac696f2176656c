"""The review gate's error rates by seeded simulation: a smaller bench/bench_statistics.py.

Contracts fitted by calmon's own fit on calibrated rows are judged on their stored eval baseline;
a registered identity contract is judged on fresh evaluation sets whose true ECE is known; a
temperature fitted on a separable fit set stops on its bound and must fail.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from service.calibration import IdentityCalibrator
from service.contracts.labeled_sets import LabeledSet
from service.contracts.model import Contract
from service.gate.checks import evaluate_gate
from service.gate.requests import parse_gate_request
from tests.support.gate_simulation import simulated_contract
from tests.support.simulation import scenario


def contract_of(
    population: str, method: str, rng: np.random.Generator, rows: int, separable: bool = False
) -> Contract:
    """A contract calmon fits with ``method`` on ``rows`` calibrated rows (labels set to the
    top class when ``separable``), its baseline measured on as many fresh ones."""
    calibrated = scenario(population, "constant", 0.0)
    inputs, labels = calibrated.draw(rng, rows)
    if separable:
        labels = inputs.argmax(axis=1)
    held_out = LabeledSet(*calibrated.draw(rng, rows))
    return simulated_contract(population, method, LabeledSet(inputs, labels), held_out)


REQUEST = parse_gate_request({"contract_id": "simulated", "policy": {"max_ece": 0.05}})


def judged_on_fresh_sets(population, shape, level, rows, runs, seed):
    """Decisions of an identity contract on ``runs`` fresh evaluation sets of the scenario."""
    rng = np.random.default_rng(seed)
    contract = contract_of(population, "temperature", rng, 1000)
    contract = replace(contract, spec=replace(contract.spec, calibrator=IdentityCalibrator()))
    s = scenario(population, shape, level)
    key = "logits" if s.task == "multiclass" else "scores"
    decisions = []
    for _ in range(runs):
        inputs, labels = s.draw(rng, rows)
        request = replace(REQUEST, evaluation={key: inputs.tolist(), "labels": labels.tolist()})
        decisions.append(evaluate_gate(contract, request, "measured").decision)
    return decisions


@pytest.mark.slow
@pytest.mark.parametrize(
    ("population", "method"),
    [("k10", "temperature"), ("beta25", "temperature"), ("beta25", "platt")],
)
def test_calibrated_models_with_500_eval_rows_rarely_fail(population: str, method: str) -> None:
    rng = np.random.default_rng(17)
    runs = 100
    failed = sum(
        evaluate_gate(contract_of(population, method, rng, 500), REQUEST, "measured").decision
        == "fail"
        for _ in range(runs)
    )
    assert failed / runs <= 0.05


@pytest.mark.parametrize(
    ("population", "shape"), [("bimodal", "overconfident"), ("k10", "one_bin")]
)
def test_models_within_half_the_tolerance_rarely_fail(population: str, shape: str) -> None:
    decisions = judged_on_fresh_sets(population, shape, 0.5, 500, 60, seed=19)
    assert decisions.count("fail") / len(decisions) <= 0.05


@pytest.mark.parametrize(
    ("population", "shape"),
    [("bimodal", "overconfident"), ("beta25", "alternating"), ("k10", "overconfident")],
)
def test_models_at_twice_max_ece_fail(population: str, shape: str) -> None:
    """Balanced binary over-confidence on both sides of 1/2 included: its signed gaps cancel."""
    decisions = judged_on_fresh_sets(population, shape, 2.0, 3000, 30, seed=18)
    assert decisions.count("fail") / len(decisions) >= 0.95


def test_a_temperature_stopped_on_its_bound_fails_by_name() -> None:
    rng = np.random.default_rng(20)
    for _ in range(5):
        contract = contract_of("k10", "temperature", rng, 300, separable=True)
        outcome = evaluate_gate(contract, REQUEST, "measured")
        failed = {c.name for c in outcome.checks if not c.passed}
        assert contract.calibrator.to_dict()["temperature"] == pytest.approx(0.05, rel=1e-6)
        assert {"calibrator_bound", "nll_improvement"} <= failed
