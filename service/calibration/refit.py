"""Additive refit-temperature statistics: loss, slope and curvature sums at fixed knots.

The refit temperature of a window is the extra temperature ``T' = exp(u)``, on top of the
contract's calibrator, that minimises the window's NLL (natural log). Per labeled row and per
knot ``u_j`` of ``REFIT_KNOTS`` this module keeps ``l(u_j)``, ``dl/du(u_j)`` and
``d2l/du2(u_j)``; summed over rows they form a (3, J) array that adds up across time buckets,
and ``refit_from_knot_sums`` finds the window's optimum from the summed knot values alone.

Row losses, with ``s = 1 / (T0 e^u)``:

* multiclass, (K,) logits z, label y, calibrator temperature T0, ``p = softmax(s z)``:
  ``l = LSE(s z) - s z_y``, ``l' = -s (E_p[z] - z_y)``, ``l'' = -l' + s^2 Var_p(z)``;
* binary, calibrated log-odds v (``calibrators.binary_log_odds``), ``a = sign_y v e^{-u}``
  (``sign_y`` = +1 for y = 1, -1 for y = 0): ``l = -log sigmoid(a)``,
  ``l' = a sigmoid(-a)``, ``l'' = -l' + a^2 sigmoid(a) sigmoid(-a)``.

Logits are shifted by their row maximum and the top class is kept out of the exponential sum
(``log1p``), so logits of any finite size up to ``MAX_SCALED_LOGIT`` give finite sums.

Knot grid. ``REFIT_KNOTS`` is uniform in u: J = 37 knots from ``log T_MIN`` to ``log T_MAX``
(the bounds of ``fitting``: T' in [0.05, 20]), spacing ``log(20) / 18 = 0.166``, with u = 0 the
middle knot (index ``ZERO_KNOT``) and the two bounds exact knots, so an optimum on a bound is
decided by exact knot slopes. The summed loss is interpolated by piecewise quintic Hermite
polynomials (value, slope, curvature at both ends of each interval).

The grid is uniform in u because scaling the logits slides every row's loss along u unchanged,
so the grid errs alike at every u. J = 37 keeps the located optimum within 1e-3 in u for
N <= 100,000 and K <= 100: the worst error is 2.6e-4 on the hardest data within those limits
(rows sharing one confident margin with a single error, ``test_refit``), under 1e-5 on Gaussian
logits. The knot sums are about half the cost of a label batch's bucket statistics
(docs/performance.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import (
    FloatArray,
    IntArray,
    class_labels,
    float_array,
    logit_matrix,
    positive_number,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.fitting import T_MAX, T_MIN
from service.calibration.intervals import Z_95
from service.calibration.vocabulary import Task

ZERO_KNOT = 18
MAX_SCALED_LOGIT = 1e100
BOUND_TOL = 1e-6
_MULTICLASS_CHUNK = 1 << 15
_BINARY_CHUNK = 1 << 14
_EXP_FLOOR = -700.0


def _knot_grid() -> FloatArray:
    """Return the read-only (37,) grid of u = log T' knots (see the module docstring)."""
    lo, hi = math.log(T_MIN), math.log(T_MAX)
    knots = np.concatenate(
        [
            np.linspace(lo, 0.0, ZERO_KNOT + 1)[:-1],
            [0.0],
            np.linspace(0.0, hi, ZERO_KNOT + 1)[1:],
        ]
    )
    knots.setflags(write=False)
    return knots


REFIT_KNOTS: FloatArray = _knot_grid()
N_KNOTS = REFIT_KNOTS.size
_SCALES: FloatArray = np.exp(-REFIT_KNOTS)


@dataclass(frozen=True)
class RefitEstimate:
    """The extra temperature T' minimising a window's NLL, with its uncertainty.

    ``log_temperature_se`` is the standard error of ``u_hat = log T'``, ``1 / sqrt(L''(u_hat))``
    with L the summed (not mean) NLL; ``temperature_ci`` the 95% interval
    ``exp(u_hat -+ Z_95 se)``; ``n`` the labeled rows; ``at_bound`` tells that ``u_hat`` sits on
    the edge of the knot range (T' = 0.05 or 20): the data push T' further.
    """

    temperature: float
    log_temperature_se: float
    temperature_ci: tuple[float, float]
    n: int
    at_bound: bool


