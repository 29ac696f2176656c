"""What per-bin statistics say about the true binned ECE: a 95% interval, one-sided tests of
"the ECE is at most tau", a test of perfect calibration and a bias-reduced estimate, from bin
counts, confidence sums and success counts alone.

Notation, per occupied bin m of M: ``n_m`` rows, mean confidence ``c_m``, observed frequency
``a_m``, gap ``d_m = c_m - a_m`` and weight ``w_m = n_m / N``. The plug-in ``ECE = sum w_m |d_m|``
estimates the true binned ECE ``theta = sum w_m |delta_m|`` (``delta_m = c_m - p_m``, ``p_m`` the
bin's true probability of success). Write ``e_m = p_m - a_m`` for the bin's noise (mean 0).

**Two inequalities carry every bound.** For any configuration of true gaps,

* ``ECE - theta <= sum w_m |e_m|`` (triangle inequality): the plug-in exceeds the truth by at
  most the *noise ECE*, whose distribution does not depend on the gaps. A lower bound
  ``ECE - q`` with ``q`` the noise ECE's upper quantile is therefore valid whatever the gaps.
* ``ECE - theta >= sum w_m s_m e_m`` with ``s_m = sign(delta_m)`` (``|d_m| >= s_m d_m``): the
  plug-in falls below the truth by at most a signed sum of noise, whose variance
  ``sum w_m^2 p_m (1 - p_m) / n_m`` does not depend on the signs. ``ECE + z sd`` is a valid
  upper bound.

The calibration-in-the-large gap ``gap = sum w_m d_m`` is a second, sharper witness when the
gaps share a sign: ``theta >= |sum w_m delta_m| >= |gap| - |sum w_m e_m|``. The lower bound at
one-sided level ``1 - alpha`` is the larger of the two witnesses, each at ``alpha / 2``
(Bonferroni); for the two-sided 95% interval ``alpha = 0.025`` on each side.

The noise is Binomial(n_m, p_m) per bin. ``p_m`` is unknown; the noise model takes, per bin, the
value between ``c_m`` and ``a_m`` nearest 1/2 (the larger variance; at perfect calibration
``p_m = c_m``), and for the upper bound the value nearest 1/2 between ``c_m`` and the 68% Wilson
interval of ``a_m`` (a plug-in variance would shrink exactly when a bin's count falls short,
the event the upper bound guards against). The noise ECE's mean, variance and third cumulant
are exact sums over bins: exact binomial sums where a bin's binomial has at most ``SPAN``
plausible counts, folded-normal moments above. Its tail is that of a shifted gamma distribution
with the same three cumulants (normal when the skewness vanishes): monotone, with exact
inverses, so every bound and its test agree. The gap's noise is handled the same way, one tail
at a time. Sampling weights add ``(sum w_m d_m^2 - ECE^2) / N`` to each variance (the population
ECE weighs bins by their population shares, not by this sample's).

Tables of at most ``EXACT_TOTAL`` rows also carry ``calibrated_tail``, the exact tail of their
ECE under perfect calibration (every outcome enumerated): a floor under every exceedance
p-value, where the cumulant tails of a handful of rows can be far too thin.

``p_value`` tests perfect calibration and is dual to the interval: ``p < 0.05`` exactly when the
95% interval's lower bound exceeds 0. ``exceedance_p_value(tau)`` is the one-sided p-value of
"theta <= tau", dual to ``lower_bound``: ``p < alpha`` exactly when ``lower_bound(alpha) > tau``.

``debiased`` is a bias-reduced point estimate (``service.calibration.ece_debiased``), kept
inside the interval: the true ECE of the "shrunk" world (every observed gap cut toward 0 by the
same number of standard errors) that has the observed ECE as its median, or the median-unbiased
estimate of the in-the-large gap if that is larger. It removes most of the plug-in's upward bias
but is not median-unbiased for every configuration of gaps; its bias by data shape is tabulated
in bench/results/statistics-tables.md.

No random numbers: the same statistics always give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from scipy.special import gammainc, gammaincc, gammainccinv, gammaincinv, gammaln, ndtr, ndtri

from service.calibration._checks import FloatArray
from service.calibration.ece_debiased import debiased_ece
from service.calibration.errors import CalibrationInputError

LEVEL = 0.95
#: A bin's noise moments are exact binomial sums when its binomial has at most this many counts
#: within 9 standard deviations of its mean; folded-normal moments otherwise.
SPAN = 160
#: Half-width, in standard errors, of the Wilson interval the upper bound's variance comes from.
UPPER_VARIANCE_Z = 1.0
#: Below this |skewness| the tails are normal (the gamma's shape would exceed 4e6).
_NORMAL_SKEW = 1e-3
#: Tables of at most this many rows also get the exact tail of their ECE under perfect
#: calibration, a floor under every exceedance p-value (``calibrated_tail``).
EXACT_TOTAL = 12
#: Mean confidences are rounded to this many decimals first, so the answer does not depend on
#: the order in which rows (or buckets) were summed.
_MEAN_DIGITS = 10


@dataclass(frozen=True)
class EceInference:
    """The plug-in ECE, what it says about the true binned ECE, and the tests.

    ``gap`` is the signed calibration-in-the-large ``sum w_m d_m`` (mean confidence minus mean
    success: > 0 over-confident); ``p_value`` tests "every bin is calibrated". The remaining
    fields describe the noise (module docstring): the noise ECE's mean, variance and third
    cumulant, the variance and third cumulant of the in-the-large gap's noise ``sum w_m e_m``,
    and the variance of the signed noise behind the upper bound; ``calibrated_tail`` the exact
    ``P(ECE >= observed)`` under perfect calibration for tables of at most ``EXACT_TOTAL`` rows
    (0 above: no floor). All NaN without rows.
    """

    ece: float
    debiased: float
    lower: float
    upper: float
    gap: float
    p_value: float
    noise_mean: float
    noise_variance: float
    noise_third: float
    gap_variance: float
    gap_third: float
    signed_variance: float
    calibrated_tail: float = 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """``(lower, upper)``, the two-sided 95% interval."""
        return (self.lower, self.upper)

    def exceedance_p_value(self, tau: float) -> float:
        """One-sided p-value of "the true ECE is at most ``tau``" (small: evidence it is above)."""
        return float(_Noise.of(self).exceedance_p_value(np.array([tau]))[0])

    def lower_bound(self, alpha: float) -> float:
        """One-sided ``1 - alpha`` lower confidence bound of the true ECE (>= 0)."""
        return float(_Noise.of(self).lower_bound(alpha)[0])


@dataclass(frozen=True)
class EceInferences:
    """``EceInference`` of S bin tables, field by field as (S,) arrays (NaN for empty ones)."""

    ece: FloatArray
    debiased: FloatArray
    lower: FloatArray
    upper: FloatArray
    gap: FloatArray
    p_value: FloatArray
    noise_mean: FloatArray
    noise_variance: FloatArray
    noise_third: FloatArray
    gap_variance: FloatArray
    gap_third: FloatArray
    signed_variance: FloatArray
    calibrated_tail: FloatArray

    def __getitem__(self, i: int) -> EceInference:
        return EceInference(*(float(getattr(self, f.name)[i]) for f in fields(self)))

    def exceedance_p_value(self, tau: Any) -> FloatArray:
        """(S,) one-sided p-values of "the true ECE is at most ``tau``" (scalar or (S,))."""
        return _Noise.of(self).exceedance_p_value(np.broadcast_to(tau, self.ece.shape))

    def lower_bound(self, alpha: float) -> FloatArray:
        """(S,) one-sided ``1 - alpha`` lower confidence bounds."""
        return _Noise.of(self).lower_bound(alpha)


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
        return EceInferences(*([nan] * len(fields(EceInferences))))
    # The tail the decimal level names: 1 - 0.95 is 0.050000000000000044 in binary, and a
    # p-value just above 0.05 would otherwise meet an interval that excludes 0.
    alpha = float(f"{(1.0 - level) / 2.0:.12g}")
    return _infer(*_occupied_first(n, c, k), alpha=alpha)


@dataclass(frozen=True)
class _Noise:
    """The observed ECE and gap with the cumulants of their noise; (S,) arrays."""

    ece: FloatArray
    gap: FloatArray
    mean: FloatArray
    variance: FloatArray
    third: FloatArray
    gap_variance: FloatArray
    gap_third: FloatArray
    calibrated_tail: FloatArray

    @classmethod
    def of(cls, inference: EceInference | EceInferences) -> _Noise:
        def array(name: str) -> FloatArray:
            return np.atleast_1d(np.asarray(getattr(inference, name), dtype=np.float64))

        return cls(
            array("ece"),
            array("gap"),
            array("noise_mean"),
            array("noise_variance"),
            array("noise_third"),
            array("gap_variance"),
            array("gap_third"),
            array("calibrated_tail"),
        )

    def _gap_third(self) -> FloatArray:
        """Third cumulant of the noise on the gap's own side (its upper tail is the one read)."""
        return np.where(self.gap >= 0.0, self.gap_third, -self.gap_third)

    def exceedance_p_value(self, tau: FloatArray) -> FloatArray:
        abs_tail = upper_tail(self.ece - tau, self.mean, self.variance, self.third)
        side_tail = upper_tail(np.abs(self.gap) - tau, 0.0, self.gap_variance, self._gap_third())
        p = np.minimum(1.0, 2.0 * np.minimum(abs_tail, 2.0 * side_tail))
        # Perfect calibration lies in every null "theta <= tau": its exact tail is a floor.
        p = np.maximum(p, self.calibrated_tail)
        return np.where(np.isnan(self.ece), np.nan, p)

    def lower_bound(self, alpha: float) -> FloatArray:
        if not 0.0 < alpha < 1.0:
            raise CalibrationInputError("alpha", "must lie strictly between 0 and 1")
        by_abs = self.ece - upper_quantile(alpha / 2.0, self.mean, self.variance, self.third)
        by_gap = np.abs(self.gap) - upper_quantile(
            alpha / 4.0, 0.0, self.gap_variance, self._gap_third()
        )
        bound = np.maximum(0.0, np.maximum(by_abs, by_gap))
        # Exactly dual to exceedance_p_value at tau = 0, even where rounding would split them.
        shown = self.exceedance_p_value(np.zeros_like(self.ece)) < alpha
        return np.where(shown, np.maximum(bound, np.nextafter(0.0, 1.0)), 0.0)


