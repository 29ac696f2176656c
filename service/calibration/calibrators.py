"""Calibrators: the fitted maps from raw model outputs to calibrated probabilities.

* ``TemperatureCalibrator(T)``: multiclass ``softmax(z / T)``; binary ``sigmoid(logit(s) / T)``.
* ``PlattCalibrator(a, b)``: binary only, ``sigmoid(a * logit(s) + b)`` with ``a > 0``.
* ``IdentityCalibrator()``: multiclass ``softmax(z)``; binary ``p = s``.
* binary families ``isotonic``, ``histogram``, ``beta`` (``binary_families``) and multiclass
  families ``vector``, ``matrix``, one-vs-rest ``isotonic`` (``multiclass_families``).

A multiclass calibrator is applied as ``calibrated_logits``: temperature and identity give the
logits and their temperature unchanged (``softmax(z / T)``), the families their calibrated
logits ``z'`` at temperature 1. A binary calibrator gives calibrated log-odds
(``binary_log_odds``: for isotonic and histogram maps, the clipped logit of their probability).

Binary scores ``s`` are probabilities in [0, 1]; ``logit`` clips them to [1e-6, 1 - 1e-6].

Bounds on the parameters a client may set (``check_bounds``; calmon's own fits stay inside):

* temperature T in [``MIN_TEMPERATURE``, ``MAX_TEMPERATURE``] = [0.05, 20], the range the
  temperature fit searches (``fitting.T_MIN``, ``T_MAX``). The lower bound is what keeps scaled
  logits finite (``_checks.MAX_ABS_LOGIT``); above 20 a softmax of real logits is all but
  uniform, a calibrator no fit would choose.
* Platt slope a in [``MIN_PLATT_SLOPE``, ``MAX_PLATT_SLOPE``] = [1e-6, 1e6] and intercept
  |b| <= ``MAX_PLATT_INTERCEPT`` = 1e8: with clipped scores ``|logit(s)| <= 13.9``, the
  calibrated log-odds stay below 1.2e8, so a row's NLL and the refit sums (knot scale <= 20)
  stay finite. A slope above 1e6 spreads a score change of 1e-6 across the whole probability
  range, one below 1e-6 squeezes every score into one probability: scores so nearly constant,
  or so uninformative, carry no calibration to fit.

Construction checks only that parameters are finite and positive where needed, so a stored
contract from before these bounds still reads back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import (
    FloatArray,
    finite_number,
    logit_matrix,
    positive_number,
    unit_scores,
)
from service.calibration.binary_families import (
    BetaCalibrator,
    BinaryFamily,
    HistogramCalibrator,
    IsotonicCalibrator,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.multiclass_families import (
    IsotonicOvRCalibrator,
    MatrixCalibrator,
    MulticlassFamily,
    VectorCalibrator,
)
from service.calibration.probabilities import logit_unchecked, sigmoid_unchecked, softmax
from service.calibration.vocabulary import Task


@dataclass(frozen=True)
class TemperatureCalibrator:
    """Divide logits (or binary log-odds) by ``temperature`` > 0; T > 1 softens, T < 1 sharpens."""

    temperature: float

    def __post_init__(self) -> None:
        positive_number(self.temperature, "calibrator.temperature")
        object.__setattr__(self, "temperature", float(self.temperature))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"method": "temperature", "temperature": T}``."""
        return {"method": "temperature", "temperature": self.temperature}


@dataclass(frozen=True)
class PlattCalibrator:
    """Binary map ``sigmoid(slope * logit(s) + intercept)``; ``slope`` > 0 keeps the ranking."""

    slope: float
    intercept: float

    def __post_init__(self) -> None:
        positive_number(self.slope, "calibrator.slope")
        finite_number(self.intercept, "calibrator.intercept")
        object.__setattr__(self, "slope", float(self.slope))
        object.__setattr__(self, "intercept", float(self.intercept))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"method": "platt", "slope": a, "intercept": b}``."""
        return {"method": "platt", "slope": self.slope, "intercept": self.intercept}


@dataclass(frozen=True)
class IdentityCalibrator:
    """No recalibration: plain softmax of the logits, or the binary score itself."""

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"method": "identity"}``."""
        return {"method": "identity"}


Calibrator = (
    TemperatureCalibrator | PlattCalibrator | IdentityCalibrator | BinaryFamily | MulticlassFamily
)
#: The methods for binary contracts only and for multiclass contracts only.
BINARY_ONLY = ("platt", "beta", "histogram")
MULTICLASS_ONLY = ("vector", "matrix")

MIN_TEMPERATURE, MAX_TEMPERATURE = 0.05, 20.0
MIN_PLATT_SLOPE, MAX_PLATT_SLOPE = 1e-6, 1e6
MAX_PLATT_INTERCEPT = 1e8


