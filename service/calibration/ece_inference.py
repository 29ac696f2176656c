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
ECE theta, and each bound is found by a safeguarded regula falsi (Illinois) on the world's
parameter, vectorised over many bin tables at once (``infer_ece_many``: a history of windows
costs one pass, not one per window):

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import gammaln, ndtr, ndtri

from service.calibration._checks import FloatArray, IntArray
from service.calibration.errors import CalibrationInputError

LEVEL = 0.95
#: Bins with at most this many rows use exact binomial moments, larger ones the normal limit.
EXACT_ROWS = 100
#: Exact sums are grouped by bin size so a 5-row bin sums 6 terms, not 101.
_TIERS = (12, 35, EXACT_ROWS)
_TINY = 1e-12
#: Mean confidences are rounded to this many decimals first, so the answer does not depend on
#: the order in which rows (or buckets) were summed.
_MEAN_DIGITS = 10
#: Skewness is clipped to +-1 so the Cornish-Fisher quantile stays increasing for |z| <= 3.
_MAX_SKEW = 1.0
#: The root finder stops when the world's parameter is known to this fraction of its range.
_TOLERANCE = 1e-10
_MAX_STEPS = 60
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


@dataclass(frozen=True)
class EceInferences:
    """``EceInference`` of S bin tables, field by field as (S,) arrays (NaN for empty ones)."""

    ece: FloatArray
    debiased: FloatArray
    lower: FloatArray
    upper: FloatArray
    gap: FloatArray
    p_value: FloatArray

    def __getitem__(self, i: int) -> EceInference:
        return EceInference(
            float(self.ece[i]),
            float(self.debiased[i]),
            float(self.lower[i]),
            float(self.upper[i]),
            float(self.gap[i]),
            float(self.p_value[i]),
        )


def infer_ece(
    counts: Any, confidence_sums: Any, success_counts: Any, *, level: float = LEVEL
) -> EceInference:
    """Infer the true binned ECE from per-bin (M,) counts, confidence sums and successes.

    ``level`` is the two-sided coverage of ``(lower, upper)``. Deterministic; N = 0 gives NaN.
    """
    tables = [_one_table(x) for x in (counts, confidence_sums, success_counts)]
    return infer_ece_many(*tables, level=level)[0]


def infer_ece_many(
    counts: Any, confidence_sums: Any, success_counts: Any, *, level: float = LEVEL
) -> EceInferences:
    """``infer_ece`` of S tables at once: (S, M) counts, confidence sums and successes."""
    n, c, k = _bin_arrays(counts, confidence_sums, success_counts)
    if not 0.5 < level < 1.0:
        raise CalibrationInputError("level", "must lie strictly between 0.5 and 1")
    if n.shape[1] == 0:
        nan = np.full(n.shape[0], np.nan)
        return EceInferences(nan, nan, nan, nan, nan, nan)
    return _Evidence(n, c, k).infer(1.0 - level)


