"""Binary calibrator families beyond Platt and temperature: isotonic, histogram and beta maps.

Each maps (N,) scores ``s`` in [0, 1] to the calibrated P(positive) ``p``; ``fit`` takes (N,)
scores and labels in {0, 1}, ``apply`` returns ``p``, ``to_dict`` the canonical parameters
the contract's hash covers and ``from_dict`` reads them back, refusing (with the field named)
what a client may not register.

* ``IsotonicCalibrator(x, y)``: ``p = interp(s, x, y)``, constant beyond the first and last
  threshold (scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``). Fitted by
  pool-adjacent-violators on the labels ordered by score: scores within 1e-15 of each other
  count as one value whose target is their labels' mean, and only the thresholds where the
  fitted step function changes are kept (first and last point of each flat run), as in
  scikit-learn. ``x`` strictly increasing in [0, 1], ``y`` non-decreasing in [0, 1].
* ``HistogramCalibrator(cuts, values)``: ``p = values[i]`` for ``s`` in bin i, bins
  ``[cut_{i-1}, cut_i)`` with ``cut_{-1} = 0`` and the last bin closed at 1. Fitted on equal-mass
  bins of the fit scores (cuts at the quantiles ``j / B``, merged where ties collapse them),
  each bin's value its positive rate. ``cuts`` strictly increasing in (0, 1).
* ``BetaCalibrator(a, b, c)``: ``p = sigmoid(a ln s - b ln(1 - s) + c)`` with ``a, b >= 0``
  (Kull, Silva Filho and Flach 2017), ``s`` clipped to [eps, 1 - eps] with float64's eps as
  the ``betacal`` package does. Fitted as a logistic regression on ``ln s`` and
  ``-ln(1 - s)``; a negative coefficient is set to 0 and the other refitted (``betacal``'s rule).

Bounds (``MAX_THRESHOLDS`` = 20,000 isotonic points, ``MAX_HISTOGRAM_BINS`` = 1,000, beta
``a, b <= MAX_BETA_SHAPE`` = 1,000 and ``|c| <= MAX_BETA_INTERCEPT`` = 1e6) keep a contract's
JSON small and every log-odds finite (``|ln s| <= 36.1`` after clipping).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression, minimize

from service.calibration._checks import FloatArray, IntArray, class_labels, unit_scores
from service.calibration._params import bounded, increasing, vector
from service.calibration.errors import CalibrationInputError, FitError
from service.calibration.probabilities import log_sigmoid_unchecked, sigmoid_unchecked

MAX_THRESHOLDS = 20_000
MAX_HISTOGRAM_BINS = 1000
DEFAULT_HISTOGRAM_BINS = 10
MAX_BETA_SHAPE = 1000.0
MAX_BETA_INTERCEPT = 1e6
#: Scores closer than this count as one value in an isotonic fit (scikit-learn's rule).
TIE_RESOLUTION = 1e-15
_EPS = float(np.finfo(np.float64).eps)


def _fit_data(scores: Any, labels: Any) -> tuple[FloatArray, FloatArray]:
    s = unit_scores(scores)
    y = class_labels(labels, s.shape[0], 2)
    if s.size == 0:
        raise FitError("labels", "cannot fit a calibrator on zero rows")
    return s, y.astype(np.float64)


@dataclass(frozen=True)
class IsotonicCalibrator:
    """Monotone step-linear map through the thresholds ``(x_i, y_i)`` (module docstring)."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    @functools.cached_property
    def _arrays(self) -> tuple[FloatArray, FloatArray]:
        return np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)

    def apply(self, scores: FloatArray) -> FloatArray:
        """(N,) probabilities of (N,) scores in [0, 1]."""
        x, y = self._arrays
        return np.interp(scores, x, y)

    @property
    def parameters(self) -> int:
        """The number of distinct levels the map takes."""
        return len(set(self.y))

    def to_dict(self) -> dict[str, Any]:
        return {"method": "isotonic", "x": list(self.x), "y": list(self.y)}

    @classmethod
    def from_dict(cls, d: Any, field: str = "calibrator") -> IsotonicCalibrator:
        x = vector(d["x"], f"{field}.x", 0.0, 1.0, max_size=MAX_THRESHOLDS)
        y = vector(d["y"], f"{field}.y", 0.0, 1.0, size=len(x))
        increasing(x, f"{field}.x", strict=True)
        increasing(y, f"{field}.y", strict=False)
        return cls(x, y)

    @classmethod
    def fit(cls, scores: Any, labels: Any) -> IsotonicCalibrator:
        """Pool-adjacent-violators on the fit rows (module docstring)."""
        s, y = _fit_data(scores, labels)
        values, index = np.unique(s, return_inverse=True)
        groups = _tie_groups(values)
        group = groups[index]
        weight = np.bincount(group).astype(np.float64)
        target = np.bincount(group, weights=y) / weight
        ux = values[np.r_[True, np.diff(groups) > 0]]
        fitted = np.asarray(isotonic_regression(target, weights=weight).x, dtype=np.float64)
        np.clip(fitted, 0.0, 1.0, out=fitted)
        keep = np.ones(fitted.size, dtype=bool)
        keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
        if keep.sum() > MAX_THRESHOLDS:
            raise FitError("fit", f"the isotonic map needs more than {MAX_THRESHOLDS} thresholds")
        return cls(tuple(ux[keep].tolist()), tuple(fitted[keep].tolist()))


