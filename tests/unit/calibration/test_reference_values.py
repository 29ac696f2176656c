"""Known answers: the reference values of the measures on two small multiclass sets, to 1e-6
(docs/calibration.md, "The seeds, checked")."""

from __future__ import annotations

import numpy as np
import pytest

from service.calibration import (
    TemperatureCalibrator,
    default_edges,
    fit_temperature,
    multiclass_reading,
)

Z1 = np.array([[3, 1, 0], [2.5, 1, 0], [3, 0.5, 0], [1.5, 2, 0], [0.5, 0, 1.5], [2, 2.2, 0]], float)
Y1 = np.array([0, 0, 1, 1, 2, 0])
Z2 = np.array([[2, 0.5, -0.5], [0.2, 1.8, -0.3], [2.5, 1.8, 0.2]])
Y2 = np.array([0, 1, 1])


def test_fitted_temperature_and_nll():
    fit = fit_temperature(Z1, Y1)
    assert fit.temperature == pytest.approx(1.229751, abs=1e-6)
    assert fit.nll_before == pytest.approx(0.822782, abs=1e-6)
    assert fit.nll_after == pytest.approx(0.812428, abs=1e-6)
    assert not fit.at_bound


def test_four_bin_ece_before_and_after_fit():
    edges = default_edges(4)
    T = fit_temperature(Z1, Y1).temperature
    before = multiclass_reading(Z1, Y1, edges)
    after = multiclass_reading(Z1, Y1, edges, TemperatureCalibrator(T))
    assert before.ece == pytest.approx(0.128759, abs=1e-6)
    assert after.ece == pytest.approx(0.380407, abs=1e-6)
    assert after.nll == pytest.approx(0.812428, abs=1e-6)


@pytest.mark.parametrize("T", [0.05, 0.3, 1.0, 1.229751, 4.0, 20.0])
def test_accuracy_is_four_sixths_at_every_temperature(T):
    reading = multiclass_reading(Z1, Y1, default_edges(4), TemperatureCalibrator(T))
    assert reading.accuracy == 4 / 6


@pytest.mark.parametrize(("T", "nll"), [(0.5, 0.579231), (1.0, 0.571774), (2.0, 0.735268)])
def test_nll_at_three_temperatures(T, nll):
    reading = multiclass_reading(Z2, Y2, default_edges(5), TemperatureCalibrator(T))
    assert reading.nll == pytest.approx(nll, abs=1e-6)


def test_five_bin_ece_and_brier():
    reading = multiclass_reading(Z2, Y2, default_edges(5))
    assert reading.ece == pytest.approx(0.049159, abs=1e-6)
    assert reading.brier == pytest.approx(0.350166, abs=1e-6)


def test_confident_wrong_prediction_scores_brier_two():
    reading = multiclass_reading([[60.0, 0.0, 0.0]], [1], default_edges())
    assert reading.brier == pytest.approx(2.0, abs=1e-12)
    assert reading.accuracy == 0.0
    assert reading.ece == pytest.approx(1.0, abs=1e-12)
