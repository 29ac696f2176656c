"""Wilson intervals for bin frequencies."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from service.calibration import CalibrationInputError, wilson_interval
from service.calibration.intervals import Z_95


def test_z_95_is_the_two_sided_95_percent_normal_quantile():
    assert norm.ppf(0.975) == pytest.approx(Z_95, rel=1e-15)
    assert norm.cdf(Z_95) - norm.cdf(-Z_95) == pytest.approx(0.95, abs=1e-15)


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