def _tie_groups(values: FloatArray) -> IntArray:
    """The group of each sorted distinct value: a group starts at a value at least
    ``TIE_RESOLUTION`` above the group's first value (scikit-learn's ``_make_unique``)."""
    close = np.flatnonzero(np.diff(values) < TIE_RESOLUTION)
    start = np.ones(values.size, dtype=bool)
    if close.size:  # rare: walk the runs of values closer than the resolution
        first = values[0]
        for i in range(1, values.size):
            if values[i] - first >= TIE_RESOLUTION:
                first = values[i]
            else:
                start[i] = False
    return np.cumsum(start) - 1


@dataclass(frozen=True)
class HistogramCalibrator:
    """Piecewise-constant map on the bins cut at ``cuts`` (module docstring)."""

    cuts: tuple[float, ...]
    values: tuple[float, ...]

    @functools.cached_property
    def _arrays(self) -> tuple[FloatArray, FloatArray]:
        return np.asarray(self.cuts, dtype=np.float64), np.asarray(self.values, dtype=np.float64)

    def apply(self, scores: FloatArray) -> FloatArray:
        cuts, values = self._arrays
        return values[np.searchsorted(cuts, scores, side="right")]

    @property
    def parameters(self) -> int:
        return len(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"method": "histogram", "cuts": list(self.cuts), "values": list(self.values)}

    @classmethod
    def from_dict(cls, d: Any, field: str = "calibrator") -> HistogramCalibrator:
        cuts = vector(
            d["cuts"], f"{field}.cuts", 0.0, 1.0, min_size=0, max_size=MAX_HISTOGRAM_BINS - 1
        )
        for i, c in enumerate(cuts):
            if not 0.0 < c < 1.0:
                raise CalibrationInputError(f"{field}.cuts[{i}]", "must lie strictly in (0, 1)")
        increasing(cuts, f"{field}.cuts", strict=True)
        values = vector(d["values"], f"{field}.values", 0.0, 1.0, size=len(cuts) + 1)
        return cls(cuts, values)

    @classmethod
    def fit(
        cls, scores: Any, labels: Any, bins: int = DEFAULT_HISTOGRAM_BINS
    ) -> HistogramCalibrator:
        """Equal-mass bins of the fit scores, each valued at its positive rate."""
        s, y = _fit_data(scores, labels)
        if not 1 <= bins <= MAX_HISTOGRAM_BINS:
            raise FitError("bins", f"must lie in [1, {MAX_HISTOGRAM_BINS}]")
        inner = np.quantile(s, np.arange(1, bins) / bins)
        cuts = np.unique(inner[(inner > 0.0) & (inner < 1.0)])
        index = np.searchsorted(cuts, s, side="right")
        count = np.bincount(index, minlength=cuts.size + 1)
        hits = np.bincount(index, weights=y, minlength=cuts.size + 1)
        occupied = count > 0
        # Quantile cuts leave every bin occupied; guard anyway with the overall rate.
        values = np.where(occupied, hits / np.maximum(count, 1), y.mean())
        return cls(tuple(cuts.tolist()), tuple(values.tolist()))


