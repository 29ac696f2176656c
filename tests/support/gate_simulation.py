"""Simulated gate trials: the population truth of the gate's ``nll_improvement`` check (the
expected log loss of a calibrator, and of the uncalibrated model, over a simulated population)
and contracts fitted by calmon on simulated rows, judged by the gate.

A scenario of ``tests.support.simulation`` knows every row's true label distribution, so the
expected per-row log loss of any calibrator is exact given the row's inputs:
``sum_k P(y = k | x) * nll(x, k)``, with ``nll`` the per-row loss calmon itself computes
(``stats.row_nll``: natural logs, calibrated probabilities floored at 1e-6, so one row costs at
most 13.8 nats). Averaged over a large sample of inputs, its only noise is that of the inputs
(no label noise).

``score_truth(scenario, calibrator, rng, rows)`` returns the calibrated and uncalibrated
population log loss, nats; ``delta`` is their difference (calibrated minus uncalibrated), the
quantity the check's paired test estimates. ``nll_trial`` fits a contract on rows of one
scenario, measures its held-out baseline on rows of another (the same, or the population the
model now serves), asks the gate, and returns the check beside that truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from service.calibration import Calibrator, DriftPolicy, IdentityCalibrator
from service.calibration._checks import FloatArray
from service.calibration.stats import row_nll
from service.calibration.vocabulary import Task
from service.common.errors import ErrorCollector
from service.contracts.fitting import fit_contract_spec
from service.contracts.labeled_sets import LabeledSet
from service.contracts.model import Contract
from service.contracts.requests import FitRequest, parse_spec_fields
from service.gate.checks import Check, evaluate_gate
from service.gate.requests import parse_gate_request
from tests.support.simulation import MAX_ECE, POPULATIONS, Scenario, _softmax

#: Inputs the truth is averaged over (fewer for many classes, as ``simulation.truth_rows``).
SCORE_TRUTH_ROWS = 200_000


@dataclass(frozen=True)
class ScoreTruth:
    """Population expected log loss (nats) of the calibrated and the uncalibrated model."""

    calibrated: float
    uncalibrated: float

    @property
    def delta(self) -> float:
        """Calibrated minus uncalibrated, nats: > 0 when the calibrator makes it worse."""
        return self.calibrated - self.uncalibrated

    @property
    def relative(self) -> float:
        """``delta`` as a share of the uncalibrated log loss."""
        return self.delta / self.uncalibrated


def label_distribution(scenario: Scenario, inputs: FloatArray) -> FloatArray:
    """Each row's true label distribution: (N,) P(positive) for binary scores, (N, K) class
    probabilities for logits (the top label with its true success probability, the others in
    proportion to the model's own probabilities, as ``Scenario.draw`` draws them)."""
    if scenario.task == Task.BINARY:
        return scenario._success(inputs, inputs)
    model = _softmax(inputs, 1.0)
    top = inputs.argmax(axis=1)
    rows = np.arange(len(top))
    success = scenario._success(inputs, model[rows, top])
    others = model.copy()
    others[rows, top] = 0.0
    total = others.sum(axis=1, keepdims=True)
    others = np.divide(others, total, out=np.zeros_like(others), where=total > 0.0)
    truth = others * (1.0 - success)[:, None]
    truth[rows, top] = success
    return truth


def expected_row_nll(
    task: str, inputs: FloatArray, truth: FloatArray, calibrator: Calibrator
) -> FloatArray:
    """(N,) each row's log loss under ``calibrator`` in expectation over its true label."""
    if task == Task.BINARY:
        ones, zeros = np.ones(len(inputs), np.int64), np.zeros(len(inputs), np.int64)
        positive = row_nll(task, inputs, ones, calibrator)
        negative = row_nll(task, inputs, zeros, calibrator)
        return truth * positive + (1.0 - truth) * negative
    out = np.zeros(len(inputs))
    for k in range(inputs.shape[1]):
        labels = np.full(len(inputs), k, dtype=np.int64)
        out += truth[:, k] * row_nll(task, inputs, labels, calibrator)
    return out


def score_truth(
    scenario: Scenario,
    calibrator: Calibrator,
    rng: np.random.Generator,
    rows: int = SCORE_TRUTH_ROWS,
) -> ScoreTruth:
    """The population log loss of ``calibrator`` and of the identity on ``scenario``."""
    rows = rows // max(1, scenario.population.classes // 10)
    inputs, _ = scenario.population.draw_inputs(rng, rows)
    truth = label_distribution(scenario, inputs)
    after = expected_row_nll(scenario.task, inputs, truth, calibrator)
    before = expected_row_nll(scenario.task, inputs, truth, IdentityCalibrator())
    return ScoreTruth(float(after.mean()), float(before.mean()))


#: The drift policy of simulated contracts (the gate reads its ``max_ece``).
SIMULATED_POLICY = DriftPolicy(max_ece=MAX_ECE, max_ece_increase=0.02, min_labeled=200)
_CREATED = datetime(2026, 2, 1, tzinfo=UTC)
_REQUEST = parse_gate_request({"contract_id": "simulated", "policy": {"max_ece": MAX_ECE}})


def spec_fields(population: str) -> dict[str, Any]:
    """The client-supplied contract fields of a simulated model (default policy)."""
    p = POPULATIONS[population]
    body: dict[str, Any] = {
        "model": "simulated",
        "checkpoint": "sha256:" + "ab" * 32,
        "task": p.task,
        "population": "simulated rows (bench/bench_statistics.py)",
        "outcome": "simulated labels",
        "data_window": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
        "split": {"method": "independent draws"},
        "bin_edges": list(p.edges),
        "policy": SIMULATED_POLICY.to_dict(),
    }
    if p.task == "multiclass":
        body["classes"] = [f"class{k}" for k in range(p.classes)]
    errors = ErrorCollector()
    fields = parse_spec_fields(body, errors)
    errors.raise_if_any("the simulated contract fields are invalid")
    return fields


def simulated_contract(
    population: str, method: str, fit: LabeledSet, held_out: LabeledSet
) -> Contract:
    """A contract calmon fits with ``method`` on ``fit``, its baseline measured on
    ``held_out``. Raises ``ValidationFailed`` when the fit fails."""
    spec = fit_contract_spec(FitRequest(spec_fields(population), method, fit, held_out))
    return Contract("simulated", 1, spec, _CREATED, "bench", "0" * 64)


@dataclass(frozen=True)
class NllTrial:
    """One contract's ``nll_improvement`` check (default policy) and its population truth."""

    check: Check
    truth: ScoreTruth


def nll_trial(
    population: str,
    method: str,
    fitted_on: Scenario,
    judged_on: Scenario,
    fit_rows: int,
    eval_rows: int,
    rng: np.random.Generator,
    truth_rows: int = SCORE_TRUTH_ROWS,
) -> NllTrial:
    """Fit ``method`` on ``fit_rows`` rows of ``fitted_on``, measure the held-out baseline on
    ``eval_rows`` rows of ``judged_on``, gate the contract on it; the truth is on ``judged_on``.
    Raises ``ValidationFailed`` when the fit fails."""
    fit = LabeledSet(*fitted_on.draw(rng, fit_rows))
    held_out = LabeledSet(*judged_on.draw(rng, eval_rows))
    contract = simulated_contract(population, method, fit, held_out)
    outcome = evaluate_gate(contract, _REQUEST, "measured")
    check = next(c for c in outcome.checks if c.name == "nll_improvement")
    return NllTrial(check, score_truth(judged_on, contract.calibrator, rng, truth_rows))
