"""Uncertainty: Wilson intervals for bin frequencies, and the ECE interval of statistics.

The ECE interval needs only the additive per-bin statistics (counts, sums of confidence, counts
of successes), so the interval of a rolling window comes from summed buckets without raw rows;
``ece_inference`` holds the method.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.calibration._checks import FloatArray
from service.calibration.calibration_stats import CalibrationStats
from service.calibration.ece_inference import infer_ece
from service.calibration.errors import CalibrationInputError

#: The two-sided 95% normal quantile, ``scipy.stats.norm.ppf(0.975)``: every 95% interval's z.
Z_95 = 1.959963984540054


def wilson_interval(successes: Any, n: Any, z: float = Z_95) -> tuple[FloatArray, FloatArray]:
    """Return the Wilson score interval ``(lo, hi)`` of ``successes / n``, elementwise.

    Inputs broadcast; scalars give 0-d arrays (``float(lo)`` works). ``n = 0`` gives (0, 1).
    The bounds are exact at the ends: 0 successes give ``lo = 0``, ``n`` give ``hi = 1``.
    """
    k = np.asarray(successes, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    if not (np.isfinite(k).all() and np.isfinite(m).all()):
        raise CalibrationInputError("successes", "successes and n must be finite")
    if (k < 0).any() or (k > m).any():
        raise CalibrationInputError("successes", "must satisfy 0 <= successes <= n")
    if not (np.isfinite(z) and z > 0):
        raise CalibrationInputError("z", "must be a finite number > 0")
    safe = np.where(m > 0, m, 1.0)
    phat = k / safe
    z2n = z * z / safe
    centre = (phat + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * np.sqrt(phat * (1.0 - phat) / safe + z2n / (4.0 * safe))
    lo = np.clip(np.minimum(centre - half, phat), 0.0, 1.0)
    hi = np.clip(np.maximum(centre + half, phat), 0.0, 1.0)
    lo = np.where((k == 0) | (m == 0), 0.0, lo)
    hi = np.where((k == m) | (m == 0), 1.0, hi)
    return lo, hi


def ece_interval(stats: CalibrationStats, *, level: float = 0.95) -> tuple[float, float]:
    """Return the interval for the true binned ECE of ``stats`` (see ``ece_inference``)."""
    return infer_ece(
        stats.bin_count, stats.bin_confidence_sum, stats.bin_correct_sum, level=level
    ).interval