def _group_sum(values: FloatArray, group: IntArray, n_groups: int) -> FloatArray:
    """Sum (Q, C) per-row ``values`` over the rows of each group into a (G, Q) array."""
    if n_groups == 1:
        return values.sum(axis=1)[None, :]
    return np.stack([np.bincount(group, weights=row, minlength=n_groups) for row in values], 1)


def _row_chunks(n_rows: int, row_width: int, entries: int) -> list[slice]:
    """Split ``n_rows`` rows of ``row_width`` entries into slices of at most ``entries``.

    Small slices keep the temporary arrays near or under the allocator's mmap threshold
    (128 KiB): larger temporaries are mapped and page-faulted afresh on every call, which
    measured three to five times slower. There is always at least one slice.
    """
    step = max(1, entries // row_width)
    return [slice(i, min(i + step, n_rows)) for i in range(0, max(n_rows, 1), step)]


def _scaled_gaps(z: FloatArray, temperature: float) -> tuple[FloatArray, IntArray]:
    """Return (K, N) ``(z - max z) / T0``, class-major, and the (N,) argmax of each row.

    Gaps whose size exceeds ``MAX_SCALED_LOGIT`` (or overflow) are refused.
    """
    rows = np.arange(z.shape[0])
    top = z.argmax(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        x = (z - z[rows, top][:, None]) / temperature
    if not (np.abs(x) <= MAX_SCALED_LOGIT).all():
        raise CalibrationInputError(
            "logits", f"logit gaps divided by the temperature must stay below {MAX_SCALED_LOGIT}"
        )
    return np.ascontiguousarray(x.T), top


def _softmax_moments(weights: FloatArray, x: FloatArray, x2: FloatArray, rows: FloatArray) -> None:
    """Fill (3, C) ``rows`` with ``log1p(R)``, ``E_p[x]`` and ``Var_p(x)`` for each column.

    ``weights`` (K - 1, C) hold ``exp(max(s x, -700))`` of the classes other than the top one,
    whose ``x = 0`` weighs 1: their column sums are ``R = Z - 1``, ``p = weights / (1 + R)``,
    and the top class adds nothing to the moments.
    """
    total = np.einsum("kn->n", weights)
    np.log1p(total, out=rows[0])
    total += 1.0
    np.einsum("kn,kn->n", weights, x, out=rows[1])
    np.einsum("kn,kn->n", weights, x2, out=rows[2])
    rows[1:] /= total
    np.multiply(rows[1], rows[1], out=total)
    rows[2] -= total
    np.maximum(rows[2], 0.0, out=rows[2])


def _twentieth_power(base: FloatArray, out: FloatArray, scratch: FloatArray) -> None:
    """Set ``out`` to ``base ** 20`` by five products (``b^2, b^4, b^8, b^16, b^16 b^4``)."""
    np.multiply(base, base, out=out)
    np.multiply(out, out, out=scratch)
    np.multiply(scratch, scratch, out=out)
    np.multiply(out, out, out=out)
    np.multiply(out, scratch, out=out)


def _exponentiated(gaps: FloatArray, s: float, deepest: float, out: FloatArray) -> None:
    """Set ``out`` to ``exp(max(s gaps, -700))``; the floor is applied only where ``s`` times
    the ``deepest`` (most negative) gap reaches below it."""
    np.multiply(gaps, s, out=out)
    if s * deepest < _EXP_FLOOR:
        np.maximum(out, _EXP_FLOOR, out=out)
    np.exp(out, out=out)


def _multiclass_chunk(
    x: FloatArray, top: IntArray, y: IntArray, group: IntArray, n_groups: int
) -> FloatArray:
    """Return the (G, 3, J) knot sums of (K, C) class-major scaled gaps, labels and groups.

    With ``s = e^{-u_j}`` and the moments of ``p = softmax(s x)``: loss
    ``log1p(R) - s x_y``, slope ``-s (E_p[x] - x_y)``, curvature ``s^2 Var_p(x) - slope``.
    Only the K - 1 gaps below each top class are exponentiated, and only at the knots from
    u = 0 up: the knot ``ZERO_KNOT`` places below each has 20 times its scale
    (``e^{18 h} = T_MAX``), so its weights are that knot's to the 20th power wherever no
    scaled gap reaches the floor of -700 (then every power stays a normal number); elsewhere
    it is exponentiated with the floor.
    """
    K, C = x.shape
    below_top = np.ones((C, K), dtype=bool)
    below_top[np.arange(C), top] = False
    others = np.ascontiguousarray(x.T[below_top].reshape(C, K - 1).T)
    others2 = others * others
    deepest = float(others.min(initial=0.0))
    weights = np.empty_like(others)
    below = np.empty_like(others)
    scratch = np.empty_like(others)
    rows = np.empty((3, C))
    moments = np.empty((n_groups, 3, N_KNOTS))
    for j in range(ZERO_KNOT, N_KNOTS):
        _exponentiated(others, _SCALES[j], deepest, weights)
        knots = [(j, weights)]
        lower = j - ZERO_KNOT
        if lower < ZERO_KNOT:
            if _SCALES[lower] * deepest >= _EXP_FLOOR:
                _twentieth_power(weights, below, scratch)
            else:
                _exponentiated(others, _SCALES[lower], deepest, below)
            knots.append((lower, below))
        for knot, knot_weights in knots:
            _softmax_moments(knot_weights, others, others2, rows)
            moments[:, :, knot] = _group_sum(rows, group, n_groups)
    x_y = _group_sum(x[y, np.arange(C)][None, :], group, n_groups)
    slope = -_SCALES * (moments[:, 1] - x_y)
    return np.stack(
        [moments[:, 0] - _SCALES * x_y, slope, _SCALES**2 * moments[:, 2] - slope], axis=1
    )


def _binary_chunk(signed: FloatArray, group: IntArray, n_groups: int) -> FloatArray:
    """Return the (G, 3, J) knot sums of (C,) signed log-odds ``sign_y * v`` and groups.

    With ``a = s sign_y v`` and ``t = exp(-|a|)``: loss ``log1p(t) - min(a, 0)``, slope
    ``a sigmoid(-a)``, curvature ``a^2 sigmoid(a) sigmoid(-a) - slope``.
    """
    a = np.multiply.outer(_SCALES, signed)
    t = np.exp(-np.abs(a))
    one_t = 1.0 + t
    loss = np.log1p(t) - np.minimum(a, 0.0)
    slope = a * np.where(a >= 0.0, t, 1.0) / one_t
    curvature = a * a * t / (one_t * one_t) - slope
    sums = _group_sum(np.concatenate([loss, slope, curvature]), group, n_groups)
    return sums.reshape(n_groups, 3, N_KNOTS)


def _group_index(group: Any, n_rows: int, n_groups: Any) -> tuple[IntArray, int]:
    """Return (N,) group indices in 0..G-1 and G >= 1."""
    if isinstance(n_groups, bool) or not isinstance(n_groups, int | np.integer) or n_groups < 1:
        raise CalibrationInputError("n_groups", f"must be an integer >= 1, got {n_groups!r}")
    return class_labels(group, n_rows, int(n_groups), field="group"), int(n_groups)


def grouped_knot_sums(
    task: str,
    inputs: Any,
    labels: Any,
    group: Any,
    n_groups: int,
    *,
    temperature: float = 1.0,
) -> FloatArray:
    """Return the (G, 3, J) knot sums of the rows of each group, in one vectorised pass.

    ``task="multiclass"``: ``inputs`` (N, K) raw logits, ``temperature`` the calibrator's T0.
    ``task="binary"``: ``inputs`` (N,) calibrated log-odds, ``temperature`` must stay 1.
    ``labels`` (N,) class indices, ``group`` (N,) integers in 0..G-1 with G = ``n_groups``.
    ``out[g, q, j]`` sums, over the rows of group g, the loss (q = 0), its first (q = 1) and
    second (q = 2) derivative in ``u = log T'`` at ``REFIT_KNOTS[j]``; empty groups give zeros.
    """
    T0 = positive_number(temperature, "temperature")
    if task == Task.MULTICLASS:
        z = logit_matrix(inputs)
        N, K = z.shape
        y = class_labels(labels, N, K)
        g, G = _group_index(group, N, n_groups)
        x, top = _scaled_gaps(z, T0)
        parts = [
            _multiclass_chunk(x[:, c], top[c], y[c], g[c], G)
            for c in _row_chunks(N, K, _MULTICLASS_CHUNK)
        ]
        return np.sum(parts, axis=0)
    if task == Task.BINARY:
        if T0 != 1.0:
            raise CalibrationInputError(
                "temperature", "applies to multiclass logits only; pass calibrated log-odds"
            )
        v = float_array(inputs, "log_odds", 1)
        y = class_labels(labels, v.shape[0], 2)
        g, G = _group_index(group, v.shape[0], n_groups)
        if not (np.abs(v) <= MAX_SCALED_LOGIT).all():
            raise CalibrationInputError("log_odds", f"must stay below {MAX_SCALED_LOGIT}")
        signed = np.where(y == 1, v, -v)
        parts = [
            _binary_chunk(signed[c], g[c], G)
            for c in _row_chunks(v.shape[0], N_KNOTS, _BINARY_CHUNK)
        ]
        return np.sum(parts, axis=0)
    raise CalibrationInputError("task", f"must be 'multiclass' or 'binary', got {task!r}")


def multiclass_knot_sums(logits: Any, labels: Any, temperature: float = 1.0) -> FloatArray:
    """Return the (3, J) knot sums of (N, K) logits and (N,) labels under calibrator T0.

    Row q of the result sums the q-th derivative in ``u = log T'`` of the NLL of
    ``softmax(z / (T0 e^u))`` at ``REFIT_KNOTS`` (q = 0: the NLL itself).
    """
    z = logit_matrix(logits)
    zeros = np.zeros(z.shape[0], dtype=np.int64)
    return grouped_knot_sums(Task.MULTICLASS, z, labels, zeros, 1, temperature=temperature)[0]


def binary_knot_sums(log_odds: Any, labels: Any) -> FloatArray:
    """Return the (3, J) knot sums of (N,) calibrated log-odds and (N,) labels in {0, 1}.

    Row q of the result sums the q-th derivative in ``u = log T'`` of the log loss of
    ``sigmoid(v e^{-u})`` at ``REFIT_KNOTS`` (q = 0: the log loss itself).
    """
    v = float_array(log_odds, "log_odds", 1)
    zeros = np.zeros(v.shape[0], dtype=np.int64)
    return grouped_knot_sums(Task.BINARY, v, labels, zeros, 1)[0]


def _knot_sum_array(sums: Any) -> FloatArray:
    """Return ``sums`` as a finite (3, J) float64 array."""
    arr = float_array(sums, "sums", 2)
    if arr.shape != (3, N_KNOTS):
        raise CalibrationInputError("sums", f"must have shape (3, {N_KNOTS}), got {arr.shape}")
    return arr


def _row_count(n: Any) -> int:
    """Return ``n`` as a non-negative int; booleans and non-integers are refused."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise CalibrationInputError("n", f"must be an integer >= 0, got {n!r}")
    return int(n)


@dataclass(frozen=True)
class RefitEstimates:
    """``RefitEstimate`` of S windows as (S,) arrays; ``found`` is False where there is none."""

    temperature: FloatArray
    log_temperature_se: FloatArray
    lower: FloatArray
    upper: FloatArray
    n: IntArray
    at_bound: np.ndarray
    found: np.ndarray

    def __getitem__(self, i: int) -> RefitEstimate | None:
        if not self.found[i]:
            return None
        return RefitEstimate(
            temperature=float(self.temperature[i]),
            log_temperature_se=float(self.log_temperature_se[i]),
            temperature_ci=(float(self.lower[i]), float(self.upper[i])),
            n=int(self.n[i]),
            at_bound=bool(self.at_bound[i]),
        )


def refit_from_knot_sums(sums: Any, n: int) -> RefitEstimate | None:
    """Return the refit temperature of a window from its (3, J) summed knot values.

    ``sums`` as returned by ``multiclass_knot_sums`` / ``binary_knot_sums`` (or their sum over
    buckets), ``n`` the number of rows they cover. The summed loss is interpolated by
    piecewise quintic Hermite polynomials and minimised over [log 0.05, log 20]. The interval
    is clipped to that range. Returns None when n < 2, or when the interpolated curvature at
    the optimum is not positive inside the range (every sum 0). On a bound where the loss
    still bends downwards the estimate is that bound with an infinite standard error and the
    interval collapsed onto it: the data push T' at least that far.
    """
    return refit_many(_knot_sum_array(sums)[None], np.array([_row_count(n)]))[0]


def refit_many(sums: Any, n: Any) -> RefitEstimates:
    """``refit_from_knot_sums`` of S windows at once: (S, 3, J) sums, (S,) row counts."""
    arr = np.asarray(sums, dtype=np.float64)
    rows = np.asarray(n, dtype=np.int64)
    if arr.ndim != 3 or arr.shape[1:] != (3, N_KNOTS) or rows.shape != arr.shape[:1]:
        raise CalibrationInputError("sums", f"must have shape (S, 3, {N_KNOTS}) with (S,) counts")
    if not np.isfinite(arr).all():
        raise CalibrationInputError("sums", "must be finite")
    S = arr.shape[0]
    slopes = arr[:, 1, :]
    lo, hi = float(REFIT_KNOTS[0]), float(REFIT_KNOTS[-1])
    u = np.full(S, np.nan)
    curvature = np.full(S, np.nan)
    at_lo = slopes[:, 0] >= 0.0
    at_hi = ~at_lo & (slopes[:, -1] <= 0.0)
    for mask, end, side, bound in ((at_lo, 0, 0.0, lo), (at_hi, N_KNOTS - 2, 1.0, hi)):
        edge = np.flatnonzero(mask)
        if edge.size:
            u[edge] = bound
            piece = _hermite_pieces(arr[edge], np.full(edge.size, end))
            curvature[edge] = _evaluate(piece, np.full(edge.size, side), 2) / _SPACING**2
    inside = ~(at_lo | at_hi)
    window, knot = np.nonzero((slopes[:, :-1] < 0.0) & (slopes[:, 1:] >= 0.0) & inside[:, None])
    if window.size:
        pieces = _hermite_pieces(arr[window], knot)
        t = _slope_root(pieces)
        best = _lowest_per_window(window, _evaluate(pieces, t, 0))
        u[window[best]] = REFIT_KNOTS[knot[best]] + t[best] * _SPACING
        curvature[window[best]] = _evaluate(pieces[best], t[best], 2) / _SPACING**2
    at_bound = np.minimum(u - lo, hi - u) < BOUND_TOL
    bends = curvature > 0.0
    found = (rows >= 2) & np.isfinite(u) & (bends | at_bound)
    se = np.where(bends, 1.0 / np.sqrt(np.where(bends, curvature, 1.0)), np.inf)
    return RefitEstimates(
        temperature=np.exp(u),
        log_temperature_se=se,
        lower=np.where(bends, np.exp(np.maximum(u - Z_95 * se, lo)), np.exp(u)),
        upper=np.where(bends, np.exp(np.minimum(u + Z_95 * se, hi)), np.exp(u)),
        n=rows,
        at_bound=at_bound,
        found=found,
    )


_SPACING = float(REFIT_KNOTS[1] - REFIT_KNOTS[0])


def _hermite_pieces(sums: FloatArray, j: IntArray) -> FloatArray:
    """(Q, 6) monomial coefficients in t in [0, 1] of the quintic Hermite piece on knot
    interval ``j`` of each window, from the value, slope and curvature at both ends."""
    q = np.arange(sums.shape[0])
    h = _SPACING
    y0, y1 = sums[q, 0, j], sums[q, 0, j + 1]
    d0, d1 = sums[q, 1, j] * h, sums[q, 1, j + 1] * h
    e0, e1 = sums[q, 2, j] * h * h, sums[q, 2, j + 1] * h * h
    return np.stack(
        [
            y0,
            d0,
            0.5 * e0,
            -10.0 * y0 - 6.0 * d0 - 1.5 * e0 + 0.5 * e1 - 4.0 * d1 + 10.0 * y1,
            15.0 * y0 + 8.0 * d0 + 1.5 * e0 - e1 + 7.0 * d1 - 15.0 * y1,
            -6.0 * y0 - 3.0 * d0 - 0.5 * e0 + 0.5 * e1 - 3.0 * d1 + 6.0 * y1,
        ],
        axis=1,
    )


def _evaluate(coefficients: FloatArray, t: FloatArray, order: int) -> FloatArray:
    """The ``order``-th t-derivative (0, 1 or 2) of each piece at its ``t``."""
    powers = np.arange(6)
    factor = np.ones(6)
    for k in range(order):
        factor = factor * np.maximum(powers - k, 0)
    exponent = np.maximum(powers - order, 0)
    return (coefficients * factor * t[:, None] ** exponent).sum(axis=1)


def _slope_root(coefficients: FloatArray) -> FloatArray:
    """The t in [0, 1] where each piece's slope crosses 0 upwards (bisection, to 2^-60)."""
    a, b = np.zeros(coefficients.shape[0]), np.ones(coefficients.shape[0])
    for _ in range(60):
        mid = 0.5 * (a + b)
        falling = _evaluate(coefficients, mid, 1) < 0.0
        a, b = np.where(falling, mid, a), np.where(falling, b, mid)
    return 0.5 * (a + b)


def _lowest_per_window(window: IntArray, value: FloatArray) -> IntArray:
    """Indices of the lowest value of each window (the loss may have several local minima)."""
    order = np.lexsort((value, window))
    first = np.r_[True, window[order][1:] != window[order][:-1]]
    return order[first]