def upper_tail(x: Any, mean: Any, variance: Any, third: Any) -> FloatArray:
    """``P(X >= x)`` for X with the given mean, variance and third cumulant (arrays broadcast).

    X is a shifted gamma variable with those cumulants (mirrored for negative skewness; normal
    when ``|skewness| < 1e-3``); a zero variance is a point mass at the mean.
    """
    x, mean, variance, third = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (x, mean, variance, third))
    )
    sd = np.sqrt(np.maximum(variance, 0.0))
    noisy = sd > 0.0
    safe_sd = np.where(noisy, sd, 1.0)
    t = (x - mean) / safe_sd
    skew = np.where(noisy, third / safe_sd**3, 0.0)
    tail = ndtr(-t)
    right, left = skew >= _NORMAL_SKEW, skew <= -_NORMAL_SKEW
    shape = 4.0 / np.where(right | left, skew, 1.0) ** 2
    root = np.sqrt(shape)
    up = shape + t * root
    tail = np.where(right, np.where(up <= 0.0, 1.0, gammaincc(shape, np.maximum(up, 0.0))), tail)
    down = shape - t * root
    tail = np.where(left, np.where(down <= 0.0, 0.0, gammainc(shape, np.maximum(down, 0.0))), tail)
    return np.where(noisy, tail, np.where(x <= mean, 1.0, 0.0))


