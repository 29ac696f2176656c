"""How far a window's confidences and labels moved from the baseline's: PSI, its no-shift level
and a chi-square test of homogeneity of the confidence bins, and the labels' total variation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2

from service.calibration._checks import FloatArray, float_array, non_negative_number
from service.calibration.errors import CalibrationInputError

PSI_EPSILON = 1e-4
#: Adjacent bins are merged for the shift test until each expects this many rows of the
#: smaller sample, so the chi-square approximation holds.
SHIFT_MIN_EXPECTED = 5.0


def _distribution(counts: Any, field: str) -> np.ndarray:
    c = float_array(counts, field, 1)
    if (c < 0).any():
        raise CalibrationInputError(field, "counts must be >= 0")
    total = c.sum()
    if total <= 0:
        raise CalibrationInputError(field, "needs at least one count")
    return c / total


def population_stability_index(
    expected_counts: Any, actual_counts: Any, epsilon: float = PSI_EPSILON
) -> float:
    """Return ``sum_m (a_m - e_m) * ln(a_m / e_m)`` over two (M,) count vectors.

    Both are normalised to proportions and smoothed as ``(q_m + epsilon) / (1 + M * epsilon)``,
    so an empty bin on either side contributes a large but finite term; 0 means identical.
    """
    e = _distribution(expected_counts, "expected_counts")
    a = _distribution(actual_counts, "actual_counts")
    if e.shape != a.shape:
        raise CalibrationInputError("actual_counts", f"must have shape {e.shape}, got {a.shape}")
    eps = non_negative_number(epsilon, "epsilon")
    if eps == 0.0 and ((e == 0) | (a == 0)).any():
        raise CalibrationInputError("epsilon", "must be > 0 when a bin is empty")
    scale = 1.0 + e.size * eps
    e = (e + eps) / scale
    a = (a + eps) / scale
    return float(np.sum((a - e) * np.log(a / e)))


def total_variation(p_counts: Any, q_counts: Any) -> float:
    """Return ``0.5 * sum |p - q|`` between two (K,) count vectors after normalising each."""
    p = _distribution(p_counts, "p_counts")
    q = _distribution(q_counts, "q_counts")
    if p.shape != q.shape:
        raise CalibrationInputError("q_counts", f"must have shape {p.shape}, got {q.shape}")
    return float(0.5 * np.abs(p - q).sum())


@dataclass(frozen=True)
class ConfidenceShift:
    """How far the window's confidence distribution moved from the baseline's.

    ``psi`` is ``population_stability_index(baseline, window)``; ``no_shift`` its expected value
    when both samples come from one distribution, ``(M' - 1) (1 / n_b + 1 / n_w)`` over the M'
    bins either sample occupies (PSI is then about that multiple of a chi-square; below a few
    hundred rows the smoothing of empty bins adds to it: at 50 rows PSI averages about 1.45
    times ``no_shift``); ``p_value``
    is the chi-square test of homogeneity of the two count vectors, adjacent bins merged until
    each expects ``SHIFT_MIN_EXPECTED`` rows of the smaller sample.
    """

    psi: float
    no_shift: float
    p_value: float


def confidence_shift(baseline_counts: Any, window_counts: Any) -> ConfidenceShift:
    """Compare two (M,) confidence-bin count vectors (see ``ConfidenceShift``)."""
    b = float_array(baseline_counts, "baseline_counts", 1)
    w = float_array(window_counts, "window_counts", 1)
    psi = population_stability_index(b, w)
    nb, nw = float(b.sum()), float(w.sum())
    occupied = int(np.count_nonzero(b + w))
    scale = 1.0 / nb + 1.0 / nw
    return ConfidenceShift(psi, (occupied - 1) * scale, _homogeneity_p_value(b, w))


def _homogeneity_p_value(b: FloatArray, w: FloatArray) -> float:
    total = b + w
    share = min(b.sum(), w.sum()) / total.sum()
    groups: list[tuple[float, float]] = []
    pending = np.zeros(2)
    for pair in np.column_stack([b, w]):
        pending = pending + pair
        if pending.sum() * share >= SHIFT_MIN_EXPECTED:
            groups.append((pending[0], pending[1]))
            pending = np.zeros(2)
    if pending.sum() > 0:
        if groups:
            last = groups.pop()
            groups.append((last[0] + pending[0], last[1] + pending[1]))
        else:
            groups.append((pending[0], pending[1]))
    if len(groups) < 2:
        return 1.0
    table = np.array(groups).T
    expected = table.sum(axis=0) * (table.sum(axis=1, keepdims=True) / table.sum())
    statistic = float(((table - expected) ** 2 / expected).sum())
    return float(chi2.sf(statistic, len(groups) - 1))
