"""Wilson intervals and the bootstrap ECE interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.calibration import (
    CalibrationInputError,
    binary_stats,
    default_edges,
    ece_interval,
    ece_interval_from_bins,
    multiclass_reading,
    multiclass_stats,
    wilson_interval,
)


def test_wilson_known_values():
    lo, hi = wilson_interval(5, 10)
    assert (float(lo), float(hi)) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    lo, hi = wilson_interval(0, 10)
    z2 = 1.959963984540054**2
    assert float(lo) == 0.0 and float(hi) == pytest.approx(z2 / (10 + z2), abs=1e-15)
    lo, hi = wilson_interval(10, 10)
    assert float(hi) == 1.0 and float(lo) == pytest.approx(10 / (10 + z2), abs=1e-15)


def test_wilson_is_vectorised_and_handles_empty():
    lo, hi = wilson_interval(np.array([0, 3, 7]), np.array([0, 10, 7]))
    assert lo.shape == hi.shape == (3,)
    assert (lo[0], hi[0]) == (0.0, 1.0)
    assert hi[2] == 1.0


@pytest.mark.parametrize(("k", "n"), [(-1, 5), (6, 5), (float("nan"), 5)])
def test_wilson_rejects_bad_counts(k, n):
    with pytest.raises(CalibrationInputError):
        wilson_interval(k, n)


def test_ece_interval_is_deterministic_and_brackets_ece_away_from_zero():
    rng = np.random.default_rng(3)
    z = rng.normal(scale=3.0, size=(2000, 5))
    y = rng.integers(0, 5, size=2000)
    st = multiclass_stats(z, y, default_edges())
    a, b = ece_interval(st), ece_interval(st)
    assert a == b
    reading = multiclass_reading(z, y, default_edges())
    assert reading.ece_ci == a
    assert a[0] < reading.ece < a[1]
    assert ece_interval(st, seed=1) != a


def test_ece_interval_narrows_with_more_data():
    rng = np.random.default_rng(4)
    s = rng.random(40_000)
    y = (rng.random(40_000) < s * 0.8).astype(int)
    small = ece_interval(binary_stats(s[:400], y[:400], default_edges(10)))
    large = ece_interval(binary_stats(s, y, default_edges(10)))
    assert large[1] - large[0] < 0.5 * (small[1] - small[0])


def test_ece_interval_from_bins_by_hand():
    lo, hi = ece_interval_from_bins([100, 0, 100], [20.0, 0.0, 80.0], [20, 0, 80])
    assert 0.0 <= lo <= hi < 0.1
    assert all(math.isnan(x) for x in ece_interval_from_bins([0, 0], [0.0, 0.0], [0, 0]))
    with pytest.raises(CalibrationInputError):
        ece_interval_from_bins([1, 2], [0.5, 1.0], [2, 2])


def test_basic_interval_rarely_overshoots_the_true_ece_where_percentile_does():
    """True ECE 0.05 (every p understates the rate by 0.05), N = 1000, 15 bins.

    The plug-in ECE is biased upward; the percentile interval inherits the bias twice and its
    lower bound lands above the true value in about a fifth of the samples, which would make
    the alert rule fire at the threshold. The basic (reflected) interval does so rarely.
    """
    rng = np.random.default_rng(1)
    edges = default_edges(15)
    over = {"basic": 0, "percentile": 0}
    reps = 100
    for _ in range(reps):
        p = rng.beta(2.0, 5.0, size=1000)
        y = (rng.random(1000) < p + 0.05).astype(int)
        st = binary_stats(p, y, edges)
        for method in over:
            over[method] += ece_interval(st, method=method)[0] > 0.05
    assert over["basic"] / reps < 0.1
    assert over["percentile"] / reps > 0.1


def test_interval_method_is_validated():
    with pytest.raises(CalibrationInputError) as info:
        ece_interval_from_bins([1], [0.5], [1], method="bca")
    assert info.value.field == "method"
