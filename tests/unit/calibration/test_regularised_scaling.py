"""Vector and matrix scaling choose their penalty by cross-validation inside the fit set: on a
small fit set of an already calibrated model they do not make held-out NLL worse, and on a
miscalibrated model they still calibrate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.calibration.multiclass_families import MatrixCalibrator, VectorCalibrator
from service.calibration.odir import STRENGTHS, fit_odir
from service.calibration.probabilities import log_softmax

K = 10
#: The signal of the simulated model: its uncalibrated NLL is about 0.244 nats.
SIGNAL = 3.11


def _calibrated_model(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits ``m x`` with ``x ~ N(m e_y, I)`` and uniform labels: ``softmax(m x)`` is the
    exact posterior of the label, so the model is calibrated."""
    y = rng.integers(K, size=n)
    x = rng.normal(size=(n, K))
    x[np.arange(n), y] += SIGNAL
    return SIGNAL * x, y


def _row_nll(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -log_softmax(logits)[np.arange(y.size), y]


@pytest.mark.parametrize("family", [VectorCalibrator, MatrixCalibrator], ids=["vector", "matrix"])
def test_scaling_fitted_on_600_rows_of_k10_is_no_worse_than_the_uncalibrated_model(family):
    rng = np.random.default_rng(42)
    fit_logits, fit_labels = _calibrated_model(rng, 600)
    eval_logits, eval_labels = _calibrated_model(rng, 3000)
    before = _row_nll(eval_logits, eval_labels)
    assert 0.22 < before.mean() < 0.27
    calibrator = family.fit(fit_logits, fit_labels)
    after = _row_nll(calibrator.logits(eval_logits), eval_labels)
    d = after - before
    se = d.std(ddof=1) / math.sqrt(d.size)
    # No worse beyond the noise of the paired difference, and by at most 0.002 nats.
    assert d.mean() <= 2 * se, (after.mean(), before.mean(), se)
    assert after.mean() <= before.mean() + 0.002
    # Nor far better on its own fit rows than on held-out ones.
    fit_gain = (
        _row_nll(fit_logits, fit_labels).mean()
        - _row_nll(calibrator.logits(fit_logits), fit_labels).mean()
    )
    assert fit_gain < 0.01


def test_a_miscalibrated_model_is_still_calibrated_at_a_weaker_penalty():
    rng = np.random.default_rng(7)
    shift = np.linspace(-2.0, 2.0, K)  # a class-wise bias and overconfidence
    fit_logits, fit_labels = _calibrated_model(rng, 1500)
    eval_logits, eval_labels = _calibrated_model(rng, 3000)
    before = _row_nll(2.0 * eval_logits + shift, eval_labels).mean()
    for family, full in ((VectorCalibrator, False), (MatrixCalibrator, True)):
        fitted = fit_odir(log_softmax(2.0 * fit_logits + shift), fit_labels, full)
        assert fitted.strength < STRENGTHS[0]
        calibrator = family.fit(2.0 * fit_logits + shift, fit_labels)
        after = _row_nll(calibrator.logits(2.0 * eval_logits + shift), eval_labels).mean()
        truth = _row_nll(eval_logits, eval_labels).mean()
        # Most of the NLL the miscalibration costs is recovered.
        assert after - truth < 0.2 * (before - truth), (family, after, truth, before)


def test_fits_are_deterministic_and_record_each_strengths_out_of_fold_nll():
    rng = np.random.default_rng(3)
    logits, labels = _calibrated_model(rng, 400)
    features = log_softmax(logits)
    first, second = fit_odir(features, labels, True), fit_odir(features, labels, True)
    assert np.array_equal(first.weights, second.weights)
    assert np.array_equal(first.bias, second.bias)
    losses = first.out_of_fold_nll
    lowest = min(losses, key=lambda s: losses[s])
    # The one-standard-error rule: no weaker than the lowest, at no lower out-of-fold NLL.
    assert first.strength >= lowest and losses[first.strength] >= losses[lowest]
    assert list(first.out_of_fold_nll) == list(STRENGTHS[: len(first.out_of_fold_nll)])


def test_a_fit_set_too_small_to_cross_validate_takes_the_strongest_penalty():
    rng = np.random.default_rng(4)
    logits, labels = _calibrated_model(rng, 9)
    fitted = fit_odir(log_softmax(logits), labels, True)
    assert fitted.strength == STRENGTHS[0] and fitted.out_of_fold_nll == {}