def _occupied_first(
    n: FloatArray, c: FloatArray, k: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The tables cut to as many bins as the fullest one occupies: each row's occupied bins
    first, in their order, then empty ones (n = c = k = 0). An empty bin weighs nothing in any
    world, so every table's evidence is unchanged; sparse tables (short windows, a history's
    steps) cost the inference only the bins they use."""
    occupied = n > 0
    width = max(int(occupied.sum(axis=1).max()), 1)
    if width == n.shape[1]:
        return n, c, k
    order = np.argsort(~occupied, axis=1, kind="stable")[:, :width]
    pick = lambda table: np.take_along_axis(table, order, axis=1)  # noqa: E731
    return pick(n), pick(c), pick(k)


def _one_table(values: Any) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise CalibrationInputError("counts", "counts, sums and successes must be (M,) arrays")
    return array[None, :]


def _bin_arrays(counts: Any, sums: Any, successes: Any) -> tuple[FloatArray, ...]:
    """(S, M) counts, mean confidences (0 in empty bins, rounded) and success counts."""
    try:
        n = np.asarray(counts, dtype=np.float64)
        s = np.asarray(sums, dtype=np.float64)
        k = np.asarray(successes, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CalibrationInputError("counts", "counts, sums and successes must be numbers") from exc
    if not (n.ndim == 2 and s.shape == n.shape and k.shape == n.shape):
        raise CalibrationInputError("counts", "counts, sums and successes must be (S, M) arrays")
    if not (np.isfinite(n).all() and np.isfinite(s).all() and np.isfinite(k).all()):
        raise CalibrationInputError("counts", "counts, sums and successes must be finite")
    if (n < 0).any() or (k < 0).any() or (k > n).any() or (s < 0).any() or (s > n * 1.000001).any():
        raise CalibrationInputError("counts", "need 0 <= successes <= counts, 0 <= sums <= counts")
    safe = np.where(n > 0, n, 1.0)
    mean = np.where(n > 0, np.round(np.clip(s / safe, 0.0, 1.0), _MEAN_DIGITS), 0.0)
    return n, mean.astype(np.float64), k


class _Evidence:
    """S observed bin tables and the distribution of their plug-in ECE in any world.

    Three problems per table are solved side by side, stacked along the first axis: the
    shrunk world at the lower bound's quantile, the shrunk world at the median, and the spread
    world at the upper bound's quantile.
    """

    def __init__(self, n: FloatArray, c: FloatArray, k: FloatArray) -> None:
        self.S = n.shape[0]
        self.has_empty_bin = (n == 0).any(axis=1)
        n, c, k = _occupied_first(n, c, k)
        occupied = n > 0
        safe = np.where(occupied, n, 1.0)
        a = np.where(occupied, k / safe, 0.0)
        self.N = n.sum(axis=1)
        self.empty = self.N == 0
        total = np.where(self.empty, 1.0, self.N)
        self.n, self.c, self.w = n, c, n / total[:, None]
        self.d = np.where(occupied, c - a, 0.0)
        self.ece = (self.w * np.abs(self.d)).sum(axis=1)
        self.gap = (self.w * self.d).sum(axis=1)
        spread = np.maximum(c * (1.0 - c), a * (1.0 - a))
        self.noise = np.where(occupied, np.sqrt((spread + 1.0 / safe) / safe), 1.0)
        self.gap_sd = np.sqrt((n * spread).sum(axis=1)) / total
        self.null_gap_sd = np.sqrt((n * c * (1.0 - c)).sum(axis=1)) / total
        self.total = total

    def infer(self, alpha: float) -> EceInferences:
        S = self.S
        z = np.concatenate(
            [
                np.full(S, float(ndtri(1.0 - alpha / 4.0))),
                np.zeros(S),
                np.full(S, -float(ndtri(1.0 - alpha / 2.0))),
            ]
        )
        theta = _Problems(self, z).solve()
        shrunk_lower, shrunk_median, spread_upper = theta[:S], theta[S : 2 * S], theta[2 * S :]
        in_the_large = np.maximum(
            0.0, np.abs(self.gap) - float(ndtri(1.0 - alpha / 8.0)) * self.gap_sd
        )
        debiased = np.maximum(shrunk_median, _folded_median_inverse(np.abs(self.gap), self.gap_sd))
        nan = np.where(self.empty, np.nan, 0.0)
        return EceInferences(
            ece=self.ece + nan,
            debiased=debiased + nan,
            lower=np.maximum(shrunk_lower, in_the_large) + nan,
            upper=np.maximum(spread_upper, debiased) + nan,
            gap=self.gap + nan,
            p_value=self._calibration_p_value() + nan,
        )

    def _calibration_p_value(self) -> FloatArray:
        mean, var, third = _cumulants(
            _Moments(self.c, self.n), self.c, self.w, self.total, np.zeros_like(self.c)
        )
        sd = np.sqrt(var)
        shows = sd > _TINY
        x = np.divide(self.ece - mean, sd, out=np.zeros_like(sd), where=shows)
        skew = np.clip(
            np.divide(third, sd**3, out=np.zeros_like(sd), where=shows), -_MAX_SKEW, _MAX_SKEW
        )
        fine = np.where(
            shows, ndtr(-(x - (x * x - 1.0) * skew / 6.0)), np.where(self.ece <= mean, 1.0, 0.0)
        )
        noisy = self.null_gap_sd > 0.0
        coarse = np.where(
            noisy,
            2.0 * ndtr(-np.abs(self.gap) / np.where(noisy, self.null_gap_sd, 1.0)),
            np.where(self.gap == 0.0, 1.0, 0.0),
        )
        return np.minimum(1.0, 2.0 * np.minimum(fine, coarse))


class _Problems:
    """3S root-finding problems: the world parameter t where the z-quantile meets the target.

    Shrunk worlds (t = standard errors cut from every gap) lose ECE as t grows, so their
    quantile falls; the answer is the largest t whose quantile still reaches the observed ECE.
    Spread worlds (t = a gap of t standard errors in every bin) gain ECE as t grows; the answer
    is the largest t whose quantile stays at or below the target (the observed ECE, or the
    median of the calibrated world when that is larger).
    """

    def __init__(self, evidence: _Evidence, z: FloatArray) -> None:
        e = evidence
        stack: Callable[[FloatArray], FloatArray] = lambda x: np.concatenate([x, x, x])  # noqa: E731
        self.c, self.w, self.total = stack(e.c), stack(e.w), stack(e.total)
        self.d, self.noise, self.z = stack(e.d), stack(e.noise), z
        self.moments = _Moments(self.c, stack(e.n))
        self.shrunk = np.arange(3 * e.S) < 2 * e.S
        d = self.d
        toward_room = np.where(self.c >= 0.5, 1.0, -1.0)
        self.sign = np.where(d > 0.0, 1.0, np.where(d < 0.0, -1.0, toward_room))
        self.t_max = np.where(
            self.shrunk,
            (np.abs(d) / self.noise).max(axis=1),
            np.maximum(
                (np.maximum(self.c, 1.0 - self.c) / self.noise).max(axis=1),
                np.where(stack(e.has_empty_bin), 1.0, 0.0),
            ),
        )
        observed = stack(e.ece)
        everything = np.arange(3 * e.S)
        median = self.quantile(np.zeros(3 * e.S), np.zeros(3 * e.S), everything)
        self.target = np.where(self.shrunk, observed, np.maximum(observed, median))

    def worlds(self, t: FloatArray, rows: IntArray) -> tuple[FloatArray, FloatArray]:
        """The gaps (R, M) of problems ``rows`` at parameters ``t`` (R,), and their true ECEs."""
        c, d, noise = self.c[rows], self.d[rows], self.noise[rows]
        cut = np.maximum(np.abs(d) - t[:, None] * noise, 0.0)
        delta = np.where(
            self.shrunk[rows][:, None], np.sign(d) * cut, self.sign[rows] * t[:, None] * noise
        )
        p = np.clip(c - delta, 0.0, 1.0)
        return delta, (np.abs(c - p) * self.w[rows]).sum(axis=1)

    def quantile(self, t: FloatArray, z: FloatArray, rows: IntArray) -> FloatArray:
        """Cornish-Fisher z-quantiles of the plug-in ECE in the worlds at ``t``."""
        delta, _ = self.worlds(t, rows)
        mean, var, third = _cumulants(
            self.moments, self.c[rows], self.w[rows], self.total[rows], delta, rows
        )
        sd = np.sqrt(var)
        skew = np.divide(third, sd**3, out=np.zeros_like(sd), where=sd > _TINY)
        return mean + sd * (z + (z * z - 1.0) * np.clip(skew, -_MAX_SKEW, _MAX_SKEW) / 6.0)

    def solve(self) -> FloatArray:
        """The true ECE of each problem's answer world (Illinois regula falsi on t)."""
        n = self.t_max.size
        everything = np.arange(n)
        flip = np.where(self.shrunk, -1.0, 1.0)

        def excess(t: FloatArray, rows: IntArray) -> FloatArray:
            return flip[rows] * (self.quantile(t, self.z[rows], rows) - self.target[rows])

        lo, hi = np.zeros(n), self.t_max.copy()
        f_lo, f_hi = excess(lo, everything), excess(hi, everything)
        kept_lower = np.zeros(n, dtype=bool)
        for _ in range(_MAX_STEPS):
            rows = np.flatnonzero((hi - lo > _TOLERANCE * self.t_max) & (f_lo <= 0.0) & (f_hi > 0))
            if not rows.size:
                break
            a, b, fa, fb = lo[rows], hi[rows], f_lo[rows], f_hi[rows]
            width = b - a
            x = np.clip(a - fa * width / (fb - fa), a + 0.01 * width, b - 0.01 * width)
            fx = excess(x, rows)
            lower = fx <= 0.0
            again = lower == kept_lower[rows]
            lo[rows], hi[rows] = np.where(lower, x, a), np.where(lower, b, x)
            f_lo[rows] = np.where(lower, fx, np.where(again, 0.5 * fa, fa))
            f_hi[rows] = np.where(lower, np.where(again, 0.5 * fb, fb), fx)
            kept_lower[rows] = lower
        theta = self.worlds(lo, everything)[1]
        end = self.worlds(hi, everything)[1]
        reached_end = f_hi <= 0.0
        theta = np.where(reached_end, end, theta)
        start_above = f_lo > 0.0
        theta = np.where(start_above, self.worlds(np.zeros(n), everything)[1], theta)
        return np.where(self.shrunk & (self.t_max == 0.0), 0.0, theta)