def check_bounds(calibrator: Calibrator) -> None:
    """Raise ``CalibrationInputError`` naming the parameter outside the bounds a client may set
    (module docstring)."""
    if isinstance(calibrator, TemperatureCalibrator):
        if not MIN_TEMPERATURE <= calibrator.temperature <= MAX_TEMPERATURE:
            raise CalibrationInputError(
                "calibrator.temperature",
                f"must lie in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}], got {calibrator.temperature}",
            )
    elif isinstance(calibrator, PlattCalibrator):
        if not MIN_PLATT_SLOPE <= calibrator.slope <= MAX_PLATT_SLOPE:
            raise CalibrationInputError(
                "calibrator.slope",
                f"must lie in [{MIN_PLATT_SLOPE:g}, {MAX_PLATT_SLOPE:g}], got {calibrator.slope:g}",
            )
        if abs(calibrator.intercept) > MAX_PLATT_INTERCEPT:
            raise CalibrationInputError(
                "calibrator.intercept",
                f"must lie within +-{MAX_PLATT_INTERCEPT:g}, got {calibrator.intercept:g}",
            )


#: A temperature within this relative distance of a bound sits on it (the fit stops there).
BOUND_TOLERANCE = 1e-6


def bound_warning(calibrator: Calibrator) -> str | None:
    """Say why a calibrator is degenerate, or None: a temperature on a bound of the range the
    fit searches is where the fit stopped, not an optimum (the fit set separates the classes,
    so the loss kept falling as T -> 0.05; or its logits carry no signal, T -> 20)."""
    if not isinstance(calibrator, TemperatureCalibrator):
        return None
    T = calibrator.temperature
    if abs(T - MIN_TEMPERATURE) <= BOUND_TOLERANCE * MIN_TEMPERATURE:
        return (
            f"the temperature {T:g} sits on the lowest value the fit searches: the fit set "
            "separates the classes, so the fit sharpened the probabilities as far as it could; "
            "on new data such a calibrator is confidently wrong"
        )
    if abs(T - MAX_TEMPERATURE) <= BOUND_TOLERANCE * MAX_TEMPERATURE:
        return (
            f"the temperature {T:g} sits on the highest value the fit searches: the fit set's "
            "logits carry almost no signal, so the fit flattened the probabilities as far as it "
            "could"
        )
    return None


_FIELDS: dict[str, tuple[str, ...]] = {
    "temperature": ("temperature",),
    "platt": ("slope", "intercept"),
    "identity": (),
    "isotonic": ("x", "y"),
    "histogram": ("cuts", "values"),
    "beta": ("a", "b", "c"),
    "vector": ("scale", "bias"),
    "matrix": ("weights", "bias"),
}


def calibrator_from_dict(d: Mapping[str, Any], n_classes: int | None = None) -> Calibrator:
    """Build a calibrator from its JSON form; unknown or missing keys, parameters out of their
    bounds or sizes other than ``n_classes`` (K, when given) raise with the field name.

    ``isotonic`` is the binary map (``x``, ``y``) or, with ``per_class``, the multiclass one.
    """
    if not isinstance(d, Mapping):
        raise CalibrationInputError("calibrator", "must be an object")
    method = d.get("method")
    if not isinstance(method, str) or method not in _FIELDS:
        raise CalibrationInputError(
            "calibrator.method", f"must be one of {sorted(_FIELDS)}, got {method!r}"
        )
    fields = _FIELDS[method]
    if method == "isotonic" and "per_class" in d:
        fields = ("per_class",)
    expected = {"method", *fields}
    for key in d:
        if key not in expected:
            raise CalibrationInputError(
                f"calibrator.{key}", f"is not a field of the {method!r} calibrator"
            )
    for key in fields:
        if key not in d:
            raise CalibrationInputError(f"calibrator.{key}", "is required")
    family = _family_from_dict(method, d, n_classes)
    if family is not None:
        return family
    if method == "temperature":
        return TemperatureCalibrator(positive_number(d["temperature"], "calibrator.temperature"))
    if method == "platt":
        return PlattCalibrator(
            positive_number(d["slope"], "calibrator.slope"),
            finite_number(d["intercept"], "calibrator.intercept"),
        )
    return IdentityCalibrator()


