"""The Turkish lecture's subscriber data as a fixture (tests/data/turkish_seed.csv).

The lecture's "kalibrasyon hatasi" is calmon's binary ECE on five equal-width bins.
Every number it prints that these rows can reproduce does reproduce (to its 4 decimals); its
600-step gradient-descent Platt fit happens to be converged here (gradient ~1e-12), which the
independent Nelder-Mead check below confirms. See docs/calibration.md.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from service.calibration import (
    PlattCalibrator,
    binary_auc,
    binary_reading,
    binary_stats,
    default_edges,
    fit_platt,
    reading_from_stats,
)

FIVE = default_edges(5)
REGIONS = {"kuzey", "guney", "dogu", "bati", "merkez"}


def r4(x):
    return round(x, 4)


def test_fixture_shape(turkish_seed):
    for split in turkish_seed.values():
        assert split.scores.shape == split.labels.shape == (252,)
        assert set(split.regions) <= REGIONS
        assert ((split.scores > 0) & (split.scores < 1)).all()
    assert turkish_seed["test"].labels.sum() == 61
    assert turkish_seed["validation"].labels.sum() == 47


def test_linear_model_reliability_on_test_rows(turkish_seed):
    test = turkish_seed["test"]
    r = binary_reading(test.scores, test.labels, FIVE)
    assert r4(r.ece) == 0.0242
    assert [b.n for b in r.bins] == [152, 53, 23, 16, 8]
    assert [r4(b.mean_confidence) for b in r.bins] == [0.0891, 0.2837, 0.4918, 0.7079, 0.8698]
    assert [r4(b.accuracy) for b in r.bins] == [0.1053, 0.3019, 0.4783, 0.6250, 1.0]
    assert r4(r.auc) == 0.8058
    assert r4(r.mean_score) == 0.2309
    assert r4(r.prevalence) == 0.2421


def test_sharpened_score_same_ranking_worse_calibration(turkish_seed):
    test = turkish_seed["test"]
    r = binary_reading(test.sharpened, test.labels, FIVE)
    assert r4(r.ece) == 0.1512
    assert [b.n for b in r.bins] == [204, 10, 7, 8, 23]
    assert [r4(b.mean_confidence) for b in r.bins] == [0.0199, 0.3033, 0.4756, 0.7001, 0.9509]
    assert [r4(b.accuracy) for b in r.bins] == [0.1569, 0.3000, 0.8571, 0.3750, 0.7391]
    assert r4(r.auc) == 0.8058
    assert binary_auc(test.sharpened, test.labels) == binary_auc(test.scores, test.labels)
    assert r4(r.mean_score) == 0.1504


def test_histogram_auc_close_to_exact(turkish_seed):
    test = turkish_seed["test"]
    stats = binary_stats(test.scores, test.labels, FIVE)
    assert abs(reading_from_stats(stats).auc - 0.8058) < 5e-4


def test_constant_training_prevalence_baseline(turkish_seed):
    """The lecture's baseline says 168/756 (its training prevalence, 0.2222) to everyone."""
    test = turkish_seed["test"]
    r = binary_reading(np.full(252, 168 / 756), test.labels, FIVE)
    assert r4(r.ece) == 0.0198
    assert r.auc == 0.5


def independent_platt(z, y):
    """Derivative-free Nelder-Mead on the same log loss, written without the core's helpers."""

    def loss(w):
        u = w[0] * z + w[1]
        return np.mean(np.logaddexp(0.0, u) - y * u)

    res = minimize(loss, [1.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-12, "fatol": 1e-16})
    return res.x


@pytest.mark.parametrize(
    ("fit_split", "slope", "intercept", "test_ece"),
    [("validation", 0.3013, -0.3695, 0.0463), ("test", 0.3038, -0.0043, 0.0208)],
)
def test_platt_on_sharpened_score(turkish_seed, fit_split, slope, intercept, test_ece):
    fit_rows, test = turkish_seed[fit_split], turkish_seed["test"]
    fit = fit_platt(fit_rows.sharpened, fit_rows.labels)
    assert (r4(fit.slope), r4(fit.intercept)) == (slope, intercept)
    assert fit.nll_after < fit.nll_before

    clipped = np.clip(fit_rows.sharpened, 1e-6, 1 - 1e-6)
    a, b = independent_platt(np.log(clipped / (1 - clipped)), fit_rows.labels)
    assert fit.slope == pytest.approx(a, abs=1e-6)
    assert fit.intercept == pytest.approx(b, abs=1e-6)

    after = binary_reading(
        test.sharpened, test.labels, FIVE, PlattCalibrator(fit.slope, fit.intercept)
    )
    assert r4(after.ece) == test_ece
    assert r4(after.auc) == 0.8058
