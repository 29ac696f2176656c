"""The bias-reduced ECE estimate of ``service.calibration.ece_inference`` (its ``debiased``):
the true ECE of the "shrunk" world (every observed gap cut toward 0 by the same number of
standard errors) that has the observed ECE as its median, or the median-unbiased estimate of
the in-the-large gap if that is larger. The notation is ``ece_inference``'s: per bin ``n`` rows,
mean confidence ``c``, ``k`` successes; tables are rows of (S, M) arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import gammaln, ndtr, ndtri

from service.calibration._checks import FloatArray, IntArray

#: Bins with at most this many rows use exact binomial moments in the debiased estimate.
EXACT_ROWS = 100
_TIERS = (12, 35, EXACT_ROWS)
_TINY = 1e-12
_MAX_SKEW = 1.0
_TOLERANCE = 1e-10
_MAX_STEPS = 60


def debiased_ece(
    n: FloatArray, c: FloatArray, k: FloatArray, ece: FloatArray, gap: FloatArray, empty: Any
) -> FloatArray:
    """(S,) the larger of the shrunk world's median-matching ECE and the in-the-large estimate,
    from (S, M) counts ``n``, mean confidences ``c`` and success counts ``k``, with the tables'
    plug-in ``ece`` and ``gap`` (S,) and which tables are ``empty`` (S,)."""
    occupied = n > 0
    safe = np.where(occupied, n, 1.0)
    a = np.where(occupied, k / safe, 0.0)
    total = np.where(empty, 1.0, n.sum(axis=1))
    w = n / total[:, None]
    d = np.where(occupied, c - a, 0.0)
    spread = np.maximum(c * (1.0 - c), a * (1.0 - a))
    noise = np.where(occupied, np.sqrt((spread + 1.0 / safe) / safe), 1.0)
    gap_sd = np.sqrt((n * spread).sum(axis=1)) / total
    shrunk = _ShrunkMedian(n, c, w, d, noise, total, ece).solve()
    return np.maximum(shrunk, _folded_median_inverse(np.abs(gap), gap_sd))


class _ShrunkMedian:
    """Per table, the shrunk world (every gap cut by t standard errors) whose plug-in ECE has
    the observed ECE as its median; the world's mean, variance and skewness are exact sums and
    its median the Cornish-Fisher one. Illinois regula falsi on t, vectorised over tables."""

    def __init__(
        self,
        n: FloatArray,
        c: FloatArray,
        w: FloatArray,
        d: FloatArray,
        noise: FloatArray,
        total: FloatArray,
        ece: FloatArray,
    ) -> None:
        self.c, self.w, self.d, self.noise, self.total = c, w, d, noise, total
        self.moments = _Moments(c, n)
        self.target = ece
        self.t_max = (np.abs(d) / noise).max(axis=1)

    def worlds(self, t: FloatArray, rows: IntArray) -> tuple[FloatArray, FloatArray]:
        """The gaps (R, M) of tables ``rows`` at parameters ``t`` (R,), and their true ECEs."""
        c, d, noise = self.c[rows], self.d[rows], self.noise[rows]
        delta = np.sign(d) * np.maximum(np.abs(d) - t[:, None] * noise, 0.0)
        p = np.clip(c - delta, 0.0, 1.0)
        return delta, (np.abs(c - p) * self.w[rows]).sum(axis=1)

    def median(self, t: FloatArray, rows: IntArray) -> FloatArray:
        delta, _ = self.worlds(t, rows)
        mean, var, third = _cumulants(
            self.moments, self.c[rows], self.w[rows], self.total[rows], delta, rows
        )
        sd = np.sqrt(var)
        skew = np.divide(third, sd**3, out=np.zeros_like(sd), where=sd > _TINY)
        return mean - sd * np.clip(skew, -_MAX_SKEW, _MAX_SKEW) / 6.0

    def solve(self) -> FloatArray:
        size = self.t_max.size
        everything = np.arange(size)

        def excess(t: FloatArray, rows: IntArray) -> FloatArray:
            return self.target[rows] - self.median(t, rows)

        lo, hi = np.zeros(size), self.t_max.copy()
        f_lo, f_hi = excess(lo, everything), excess(hi, everything)
        kept_lower = np.zeros(size, dtype=bool)
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
        theta = np.where(f_hi <= 0.0, self.worlds(hi, everything)[1], theta)
        theta = np.where(f_lo > 0.0, self.worlds(np.zeros(size), everything)[1], theta)
        return np.where(self.t_max == 0.0, 0.0, theta)


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
    ``EXACT_ROWS`` rows; folded-normal moments of N(c - p, p (1 - p) / n) above.
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