def _beta_features(scores: FloatArray) -> FloatArray:
    c = np.clip(scores, _EPS, 1.0 - _EPS)
    return np.column_stack([np.log(c), -np.log1p(-c)])


@dataclass(frozen=True)
class BetaCalibrator:
    """``p = sigmoid(a ln s - b ln(1 - s) + c)``, ``a, b >= 0`` (module docstring)."""

    a: float
    b: float
    c: float

    def log_odds(self, scores: FloatArray) -> FloatArray:
        f = _beta_features(scores)
        return self.a * f[:, 0] + self.b * f[:, 1] + self.c

    def apply(self, scores: FloatArray) -> FloatArray:
        return sigmoid_unchecked(self.log_odds(scores))

    @property
    def parameters(self) -> int:
        return 1 + int(self.a > 0) + int(self.b > 0)

    def to_dict(self) -> dict[str, Any]:
        return {"method": "beta", "a": self.a, "b": self.b, "c": self.c}

    @classmethod
    def from_dict(cls, d: Any, field: str = "calibrator") -> BetaCalibrator:
        return cls(
            bounded(d["a"], f"{field}.a", 0.0, MAX_BETA_SHAPE),
            bounded(d["b"], f"{field}.b", 0.0, MAX_BETA_SHAPE),
            bounded(d["c"], f"{field}.c", -MAX_BETA_INTERCEPT, MAX_BETA_INTERCEPT),
        )

    @classmethod
    def fit(cls, scores: Any, labels: Any) -> BetaCalibrator:
        """Maximum-likelihood logistic regression on ``(ln s, -ln(1 - s))`` with ``a, b >= 0``."""
        s, y = _fit_data(scores, labels)
        if y.min() == y.max():
            raise FitError("labels", "beta calibration needs both classes present")
        f = _beta_features(s)
        w = _logistic(f, y)
        if w[0] < 0.0:
            w = np.r_[0.0, _logistic(f[:, 1:], y)]
        elif w[1] < 0.0:
            w = _logistic(f[:, :1], y)
            w = np.r_[w[0], 0.0, w[1]]
        a, b, c = (float(v) for v in w)
        if a < 0.0 or b < 0.0:  # the other coefficient also wants a negative sign
            a, b = max(a, 0.0), max(b, 0.0)
            c = float(_logistic(np.zeros((s.size, 0)), y)[0])
        if a > MAX_BETA_SHAPE or b > MAX_BETA_SHAPE or abs(c) > MAX_BETA_INTERCEPT:
            raise FitError("fit", "the score separates the classes: no finite beta map")
        return cls(a, b, c)


def _logistic(features: FloatArray, y: FloatArray) -> FloatArray:
    """The unregularised logistic-regression weights ``(w_1..w_d, intercept)`` minimising the
    mean log loss, by Newton's method (trust-exact) to a gradient of 1e-12 per row."""
    X = np.column_stack([features, np.ones(y.size)])
    sign = 2.0 * y - 1.0
    n = y.size

    def loss(w: FloatArray) -> float:
        return float(-log_sigmoid_unchecked(sign * (X @ w)).sum() / n)

    def grad(w: FloatArray) -> FloatArray:
        r = sigmoid_unchecked(X @ w) - y
        return np.asarray(X.T @ r / n, dtype=np.float64)

    def hess(w: FloatArray) -> FloatArray:
        p = sigmoid_unchecked(X @ w)
        q = p * (1.0 - p)
        return np.asarray((X * q[:, None]).T @ X / n, dtype=np.float64)

    start = np.zeros(X.shape[1])
    mean = float(y.mean())
    start[-1] = math.log(mean / (1.0 - mean))
    res = minimize(loss, start, jac=grad, hess=hess, method="trust-exact", options={"gtol": 1e-12})
    w = np.asarray(res.x, dtype=np.float64)
    if not np.isfinite(w).all():
        raise FitError("fit", "the logistic fit diverged")
    return w


BinaryFamily = IsotonicCalibrator | HistogramCalibrator | BetaCalibrator
