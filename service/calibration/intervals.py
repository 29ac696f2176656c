"""Uncertainty: Wilson intervals for bin frequencies and a bootstrap interval for the ECE.

The ECE interval needs only the additive per-bin statistics (counts, sums of confidence, counts
of successes), so the interval of a rolling window comes from summed buckets without raw rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.calibration._checks import FloatArray
from service.calibration.errors import CalibrationInputError
from service.calibration.stats import CalibrationStats

Z_95 = 1.959963984540054
BOOTSTRAP_SEED = 20260218
BOOTSTRAP_REPLICATES = 1000


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


def ece_interval_from_bins(
    counts: Any,
    confidence_sums: Any,
    success_counts: Any,
    *,
    level: float = 0.95,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
    method: str = "basic",
) -> tuple[float, float]:
    """Return a bootstrap interval for the ECE from per-bin (M,) statistics.

    Parametric bootstrap with a fixed ``numpy.random.PCG64(seed)`` generator, vectorised over
    replicates: bin counts ~ Multinomial(N, n_m / N); successes in bin m ~ Binomial(n*_m,
    observed frequency of bin m); each bin's mean confidence held at its observed value;
    ECE* = sum_m |n*_m * mean_conf_m - successes*_m| / N, with quantiles q_lo, q_hi at
    ``(1 -+ level) / 2``.

    ``method="basic"`` (default) returns ``[2 ECE - q_hi, 2 ECE - q_lo]`` clipped to [0, 1]:
    the plug-in ECE is biased upward and resampling around it adds that bias a second time,
    which the reflection takes out (docs/calibration.md shows the coverage). ``"percentile"``
    returns ``[q_lo, q_hi]``. Deterministic for the same inputs; N = 0 gives (nan, nan).
    """
    n_m = np.asarray(counts, dtype=np.int64)
    conf = np.asarray(confidence_sums, dtype=np.float64)
    hits = np.asarray(success_counts, dtype=np.int64)
    if not (n_m.ndim == 1 and conf.shape == n_m.shape and hits.shape == n_m.shape):
        raise CalibrationInputError("counts", "counts, sums and successes must be (M,) arrays")
    if (n_m < 0).any() or (hits < 0).any() or (hits > n_m).any() or not np.isfinite(conf).all():
        raise CalibrationInputError("counts", "need 0 <= successes <= counts and finite sums")
    if not 0.0 < level < 1.0:
        raise CalibrationInputError("level", "must lie strictly between 0 and 1")
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 1:
        raise CalibrationInputError("replicates", "must be an integer >= 1")
    if method not in ("basic", "percentile"):
        raise CalibrationInputError("method", "must be 'basic' or 'percentile'")
    N = int(n_m.sum())
    if N == 0:
        return (float("nan"), float("nan"))
    keep = n_m > 0
    size = n_m[keep]
    mean_conf = conf[keep] / size
    freq = hits[keep] / size
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.multinomial(N, size / N, size=replicates)
    successes = rng.binomial(draws, freq)
    replicated = np.abs(draws * mean_conf - successes).sum(axis=1) / N
    q_lo, q_hi = np.quantile(replicated, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    if method == "percentile":
        return (float(q_lo), float(q_hi))
    ece = float(np.abs(conf[keep] - hits[keep]).sum() / N)
    lo = min(max(2.0 * ece - q_hi, 0.0), 1.0)
    hi = min(max(2.0 * ece - q_lo, 0.0), 1.0)
    return (lo, hi)


def ece_interval(
    stats: CalibrationStats,
    *,
    level: float = 0.95,
    replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
    method: str = "basic",
) -> tuple[float, float]:
    """Return the bootstrap ECE interval of ``stats`` (see ``ece_interval_from_bins``)."""
    return ece_interval_from_bins(
        stats.bin_count,
        stats.bin_confidence_sum,
        stats.bin_correct_sum,
        level=level,
        replicates=replicates,
        seed=seed,
        method=method,
    )