def upper_quantile(probability: Any, mean: Any, variance: Any, third: Any) -> FloatArray:
    """The x with ``upper_tail(x, ...) = probability`` (the inverse of ``upper_tail``)."""
    p, mean, variance, third = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (probability, mean, variance, third))
    )
    sd = np.sqrt(np.maximum(variance, 0.0))
    noisy = sd > 0.0
    skew = np.where(noisy, third / np.where(noisy, sd, 1.0) ** 3, 0.0)
    right, left = skew >= _NORMAL_SKEW, skew <= -_NORMAL_SKEW
    shape = 4.0 / np.where(right | left, skew, 1.0) ** 2
    root = np.sqrt(shape)
    z = -ndtri(p)
    z = np.where(right, (gammainccinv(shape, p) - shape) / root, z)
    z = np.where(left, (shape - gammaincinv(shape, p)) / root, z)
    return mean + sd * z


def _infer(n: FloatArray, c: FloatArray, k: FloatArray, alpha: float) -> EceInferences:
    occupied = n > 0
    safe = np.where(occupied, n, 1.0)
    a = np.where(occupied, k / safe, 0.0)
    N = n.sum(axis=1)
    empty = N == 0
    total = np.where(empty, 1.0, N)
    w = n / total[:, None]
    d = np.where(occupied, c - a, 0.0)
    ece = (w * np.abs(d)).sum(axis=1)
    gap = (w * d).sum(axis=1)
    weight_variance = np.maximum((w * d * d).sum(axis=1) - ece**2, 0.0) / total
    gap_weight_variance = np.maximum((w * d * d).sum(axis=1) - gap**2, 0.0) / total

    p = np.where(occupied, np.clip(0.5, np.minimum(c, a), np.maximum(c, a)), 0.5)
    m1, m2, m3 = np.zeros_like(n), np.zeros_like(n), np.zeros_like(n)
    rows, cols = np.nonzero(occupied)
    m1[rows, cols], m2[rows, cols], m3[rows, cols] = noise_moments(p[rows, cols], n[rows, cols])
    variance = p * (1.0 - p)
    upper_p = np.where(occupied, _upper_variance_point(c, k, safe), 0.5)
    noise = _Noise(
        ece=ece,
        gap=gap,
        mean=(w * m1).sum(axis=1),
        variance=(w * w * np.maximum(m2 - m1 * m1, 0.0)).sum(axis=1) + weight_variance,
        third=(w**3 * (m3 - 3.0 * m1 * m2 + 2.0 * m1**3)).sum(axis=1),
        gap_variance=(n * variance).sum(axis=1) / total**2 + gap_weight_variance,
        gap_third=-(n * variance * (1.0 - 2.0 * p)).sum(axis=1) / total**3,
        calibrated_tail=calibrated_tail(n, c, ece),
    )
    signed_variance = (w * w * upper_p * (1.0 - upper_p) / safe).sum(axis=1) + weight_variance
    lower = noise.lower_bound(alpha)
    upper = np.minimum(1.0, ece - ndtri(alpha) * np.sqrt(signed_variance))
    p_value = np.minimum(1.0, 2.0 * noise.exceedance_p_value(np.zeros_like(ece)))
    debiased = np.clip(debiased_ece(n, c, k, ece, gap, empty), lower, upper)
    nan = np.where(empty, np.nan, 0.0)
    return EceInferences(
        ece=ece + nan,
        debiased=debiased + nan,
        lower=lower + nan,
        upper=upper + nan,
        gap=gap + nan,
        p_value=p_value + nan,
        noise_mean=noise.mean + nan,
        noise_variance=noise.variance + nan,
        noise_third=noise.third + nan,
        gap_variance=noise.gap_variance + nan,
        gap_third=noise.gap_third + nan,
        signed_variance=signed_variance + nan,
        calibrated_tail=noise.calibrated_tail + nan,
    )


