"""What per-bin statistics say about the true binned ECE: a debiased estimate, a 95% interval
and a test of perfect calibration, from bin counts, confidence sums and success counts alone.

Notation, per occupied bin m of M: ``n_m`` rows, mean confidence ``c_m``, observed frequency
``a_m``, gap ``d_m = c_m - a_m`` and weight ``w_m = n_m / N``. The plug-in ``ECE = sum w_m |d_m|``
estimates the true binned ECE ``theta = sum w_m |delta_m|`` (``delta_m`` the bin's true gap
between mean confidence and the probability of success) and is biased upward: noise in ``d_m``
only ever adds to ``|d_m|``, by about ``0.8 sqrt(a_m (1 - a_m) / n_m)`` per bin at ``delta_m = 0``.

Everything here inverts one distribution: the plug-in ECE of a "world" in which bin m's
successes are Binomial(n_m, c_m - delta_m) and the bin counts Multinomial(N, w). Its first three
cumulants are exact sums over bins (the moments of ``|c_m - k / n_m|``: exact binomial sums for
bins of at most 100 rows, folded-normal moments above) plus the first-order variance of the
weights; a Cornish-Fisher expansion turns them into quantiles. Worlds are indexed by their true
ECE theta:

* ``shrunk`` worlds move each observed gap toward 0 by the same number of standard errors
  (soft thresholding), keeping the bins whose gap stands out of the noise. They carry more
  upward bias than most configurations with the same theta, so bounds read against them are
  conservative from below. The **lower bound** is the smallest theta whose world puts the
  observed ECE at or below its 98.75% quantile; ``debiased`` (median-unbiased) the theta whose
  world has the observed ECE as its median.
* ``spread`` worlds give every bin the same gap in standard errors, the configuration with the
  least upward bias for a given theta. The **upper bound** is the largest theta whose world
  puts the observed ECE at or above its 2.5% quantile (an observed ECE below the median of a
  perfectly calibrated world counts as that median, so the bound never claims more precision
  than a typical calibrated sample of the same size gives).

The ECE is at least the calibration-in-the-large gap ``|sum w_m d_m|`` (one bin, no folding
bias), so the lower bound is the larger of the two bounds, each at half the error (98.75%).
``p_value`` tests perfect calibration (every ``delta_m = 0``), Bonferroni over the same two
statistics. Coverage of the interval, by simulation, is in docs/calibration.md. No random
numbers: the same statistics always give the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, ndtr, ndtri, xlog1py, xlogy

from service.calibration._checks import FloatArray
from service.calibration.errors import CalibrationInputError

LEVEL = 0.95
#: Bins with at most this many rows use exact binomial moments, larger ones the normal limit.
EXACT_ROWS = 100
_K = np.arange(EXACT_ROWS + 1, dtype=np.float64)
_GRID = 48
_PASSES = 3
_TINY = 1e-12
#: Mean confidences are rounded to this many decimals first, so the answer does not depend on
#: the order in which rows (or buckets) were summed.
_MEAN_DIGITS = 10
#: Skewness is clipped to +-1 so the Cornish-Fisher quantile stays increasing for |z| <= 3.
_MAX_SKEW = 1.0
_NAN = float("nan")


@dataclass(frozen=True)
class EceInference:
    """The plug-in ECE, what it says about the true binned ECE, and a calibration test.

    ``gap`` is the signed calibration-in-the-large ``sum w_m d_m`` (mean confidence minus mean
    success: > 0 over-confident). ``p_value`` is the p-value of "every bin is calibrated".
    All NaN when there are no rows.
    """

    ece: float
    debiased: float
    lower: float
    upper: float
    gap: float
    p_value: float

    @property
    def interval(self) -> tuple[float, float]:
        """``(lower, upper)``."""
        return (self.lower, self.upper)


def infer_ece(
    counts: Any, confidence_sums: Any, success_counts: Any, *, level: float = LEVEL
) -> EceInference:
    """Infer the true binned ECE from per-bin (M,) counts, confidence sums and successes.

    ``level`` is the two-sided coverage of ``(lower, upper)``. Deterministic; N = 0 gives NaN.
    """
    n, c, k = _bin_arrays(counts, confidence_sums, success_counts)
    if not 0.5 < level < 1.0:
        raise CalibrationInputError("level", "must lie strictly between 0.5 and 1")
    if n.size == 0:
        return EceInference(_NAN, _NAN, _NAN, _NAN, _NAN, _NAN)
    return _Evidence(n, c, k).infer(1.0 - level)


def _bin_arrays(counts: Any, sums: Any, successes: Any) -> tuple[FloatArray, ...]:
    n = np.asarray(counts, dtype=np.float64)
    s = np.asarray(sums, dtype=np.float64)
    k = np.asarray(successes, dtype=np.float64)
    if not (n.ndim == 1 and s.shape == n.shape and k.shape == n.shape):
        raise CalibrationInputError("counts", "counts, sums and successes must be (M,) arrays")
    if not (np.isfinite(n).all() and np.isfinite(s).all() and np.isfinite(k).all()):
        raise CalibrationInputError("counts", "counts, sums and successes must be finite")
    if (n < 0).any() or (k < 0).any() or (k > n).any() or (s < 0).any() or (s > n * 1.000001).any():
        raise CalibrationInputError("counts", "need 0 <= successes <= counts, 0 <= sums <= counts")
    keep = n > 0
    size = n[keep]
    mean = np.round(np.clip(s[keep] / size, 0.0, 1.0), _MEAN_DIGITS).astype(np.float64)
    return size, mean, k[keep]


class _Evidence:
    """The observed bins and the distribution of their plug-in ECE in any world."""

    def __init__(self, n: FloatArray, c: FloatArray, k: FloatArray) -> None:
        self.n, self.c = n, c
        self.N = float(n.sum())
        a = k / n
        self.d = c - a
        self.w = n / self.N
        self.ece = float(self.w @ np.abs(self.d))
        self.gap = float(self.w @ self.d)
        spread = np.maximum(c * (1.0 - c), a * (1.0 - a))
        self.noise = np.sqrt((spread + 1.0 / n) / n)
        self.gap_sd = math.sqrt(float(n @ spread)) / self.N
        self.null_gap_sd = math.sqrt(float(n @ (c * (1.0 - c)))) / self.N
        self.moments = _Moments(c, n)

    def infer(self, alpha: float) -> EceInference:
        lower_z = float(ndtri(1.0 - alpha / 4.0))
        shrunk_lower = self._smallest_shrunk(lower_z)
        shrunk_median = self._smallest_shrunk(0.0)
        in_the_large = max(0.0, abs(self.gap) - float(ndtri(1.0 - alpha / 8.0)) * self.gap_sd)
        debiased = max(shrunk_median, _folded_median_inverse(abs(self.gap), self.gap_sd))
        upper = max(self._largest_spread(float(ndtri(1.0 - alpha / 2.0))), debiased)
        return EceInference(
            ece=self.ece,
            debiased=debiased,
            lower=max(shrunk_lower, in_the_large),
            upper=upper,
            gap=self.gap,
            p_value=self._calibration_p_value(),
        )

    def cumulants(self, delta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Mean, variance and third cumulant of the plug-in ECE in the worlds ``delta`` (G, M)."""
        p = np.clip(self.c - delta, 0.0, 1.0)
        gap = self.c - p
        m1, m2, m3 = self.moments(p)
        w = self.w
        mean = m1 @ w
        var = np.maximum(m2 - m1 * m1, 0.0) @ (w * w)
        weights = np.maximum((gap * gap) @ w - (np.abs(gap) @ w) ** 2, 0.0) / self.N
        third = (m3 - 3.0 * m1 * m2 + 2.0 * m1**3) @ (w**3)
        return mean, var + weights, third

    def quantile(self, delta: FloatArray, z: float) -> FloatArray:
        """Cornish-Fisher ``z``-quantile of the plug-in ECE in the worlds ``delta`` (G, M)."""
        mean, var, third = self.cumulants(delta)
        sd = np.sqrt(var)
        skew = np.divide(third, sd**3, out=np.zeros_like(sd), where=sd > _TINY)
        return mean + sd * (z + (z * z - 1.0) * np.clip(skew, -_MAX_SKEW, _MAX_SKEW) / 6.0)

    def _shrunk(self, lam: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Worlds with every |gap| cut by ``lam`` standard errors; their true ECEs."""
        a = np.abs(self.d)
        cut = np.maximum(a - lam[:, None] * self.noise, 0.0)
        return np.sign(self.d) * cut, cut @ self.w

    def _spread(self, mu: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Worlds with a gap of ``mu`` standard errors in every bin; their true ECEs.

        Each gap points the way the observed one does (over- or under-confident); a bin with no
        observed gap gets the direction with more room.
        """
        sign = np.where(self.d > 0.0, 1.0, np.where(self.d < 0.0, -1.0, np.sign(self.c - 0.5)))
        sign = np.where(sign == 0.0, 1.0, sign)
        delta = sign * mu[:, None] * self.noise
        p = np.clip(self.c - delta, 0.0, 1.0)
        return delta, np.abs(self.c - p) @ self.w

    def _smallest_shrunk(self, z: float) -> float:
        """Smallest theta of a shrunk world whose z-quantile reaches the observed ECE."""
        lam_max = float((np.abs(self.d) / self.noise).max())
        if lam_max == 0.0 or self.ece <= self.quantile(self._shrunk(np.array([lam_max]))[0], z)[0]:
            return 0.0
        return self._crossing(self._shrunk, z, 0.0, lam_max, decreasing=True)

    def _largest_spread(self, z: float) -> float:
        """Largest theta of a spread world whose lower z-quantile stays at the observed ECE.

        An observed ECE below the median of perfectly calibrated worlds counts as that median:
        data that look better than typical cannot rule out more than typical data can.
        """
        mu_max = float((np.maximum(self.c, 1.0 - self.c) / self.noise).max())
        calibrated = self._spread(np.array([0.0]))[0]
        observed = max(self.ece, float(self.quantile(calibrated, 0.0)[0]))
        return self._crossing(self._spread, -z, 0.0, mu_max, decreasing=False, observed=observed)

    def _crossing(
        self,
        world: Callable[[FloatArray], tuple[FloatArray, FloatArray]],
        z: float,
        lo: float,
        hi: float,
        *,
        decreasing: bool,
        observed: float | None = None,
    ) -> float:
        """Theta where the world's z-quantile crosses the observed ECE, by grid refinement.

        ``world(t)`` maps a parameter grid to worlds whose true ECE rises with ``t``
        (``decreasing``: falls); returns the theta of the last grid point whose quantile is on
        the far side of ``observed`` (default: the observed ECE): above it for a decreasing
        family, below otherwise.
        """
        target = self.ece if observed is None else observed
        theta = 0.0
        for _ in range(_PASSES):
            grid = np.linspace(lo, hi, _GRID)
            delta, thetas = world(grid)
            below = self.quantile(delta, z) <= target
            if decreasing:
                i = int(np.argmax(below)) if below.any() else _GRID
                lo, hi = grid[max(i - 1, 0)], grid[min(i, _GRID - 1)]
                theta = float(thetas[max(i - 1, 0)])
            else:
                i = int(np.flatnonzero(below).max()) if below.any() else 0
                lo, hi = grid[i], grid[min(i + 1, _GRID - 1)]
                theta = float(thetas[i])
        return theta

    def _calibration_p_value(self) -> float:
        mean, var, third = self.cumulants(np.zeros((1, self.n.size)))
        sd = math.sqrt(float(var[0]))
        if sd <= _TINY:
            fine = 1.0 if self.ece <= float(mean[0]) else 0.0
        else:
            x = (self.ece - float(mean[0])) / sd
            skew = min(max(float(third[0]) / sd**3, -_MAX_SKEW), _MAX_SKEW)
            fine = float(ndtr(-(x - (x * x - 1.0) * skew / 6.0)))
        if self.null_gap_sd == 0.0:
            coarse = 1.0 if self.gap == 0.0 else 0.0
        else:
            coarse = float(2.0 * ndtr(-abs(self.gap) / self.null_gap_sd))
        return min(1.0, 2.0 * min(fine, coarse))


def _folded_median_inverse(observed: float, sd: float) -> float:
    """The t >= 0 for which ``observed`` is the median of |N(t, sd^2)| (0 if none is)."""
    if sd == 0.0:
        return observed
    x = observed / sd
    if x <= float(ndtri(0.75)):
        return 0.0
    return sd * brentq(lambda t: float(ndtr(x - t) - ndtr(-x - t)) - 0.5, 0.0, x)


def _absolute_moments(c: FloatArray, p: FloatArray, n: FloatArray) -> tuple[FloatArray, ...]:
    """E|D|, E D^2, E|D|^3 of ``D = c - k / n`` with k ~ Binomial(n, p); (G, M) arrays.

    ``c`` and ``n`` are (M,) (or broadcast to (1, M)), ``p`` (G, M). Exact sums over k for bins
    of at most ``EXACT_ROWS`` rows; folded-normal moments of N(c - p, p (1 - p) / n) above (the
    normal limit of the binomial).
    """
    return _Moments(np.ravel(c), np.ravel(n))(np.atleast_2d(p))


class _Moments:
    """Absolute moments of ``c - k / n`` for fixed bins (c, n) and any success probabilities.

    The exact small-bin sums need ``|c - k / n|`` and the log binomial coefficients, which do
    not depend on p: they are computed once per set of bins.
    """

    def __init__(self, c: FloatArray, n: FloatArray) -> None:
        self.c, self.n = c, n
        self.small = np.flatnonzero(n <= EXACT_ROWS)
        rows = n[self.small][:, None]
        top = int(rows.max()) if self.small.size else 0
        k = np.arange(top + 1, dtype=np.float64)[None, :]
        inside = k <= rows
        self.k, self.rest = k, np.where(inside, rows - k, 0.0)
        self.log_choose = np.where(
            inside, gammaln(rows + 1.0) - gammaln(k + 1.0) - gammaln(self.rest + 1.0), -np.inf
        )
        dev = np.abs(c[self.small][:, None] - k / rows)
        self.powers = np.stack([dev, dev * dev, dev**3])

    def __call__(self, p: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        c, n = self.c, self.n
        gap = c - p
        var = p * (1.0 - p) / n
        sd = np.sqrt(var)
        noisy = sd > 0.0
        safe = np.where(noisy, sd, 1.0)
        mu = np.where(noisy, np.abs(gap) / safe, 0.0)
        phi = np.exp(-0.5 * mu * mu) * 0.3989422804014327
        signed = 1.0 - 2.0 * ndtr(-mu)
        a = np.abs(gap)
        m1 = np.where(noisy, sd * (mu * signed + 2.0 * phi), a)
        m2 = gap * gap + var
        folded3 = (mu**3 + 3.0 * mu) * signed + 2.0 * phi * (mu * mu + 2.0)
        m3 = np.where(noisy, var * sd * folded3, a**3)
        if self.small.size:
            q = p[:, self.small][:, :, None]
            log_pmf = self.log_choose + xlogy(self.k, q) + xlog1py(self.rest, -q)
            exact = np.einsum("gsk,jsk->jgs", np.exp(log_pmf), self.powers)
            m1[:, self.small], m2[:, self.small], m3[:, self.small] = exact
        return m1, m2, m3
