"""Fitting calibrators by minimising the mean negative log-likelihood (natural log).

* Temperature: one parameter ``u = log T``, bounded Brent search on ``T`` in [0.05, 20] with
  ``xatol = 1e-9`` on ``u``; the mean NLL is unimodal in ``u`` (convex in ``1 / T``).
* Platt: ``(a, b)`` of ``sigmoid(a * logit(s) + b)`` by a trust-region Newton method with the
  exact gradient and Hessian, from ``a = 1, b = 0``, until the gradient norm is below 1e-10.

No grid anywhere. ``nll_before`` is the NLL of the uncalibrated probabilities (T = 1, or the
identity score ``s`` through its clipped logit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from service.calibration._checks import (
    FloatArray,
    IntArray,
    class_labels,
    float_array,
    logit_matrix,
    unit_scores,
)
from service.calibration.calibrators import Calibrator, binary_log_odds, temperature_of
from service.calibration.errors import FitError
from service.calibration.probabilities import (
    log_sigmoid_unchecked,
    logit_unchecked,
    sigmoid_unchecked,
)

T_MIN, T_MAX = 0.05, 20.0
LOG_T_TOL = 1e-9
PLATT_GTOL = 1e-10


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
    if task == "multiclass":
        return fit_temperature(logit_matrix(inputs) / temperature_of(calibrator), labels)
    if task == "binary":
        return fit_log_odds_temperature(binary_log_odds(calibrator, unit_scores(inputs)), labels)
    raise FitError("task", f"must be 'multiclass' or 'binary', got {task!r}")


def fit_platt(scores: Any, labels: Any) -> PlattFit:
    """Fit ``sigmoid(a * logit(s) + b)`` to (N,) scores in [0, 1] and labels in {0, 1}.

    Raises ``FitError`` when only one class is present or when the classes are separated by
    the score (then no finite optimum exists: the slope runs to +inf, or to -inf for a reversed
    ranking), and when the optimum has ``a <= 0`` or the optimiser does not converge.
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
    yf = y.astype(np.float64)
    sign = np.where(positive, 1.0, -1.0)

    def loss(w: FloatArray) -> float:
        return float(-log_sigmoid_unchecked(sign * (w[0] * z + w[1])).mean())

    def gradient(w: FloatArray) -> FloatArray:
        r = sigmoid_unchecked(w[0] * z + w[1]) - yf
        return np.array([np.dot(r, z), r.sum()]) / z.size

    def hessian(w: FloatArray) -> FloatArray:
        p = sigmoid_unchecked(w[0] * z + w[1])
        q = p * (1.0 - p)
        qz = q * z
        return np.array([[np.dot(qz, z), qz.sum()], [qz.sum(), q.sum()]]) / z.size

    res = minimize(
        loss,
        np.array([1.0, 0.0]),
        jac=gradient,
        hess=hessian,
        method="trust-exact",
        options={"gtol": PLATT_GTOL},
    )
    if not res.success:
        raise FitError("scores", f"Platt fit did not converge: {res.message}")
    slope, intercept = float(res.x[0]), float(res.x[1])
    if slope <= 0.0:
        raise FitError("scores", f"fitted Platt slope {slope:.6g} is not positive")
    return PlattFit(
        slope=slope,
        intercept=intercept,
        nll_before=loss(np.array([1.0, 0.0])),
        nll_after=float(res.fun),
        iterations=int(res.nit),
    )