def calibrated_tail(n: FloatArray, c: FloatArray, ece: FloatArray) -> FloatArray:
    """(S,) exact ``P(ECE >= observed)`` under perfect calibration (``K_m ~ Binomial(n_m,
    c_m)``) for tables of at most ``EXACT_TOTAL`` rows, by enumerating every outcome; 0 for
    larger tables, where the cumulant tails are used alone.

    The noise model's tails are asymptotic: on a handful of rows they can put no mass where
    the exact distribution puts much (one wrong prediction at confidence 0.9: the tails say
    p = 0, the exact tail is 0.1). Perfect calibration belongs to every null "theta <= tau", so
    this tail is a floor under every exceedance p-value.
    """
    out = np.zeros(n.shape[0])
    totals = n.sum(axis=1)
    for s in np.flatnonzero((totals > 0) & (totals <= EXACT_TOTAL)):
        total = totals[s]
        values, probabilities = np.zeros(1), np.ones(1)
        for rows, mean in zip(n[s], c[s], strict=True):
            if rows <= 0:
                continue
            k = np.arange(int(rows) + 1, dtype=np.float64)
            pmf = np.exp(
                gammaln(rows + 1.0)
                - gammaln(k + 1.0)
                - gammaln(rows - k + 1.0)
                + k * np.log(max(mean, 1e-300))
                + (rows - k) * np.log(max(1.0 - mean, 1e-300))
            )
            step = rows / total * np.abs(mean - k / rows)
            values = np.round((values[:, None] + step[None, :]).ravel(), 12)
            probabilities = (probabilities[:, None] * pmf[None, :]).ravel()
            merged, where = np.unique(values, return_inverse=True)
            probabilities = np.bincount(where, probabilities, merged.size).astype(np.float64)
            values = np.asarray(merged, dtype=np.float64)
        out[s] = min(1.0, probabilities[values >= ece[s] - 1e-9].sum())
    return out