def _cumulants(
    moments: _Moments,
    c: FloatArray,
    w: FloatArray,
    total: FloatArray,
    delta: FloatArray,
    rows: IntArray | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Mean, variance and third cumulant of the plug-in ECE in the worlds ``delta`` (R, M)."""
    p = np.clip(c - delta, 0.0, 1.0)
    gap = c - p
    m1, m2, m3 = moments(p, rows)
    mean = (m1 * w).sum(axis=1)
    var = (np.maximum(m2 - m1 * m1, 0.0) * w * w).sum(axis=1)
    weights = np.maximum((gap * gap * w).sum(axis=1) - ((np.abs(gap) * w).sum(axis=1)) ** 2, 0.0)
    third = ((m3 - 3.0 * m1 * m2 + 2.0 * m1**3) * w**3).sum(axis=1)
    return mean, var + weights / total, third


def _folded_median_inverse(observed: FloatArray, sd: FloatArray) -> FloatArray:
    """The t >= 0 for which ``observed`` is the median of |N(t, sd^2)| (0 if none is)."""
    noisy = sd > 0.0
    x = np.divide(observed, sd, out=np.zeros_like(sd), where=noisy)
    lo, hi = np.zeros_like(x), x.copy()
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        above = ndtr(x - mid) - ndtr(-x - mid) > 0.5
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    estimate = np.where(x > float(ndtri(0.75)), sd * 0.5 * (lo + hi), 0.0)
    return np.where(noisy, estimate, observed)


def _absolute_moments(c: FloatArray, p: FloatArray, n: FloatArray) -> tuple[FloatArray, ...]:
    """E|D|, E D^2, E|D|^3 of ``D = c - k / n`` with k ~ Binomial(n, p); (G, M) arrays.

    ``c`` and ``n`` are (M,); ``p`` (G, M). Exact sums over k for bins of at most
    ``EXACT_ROWS`` rows; folded-normal moments of N(c - p, p (1 - p) / n) above (the normal
    limit of the binomial).
    """
    p = np.atleast_2d(p)
    rows = p.shape[0]
    return _Moments(np.tile(np.ravel(c), (rows, 1)), np.tile(np.ravel(n), (rows, 1)))(p)


class _Moments:
    """Absolute moments of ``c - k / n`` for fixed (R, M) bins and any success probabilities.

    The exact small-bin sums need ``|c - k / n|`` and the log binomial coefficients, which do
    not depend on p: they are computed once, per tier of bin sizes.
    """

    def __init__(self, c: FloatArray, n: FloatArray) -> None:
        self.c, self.safe_n = c, np.where(n > 0, n, 1.0)
        self.tiers = []
        smaller = 0
        for largest in _TIERS:
            r, m = np.nonzero((n > smaller) & (n <= largest))
            smaller = largest
            if not r.size:
                continue
            size = n[r, m][:, None]
            k = np.arange(int(size.max()) + 1, dtype=np.float64)[None, :]
            inside = k <= size
            rest = np.where(inside, size - k, 0.0)
            log_choose = np.where(
                inside, gammaln(size + 1.0) - gammaln(k + 1.0) - gammaln(rest + 1.0), -np.inf
            )
            dev = np.abs(c[r, m][:, None] - k / size)
            self.tiers.append((r, m, k, rest, log_choose, np.stack([dev, dev * dev, dev**3])))

    def __call__(
        self, p: FloatArray, rows: IntArray | None = None
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """E|D|, E D^2, E|D|^3 at success probabilities ``p`` of the bins ``rows`` (all)."""
        c = self.c if rows is None else self.c[rows]
        n = self.safe_n if rows is None else self.safe_n[rows]
        gap = c - p
        var = p * (1.0 - p) / n
        sd = np.sqrt(var)
        noisy = sd > 0.0
        mu = np.where(noisy, np.abs(gap) / np.where(noisy, sd, 1.0), 0.0)
        phi = np.exp(-0.5 * mu * mu) * 0.3989422804014327
        signed = 1.0 - 2.0 * ndtr(-mu)
        a = np.abs(gap)
        m1 = np.where(noisy, sd * (mu * signed + 2.0 * phi), a)
        m2 = gap * gap + var
        folded3 = (mu**3 + 3.0 * mu) * signed + 2.0 * phi * (mu * mu + 2.0)
        m3 = np.where(noisy, var * sd * folded3, a**3)
        position = None
        if rows is not None:
            position = np.full(self.c.shape[0], -1)
            position[rows] = np.arange(rows.size)
        for r, m, k, rest, log_choose, powers in self.tiers:
            if position is not None:
                keep = position[r] >= 0
                if not keep.any():
                    continue
                r, m, k_rest, choose = position[r[keep]], m[keep], rest[keep], log_choose[keep]
                dev = powers[:, keep]
            else:
                k_rest, choose, dev = rest, log_choose, powers
            m1[r, m], m2[r, m], m3[r, m] = _exact_moments(p[r, m], k, k_rest, choose, dev)
        return m1, m2, m3


def _exact_moments(
    q: FloatArray, k: FloatArray, rest: FloatArray, log_choose: FloatArray, powers: FloatArray
) -> FloatArray:
    """(3, Q) exact moments of Q small bins at success probabilities ``q`` (Q,)."""
    inner = (q > 0.0) & (q < 1.0)
    safe = np.where(inner, q, 0.5)[:, None]
    pmf = np.exp(log_choose + k * np.log(safe) + rest * np.log1p(-safe))
    if not inner.all():
        edge = np.flatnonzero(~inner)
        pmf[edge] = 0.0
        size = (rest + k)[edge, 0].astype(np.int64)
        pmf[edge, np.where(q[edge] >= 1.0, size, 0)] = 1.0
    return np.einsum("qk,jqk->jq", pmf, powers)
