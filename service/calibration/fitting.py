"""Fitting calibrators by minimising the mean negative log-likelihood (natural log).

* Temperature: one parameter ``u = log T``, bounded Brent search on ``T`` in [0.05, 20] with
  ``xatol = 1e-9`` on ``u``; the mean NLL is unimodal in ``u`` (convex in ``1 / T``).
* Platt: ``(a, b)`` of ``sigmoid(a * logit(s) + b)``, fitted on the standardised logit. A
  trust-region Newton method (exact gradient and Hessian, from ``a = 1, b = 0``) runs until the
  gradient norm is below ``sqrt(eps) ~ 1.5e-8`` times the size of the per-row gradient terms at
  the start, the smallest gradient its loss-based step test can reach reliably. Damped Newton
  steps from its last point, accepted on a lower loss or, within rounding of the loss, on a
  lower gradient, then take the fit to rounding level; they are also the fallback when the
  trust region stops short. The result must pass a stationarity test: each gradient component
  at most ``sqrt(eps)`` times the mean absolute size of its per-row terms.

No grid anywhere. ``nll_before`` is the NLL of the uncalibrated probabilities (T = 1, or the
identity score ``s`` through its clipped logit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize, minimize_scalar

from service.calibration._checks import (
    FloatArray,
    IntArray,
    class_labels,
    float_array,
    logit_matrix,
    unit_scores,
)
from service.calibration.calibrators import (
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    Calibrator,
    binary_log_odds,
    calibrated_logits,
)
from service.calibration.errors import FitError
from service.calibration.probabilities import (
    log_sigmoid_unchecked,
    logit_unchecked,
    sigmoid_unchecked,
)
from service.calibration.vocabulary import Task

T_MIN, T_MAX = MIN_TEMPERATURE, MAX_TEMPERATURE
LOG_T_TOL = 1e-9
PLATT_RTOL = math.sqrt(float(np.finfo(np.float64).eps))
PLATT_LOSS_SLACK = 1e-12
PLATT_MIN_STEP = 2.0**-30
PLATT_MAX_NEWTON = 100


@dataclass(frozen=True)
class TemperatureFit:
    """A fitted temperature, the mean NLL at T = 1 and at T, and the objective evaluations.

    ``at_bound`` tells that the optimum sits on the search bound (0.05 or 20): the data push T
    further, e.g. perfectly separated classes.
    """

    temperature: float
    nll_before: float
    nll_after: float
    evaluations: int
    at_bound: bool


@dataclass(frozen=True)
class PlattFit:
    """A fitted Platt map, the mean log loss before (identity) and after, Newton iterations."""

    slope: float
    intercept: float
    nll_before: float
    nll_after: float
    iterations: int


def _search_log_temperature(mean_nll: Any) -> TemperatureFit:
    lo, hi = math.log(T_MIN), math.log(T_MAX)
    res = minimize_scalar(mean_nll, bounds=(lo, hi), method="bounded", options={"xatol": LOG_T_TOL})
    u = float(res.x)
    return TemperatureFit(
        temperature=math.exp(u),
        nll_before=float(mean_nll(0.0)),
        nll_after=float(res.fun),
        evaluations=int(res.nfev),
        at_bound=min(u - lo, hi - u) < 1e-6,
    )


def fit_temperature(logits: Any, labels: Any) -> TemperatureFit:
    """Fit T minimising the mean NLL of ``softmax(z / T)`` for (N, K) logits, (N,) labels."""
    z = logit_matrix(logits)
    N, K = z.shape
    y = class_labels(labels, N, K)
    if N == 0:
        raise FitError("labels", "cannot fit a temperature on zero rows")
    rows = np.arange(N)
    top = z.argmax(axis=1)
    shifted = z - z[rows, top][:, None]
    mean_shifted_y = float(shifted[rows, y].mean())
    # The top logit contributes exp(0) = 1 to every row's sum; leaving it out and using log1p
    # keeps tiny losses (confident, correct rows at small T) from rounding to a flat zero.
    shifted[rows, top] = -np.inf
    buffer = np.empty_like(shifted)

    def mean_nll(u: float) -> float:
        inv_t = math.exp(-u)
        np.multiply(shifted, inv_t, out=buffer)
        np.exp(buffer, out=buffer)
        return float(np.log1p(np.einsum("ij->i", buffer)).mean() - inv_t * mean_shifted_y)

    return _search_log_temperature(mean_nll)


def _binary_signed(log_odds: FloatArray, labels: IntArray) -> FloatArray:
    """Log-odds in favour of the observed label: ``u`` for positives, ``-u`` for negatives."""
    return np.where(labels == 1, log_odds, -log_odds)


def fit_log_odds_temperature(log_odds: Any, labels: Any) -> TemperatureFit:
    """Fit T minimising the binary log loss of ``sigmoid(u / T)`` for (N,) log-odds ``u``."""
    u0 = float_array(log_odds, "log_odds", 1)
    y = class_labels(labels, u0.shape[0], 2)
    if u0.size == 0:
        raise FitError("labels", "cannot fit a temperature on zero rows")
    signed = _binary_signed(u0, y)

    def mean_nll(u: float) -> float:
        return float(-log_sigmoid_unchecked(signed * math.exp(-u)).mean())

    return _search_log_temperature(mean_nll)


def fit_binary_temperature(scores: Any, labels: Any) -> TemperatureFit:
    """Fit T minimising the log loss of ``sigmoid(logit(s) / T)`` for (N,) scores in [0, 1]."""
    return fit_log_odds_temperature(logit_unchecked(unit_scores(scores)), labels)


def refit_temperature(
    calibrator: Calibrator, inputs: Any, labels: Any, *, task: str
) -> TemperatureFit:
    """Fit the extra temperature on top of ``calibrator`` (1 means the calibrator still fits).

    ``inputs``: (N, K) logits for ``task="multiclass"``, (N,) scores for ``task="binary"``,
    where the calibrated log-odds (Platt, temperature or clipped identity) are rescaled.
    """
    if task == Task.MULTICLASS:
        z, T = calibrated_logits(calibrator, logit_matrix(inputs))
        return fit_temperature(z / T, labels)
    if task == Task.BINARY:
        return fit_log_odds_temperature(binary_log_odds(calibrator, unit_scores(inputs)), labels)
    raise FitError("task", f"must be 'multiclass' or 'binary', got {task!r}")


class _PlattObjective:
    """Mean log loss of ``sigmoid(a x + b)`` over rows ``x`` with labels, and its derivatives.

    Everything goes through the margin ``m = sign * (a x + b)`` (``sign`` = +1 for a positive,
    -1 for a negative): the loss per row is ``-log sigmoid(m)``, the residual ``p - y`` is
    ``-sign * sigmoid(-m)`` (which keeps its relative accuracy when it is tiny) and the Hessian
    weight ``p (1 - p)`` is ``sigmoid(m) sigmoid(-m)``. Sums are numpy's pairwise sums (no BLAS
    dot: its thread start-up costs more than the sum on a loaded machine).
    """

    def __init__(self, x: FloatArray, positive: NDArray[np.bool_]) -> None:
        self.x = x
        self.sign = np.where(positive, 1.0, -1.0)

    def margins(self, w: FloatArray) -> FloatArray:
        return self.sign * (w[0] * self.x + w[1])

    def loss(self, w: FloatArray) -> float:
        return float(-log_sigmoid_unchecked(self.margins(w)).mean())

    def residuals(self, w: FloatArray) -> FloatArray:
        return -self.sign * sigmoid_unchecked(-self.margins(w))

    def gradient(self, w: FloatArray) -> FloatArray:
        r = self.residuals(w)
        return np.array([(r * self.x).sum(), r.sum()]) / self.x.size

    def gradient_scale(self, w: FloatArray) -> FloatArray:
        """The mean size of the per-row gradient terms, ``(mean |r x|, mean |r|)``."""
        r = np.abs(self.residuals(w))
        return np.array([(r * np.abs(self.x)).sum(), r.sum()]) / self.x.size

    def hessian(self, w: FloatArray) -> FloatArray:
        m = self.margins(w)
        q = sigmoid_unchecked(m) * sigmoid_unchecked(-m)
        qx = q * self.x
        h01 = qx.sum()
        return np.array([[(qx * self.x).sum(), h01], [h01, q.sum()]]) / self.x.size

    def stationary(self, w: FloatArray) -> bool:
        """Whether each gradient component is below ``PLATT_RTOL`` times its per-row scale."""
        return bool(np.all(np.abs(self.gradient(w)) <= PLATT_RTOL * self.gradient_scale(w)))


def _damped_newton(objective: _PlattObjective, w: FloatArray) -> tuple[FloatArray, int]:
    """Refine ``w`` by Newton steps, each halved until accepted; return the point and the steps.

    A step is accepted when it lowers the loss or, since loss differences near the optimum are
    lost to rounding, when it leaves the loss within ``PLATT_LOSS_SLACK`` (relative) and lowers
    the largest gradient component. A step no larger than ``PLATT_RTOL`` times ``1 + |w|`` per
    component is the last one, taken whole if accepted and otherwise dropped: Newton converges
    quadratically, so what remains after it is of the order of its square. Also stops when no
    halving of a step is accepted, or after ``PLATT_MAX_NEWTON`` steps.
    """
    f = objective.loss(w)
    g = objective.gradient(w)
    for k in range(PLATT_MAX_NEWTON):
        try:
            d = np.linalg.solve(objective.hessian(w), -g)
        except np.linalg.LinAlgError:
            return w, k
        if not np.isfinite(d).all():
            return w, k
        last = bool(np.all(np.abs(d) <= PLATT_RTOL * (1.0 + np.abs(w))))
        g_max = float(np.abs(g).max())
        t = 1.0
        while True:
            w_new = w + t * d
            f_new = objective.loss(w_new)
            g_new = objective.gradient(w_new)
            if f_new < f or (
                f_new <= f + PLATT_LOSS_SLACK * f and float(np.abs(g_new).max()) < g_max
            ):
                break
            t *= 0.5
            if last or t < PLATT_MIN_STEP:
                return w, k
        w, f, g = w_new, f_new, g_new
        if last:
            return w, k + 1
    return w, PLATT_MAX_NEWTON


def fit_platt(scores: Any, labels: Any) -> PlattFit:
    """Fit ``sigmoid(a * logit(s) + b)`` to (N,) scores in [0, 1] and labels in {0, 1}.

    Raises ``FitError`` when only one class is present or when the classes are separated by
    the score (then no finite optimum exists: the slope runs to +inf, or to -inf for a reversed
    ranking), and when the optimum has ``a <= 0``. Every other data set has a finite optimum
    with ``a > 0``, which is returned; the ``FitError`` for a fit that fails the final
    stationarity test is a guard that no data set is known to reach.

    The fit runs on the standardised logit ``x = (z - mean z) / std z`` (so the trust region
    and the tolerances do not depend on the spread or offset of the scores) and maps back.
    """
    s = unit_scores(scores)
    y = class_labels(labels, s.shape[0], 2)
    positive = y == 1
    if not positive.any() or positive.all():
        raise FitError("labels", "Platt scaling needs both classes present")
    z = logit_unchecked(s)
    if z[~positive].max() <= z[positive].min():
        raise FitError("scores", "the score separates the classes: no finite Platt slope")
    if z[positive].max() <= z[~positive].min():
        raise FitError("scores", "the score ranks every negative above every positive")
    # Both classes overlap, so z is not constant and its spread is positive.
    center, spread = float(z.mean()), float(z.std())
    objective = _PlattObjective((z - center) / spread, positive)
    start = np.array([spread, center])  # a = 1, b = 0 in the standardised coordinates
    res = minimize(
        objective.loss,
        start,
        jac=objective.gradient,
        hess=objective.hessian,
        method="trust-exact",
        options={"gtol": PLATT_RTOL * float(np.linalg.norm(objective.gradient_scale(start)))},
    )
    w = np.asarray(res.x, dtype=np.float64)
    if not np.isfinite(w).all():
        w = start
    w, steps = _damped_newton(objective, w)
    if not objective.stationary(w):
        raise FitError("scores", f"Platt fit did not converge ({res.message})")
    slope = float(w[0]) / spread
    if slope <= 0.0:
        raise FitError("scores", f"fitted Platt slope {slope:.6g} is not positive")
    intercept = float(w[1]) - slope * center
    original = _PlattObjective(z, positive)
    return PlattFit(
        slope=slope,
        intercept=intercept,
        nll_before=original.loss(np.array([1.0, 0.0])),
        nll_after=original.loss(np.array([slope, intercept])),
        iterations=int(res.nit) + steps,
    )