def _upper_variance_point(c: FloatArray, k: FloatArray, n: FloatArray) -> FloatArray:
    """Per bin, the success probability nearest 1/2 between ``c`` and the Wilson interval of
    ``k / n`` at ``UPPER_VARIANCE_Z`` standard errors."""
    z2 = UPPER_VARIANCE_Z**2
    centre = (k + z2 / 2.0) / (n + z2)
    half = UPPER_VARIANCE_Z / (n + z2) * np.sqrt(np.maximum(k * (n - k) / n, 0.0) + z2 / 4.0)
    return np.clip(0.5, np.minimum(c, centre - half), np.maximum(c, centre + half))


def noise_moments(p: FloatArray, n: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``E|D|, E D^2, E|D|^3`` of ``D = p - K / n`` with ``K ~ Binomial(n, p)``; (B,) arrays.

    Exact sums over every count within 9 standard deviations of the mean when there are at
    most ``SPAN`` of them (small bins, and large bins with p near 0 or 1); otherwise the
    moments of the normal limit ``N(0, p (1 - p) / n)``.
    """
    sd = np.sqrt(p * (1.0 - p) / n)
    m1 = sd * np.sqrt(2.0 / np.pi)
    m2 = sd * sd
    m3 = 2.0 * np.sqrt(2.0 / np.pi) * sd**3
    mean, spread = n * p, np.sqrt(n * p * (1.0 - p))
    first = np.maximum(0.0, np.floor(mean - 9.0 * spread - 2.0))
    last = np.minimum(n, np.ceil(mean + 9.0 * spread + 2.0))
    exact = np.flatnonzero(last - first + 1.0 <= SPAN)
    if exact.size:
        size, q = n[exact, None], p[exact, None]
        count = first[exact, None] + np.arange(SPAN, dtype=np.float64)[None, :]
        inside = count <= size
        count = np.where(inside, count, 0.0)
        safe_q = np.clip(q, 1e-300, 1.0 - 1e-16)
        log_pmf = (
            gammaln(size + 1.0)
            - gammaln(count + 1.0)
            - gammaln(size - count + 1.0)
            + count * np.log(safe_q)
            + (size - count) * np.log1p(-safe_q)
        )
        pmf = np.where(inside & (q > 0.0) & (q < 1.0), np.exp(log_pmf), 0.0)
        certain = np.flatnonzero((q[:, 0] <= 0.0) | (q[:, 0] >= 1.0))
        if certain.size:
            at = np.where(q[certain, 0] >= 1.0, size[certain, 0] - first[exact][certain], 0.0)
            pmf[certain, at.astype(np.int64)] = 1.0
        dev = np.abs(q - count / size)
        m1[exact] = (pmf * dev).sum(axis=1)
        m2[exact] = (pmf * dev * dev).sum(axis=1)
        m3[exact] = (pmf * dev**3).sum(axis=1)
    return m1, m2, m3


def _occupied_first(
    n: FloatArray, c: FloatArray, k: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The tables cut to as many bins as the fullest one occupies: each row's occupied bins
    first, in their order, then empty ones (n = c = k = 0). An empty bin weighs nothing, so
    every table's evidence is unchanged; sparse tables (short windows, a history's steps) cost
    the inference only the bins they use."""
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
