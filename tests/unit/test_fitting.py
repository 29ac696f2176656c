"""Temperature and Platt fits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from service.calibration import (
    FitError,
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    binary_reading,
    default_edges,
    fit_binary_temperature,
    fit_platt,
    fit_temperature,
    multiclass_reading,
    refit_temperature,
)


def overconfident(seed, N=3000, K=4, T_true=2.5):
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=3.0, size=(N, K))
    p = np.exp(z / T_true)
    p /= p.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=row) for row in p])
    return z, y


def test_temperature_recovers_overconfidence():
    z, y = overconfident(0)
    fit = fit_temperature(z, y)
    assert 2.0 < fit.temperature < 3.0
    assert fit.nll_after < fit.nll_before
    assert fit.nll_before == pytest.approx(multiclass_reading(z, y, default_edges()).nll, abs=1e-12)
    calibrated = multiclass_reading(z, y, default_edges(), TemperatureCalibrator(fit.temperature))
    assert calibrated.nll == pytest.approx(fit.nll_after, abs=1e-12)


def test_temperature_matches_an_independent_search_to_1e6_in_log_t():
    z, y = overconfident(1, N=500)

    def nll(u):
        s = z / math.exp(u)
        s = s - s.max(axis=1, keepdims=True)
        return float(np.mean(np.log(np.exp(s).sum(axis=1)) - s[np.arange(len(y)), y]))

    ref = minimize_scalar(nll, bracket=(0.0, 1.0), method="brent", tol=1e-12)
    assert math.log(fit_temperature(z, y).temperature) == pytest.approx(ref.x, abs=1e-6)


def test_refit_on_calibrated_logits_is_one():
    z, y = overconfident(2)
    T = fit_temperature(z, y).temperature
    extra = refit_temperature(TemperatureCalibrator(T), z, y, task="multiclass")
    assert extra.temperature == pytest.approx(1.0, abs=1e-6)


def test_separable_data_hits_the_bound():
    fit = fit_temperature([[5.0, 0.0], [0.0, 5.0]], [0, 1])
    assert fit.at_bound and fit.temperature == pytest.approx(0.05, rel=1e-6)


def binary_data(seed, N=4000):
    rng = np.random.default_rng(seed)
    true_logit = rng.normal(scale=1.5, size=N)
    y = (rng.random(N) < 1 / (1 + np.exp(-true_logit))).astype(int)
    scores = 1 / (1 + np.exp(-(2.0 * true_logit + 0.5)))
    return scores, y


def test_platt_recovers_a_known_distortion():
    s, y = binary_data(5)
    fit = fit_platt(s, y)
    assert fit.slope == pytest.approx(0.5, abs=0.05)
    assert fit.intercept == pytest.approx(-0.25, abs=0.1)
    assert fit.nll_after < fit.nll_before
    assert fit.nll_before == pytest.approx(binary_reading(s, y, default_edges()).nll, abs=1e-12)
    after = binary_reading(s, y, default_edges(), PlattCalibrator(fit.slope, fit.intercept))
    assert after.nll == pytest.approx(fit.nll_after, abs=1e-12)
    clipped = np.clip(s, 1e-6, 1 - 1e-6)
    u = fit.slope * np.log(clipped / (1 - clipped)) + fit.intercept
    residual = 1 / (1 + np.exp(-u)) - y
    gradient = [np.mean(residual * np.log(clipped / (1 - clipped))), np.mean(residual)]
    assert np.abs(gradient).max() < 1e-9


def test_binary_temperature():
    s, y = binary_data(6)
    fit = fit_binary_temperature(s, y)
    assert fit.temperature == pytest.approx(2.0, rel=0.1)
    extra = refit_temperature(TemperatureCalibrator(fit.temperature), s, y, task="binary")
    assert extra.temperature == pytest.approx(1.0, abs=1e-6)
    assert refit_temperature(
        IdentityCalibrator(), s, y, task="binary"
    ).temperature == pytest.approx(fit.temperature, rel=1e-9)


@pytest.mark.parametrize(
    ("scores", "labels", "field"),
    [
        ([0.2, 0.4, 0.9], [1, 1, 1], "labels"),
        ([0.2, 0.4, 0.9], [0, 0, 0], "labels"),
        ([0.2, 0.4, 0.9], [0, 1, 1], "scores"),
        ([0.2, 0.4, 0.9], [1, 0, 0], "scores"),
        ([0.2, 0.4, 0.6, 0.9], [1, 1, 0, 0], "scores"),
    ],
    ids=["all-positive", "all-negative", "separated", "reversed", "reversed-4"],
)
def test_platt_fit_errors(scores, labels, field):
    with pytest.raises(FitError) as info:
        fit_platt(scores, labels)
    assert info.value.field == field


def test_platt_negative_slope_is_a_fit_error():
    s = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
    y = np.array([1, 1, 0, 1, 0, 1, 0, 0])
    with pytest.raises(FitError, match="not positive"):
        fit_platt(s, y)
