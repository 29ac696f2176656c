"""The gate's NLL rule (``nll_comparison.judge_nll``) and the truth it is measured against."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from service.calibration import TemperatureCalibrator
from service.calibration.nll_comparison import NLL_MARGIN, NllDifference, judge_nll
from service.calibration.stats import row_nll
from tests.support.gate_simulation import expected_row_nll, label_distribution
from tests.support.simulation import POPULATIONS, Scenario


def test_the_margin_is_a_share_of_the_uncalibrated_log_loss() -> None:
    difference = NllDifference(3000, 0.012, 0.2, lower_bound=0.0051)
    judged = judge_nll(difference, 0.5)
    assert judged.tolerance == pytest.approx(NLL_MARGIN * 0.5) == pytest.approx(0.005)
    assert judged.worse and judged.lower_bound == 0.0051
    assert not judge_nll(difference, 0.52).worse


def test_a_summary_without_its_bound_falls_back_to_student_t() -> None:
    difference = NllDifference(100, 0.05, 0.1)
    judged = judge_nll(difference, 1.0)
    expected = 0.05 - float(student_t.ppf(0.975, 99)) * 0.1 / 10.0
    assert judged.lower_bound == pytest.approx(expected)
    assert judged.worse == (expected > 0.01)
    assert not judge_nll(NllDifference(1, 5.0, 0.0), 1.0).worse


@pytest.mark.parametrize(("population", "amplitude"), [("beta25", 1.0), ("k10", 1.0)])
def test_the_truth_is_the_mean_log_loss_of_labels_drawn_from_it(
    population: str, amplitude: float
) -> None:
    scenario = Scenario(POPULATIONS[population], "overconfident", amplitude)
    rng = np.random.default_rng(5)
    inputs, _ = scenario.population.draw_inputs(rng, 2000)
    truth = label_distribution(scenario, inputs)
    if truth.ndim == 2:
        assert np.allclose(truth.sum(axis=1), 1.0)
    calibrator = TemperatureCalibrator(1.7)
    expected = expected_row_nll(scenario.task, inputs, truth, calibrator)
    draws = 400
    tiled = np.repeat(inputs, draws, axis=0)
    if tiled.ndim == 1:
        confidence = tiled
    else:
        confidence = 1.0 / np.exp(tiled - tiled.max(axis=1, keepdims=True)).sum(axis=1)
    labels = scenario._labels(rng, tiled, confidence)
    sampled = row_nll(scenario.task, tiled, labels, calibrator).reshape(len(inputs), draws)
    spread = sampled.std() / math.sqrt(sampled.size)
    assert abs(sampled.mean() - expected.mean()) < 4 * spread