def _family_from_dict(
    method: str, d: Mapping[str, Any], n_classes: int | None
) -> Calibrator | None:
    field = "calibrator"
    if method == "isotonic":
        if "per_class" in d:
            return IsotonicOvRCalibrator.from_dict(d, field, n_classes)
        return IsotonicCalibrator.from_dict(d, field)
    if method == "histogram":
        return HistogramCalibrator.from_dict(d, field)
    if method == "beta":
        return BetaCalibrator.from_dict(d, field)
    if method == "vector":
        return VectorCalibrator.from_dict(d, field, n_classes)
    if method == "matrix":
        return MatrixCalibrator.from_dict(d, field, n_classes)
    return None


def task_problem(calibrator: Calibrator, task: str | None) -> tuple[str, str] | None:
    """``(field, why)`` when a calibrator cannot serve a task, else None."""
    method = calibrator.to_dict()["method"]
    if task == Task.MULTICLASS and method in BINARY_ONLY:
        return "calibrator.method", f"{method} calibration is for binary contracts only"
    if task == Task.BINARY and method in MULTICLASS_ONLY:
        return "calibrator.method", f"{method} scaling is for multiclass contracts only"
    if task == Task.MULTICLASS and isinstance(calibrator, IsotonicCalibrator):
        return "calibrator.per_class", "a multiclass isotonic calibrator lists one map per class"
    if task == Task.BINARY and isinstance(calibrator, IsotonicOvRCalibrator):
        return "calibrator.per_class", "a binary isotonic calibrator is one map (x, y)"
    return None


def calibrated_logits(calibrator: Calibrator, logits: FloatArray) -> tuple[FloatArray, float]:
    """``(z', T)`` with ``p = softmax(z' / T)`` for validated (N, K) logits: temperature and
    identity return the logits themselves and their temperature; the multiclass families their
    calibrated logits and T = 1. Binary-only calibrators are refused."""
    if isinstance(calibrator, VectorCalibrator | MatrixCalibrator | IsotonicOvRCalibrator):
        return calibrator.logits(logits), 1.0
    return logits, temperature_of(calibrator)


def temperature_of(calibrator: Calibrator) -> float:
    """Return the multiclass temperature of ``calibrator`` (1 for identity); Platt is refused."""
    if isinstance(calibrator, TemperatureCalibrator):
        return calibrator.temperature
    if isinstance(calibrator, IdentityCalibrator):
        return 1.0
    method = calibrator.to_dict()["method"]
    raise CalibrationInputError(
        "calibrator.method", f"{method} is not a temperature for multiclass logits"
    )


def multiclass_probabilities(calibrator: Calibrator, logits: Any) -> FloatArray:
    """Return (N, K) calibrated probabilities for (N, K) logits."""
    z, T = calibrated_logits(calibrator, logit_matrix(logits))
    return softmax(z, T)


def binary_log_odds(calibrator: Calibrator, scores: FloatArray) -> FloatArray:
    """Return the (N,) calibrated log-odds of validated scores in [0, 1].

    Identity gives ``logit(s)``, which is clipped: use ``binary_probabilities`` for ``p = s``.
    """
    if isinstance(calibrator, BetaCalibrator):
        return calibrator.log_odds(scores)
    if isinstance(calibrator, IsotonicCalibrator | HistogramCalibrator):
        return logit_unchecked(calibrator.apply(scores))
    if isinstance(calibrator, VectorCalibrator | MatrixCalibrator | IsotonicOvRCalibrator):
        raise CalibrationInputError(
            "calibrator.method", "a multiclass calibrator cannot calibrate binary scores"
        )
    z = logit_unchecked(scores)
    if isinstance(calibrator, PlattCalibrator):
        z *= calibrator.slope
        z += calibrator.intercept
    elif isinstance(calibrator, TemperatureCalibrator):
        z /= calibrator.temperature
    return z


def binary_probabilities(calibrator: Calibrator, scores: Any) -> FloatArray:
    """Return the (N,) calibrated P(positive) for (N,) scores in [0, 1]."""
    s = unit_scores(scores)
    if isinstance(calibrator, IdentityCalibrator):
        return np.array(s, dtype=np.float64)
    if isinstance(calibrator, IsotonicCalibrator | HistogramCalibrator):
        return calibrator.apply(s)
    return sigmoid_unchecked(binary_log_odds(calibrator, s))


def binary_map(calibrator: Calibrator, scores: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(p, log_odds)`` of validated (N,) scores: the calibrated P(positive) and the log-odds
    the NLL and the refit temperature use (identity, isotonic and histogram: ``p`` is exact and
    the log-odds are its clipped logit)."""
    log_odds = binary_log_odds(calibrator, scores)
    if isinstance(calibrator, IdentityCalibrator):
        return np.array(scores, dtype=np.float64), log_odds
    if isinstance(calibrator, IsotonicCalibrator | HistogramCalibrator):
        return calibrator.apply(scores), log_odds
    return sigmoid_unchecked(log_odds), log_odds
