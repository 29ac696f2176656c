"""Calibrators: the fitted maps from raw model outputs to calibrated probabilities.

* ``TemperatureCalibrator(T)``: multiclass ``softmax(z / T)``; binary ``sigmoid(logit(s) / T)``.
* ``PlattCalibrator(a, b)``: binary only, ``sigmoid(a * logit(s) + b)`` with ``a > 0``.
* ``IdentityCalibrator()``: multiclass ``softmax(z)``; binary ``p = s``.

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
    positive_number,
    unit_scores,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.probabilities import logit_unchecked, sigmoid_unchecked, softmax


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


Calibrator = TemperatureCalibrator | PlattCalibrator | IdentityCalibrator

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
}


def calibrator_from_dict(d: Mapping[str, Any]) -> Calibrator:
    """Build a calibrator from its JSON form; unknown or missing keys raise with the field name."""
    if not isinstance(d, Mapping):
        raise CalibrationInputError("calibrator", "must be an object")
    method = d.get("method")
    if not isinstance(method, str) or method not in _FIELDS:
        raise CalibrationInputError(
            "calibrator.method", f"must be one of {sorted(_FIELDS)}, got {method!r}"
        )
    expected = {"method", *_FIELDS[method]}
    for key in d:
        if key not in expected:
            raise CalibrationInputError(
                f"calibrator.{key}", f"is not a field of the {method!r} calibrator"
            )
    for key in _FIELDS[method]:
        if key not in d:
            raise CalibrationInputError(f"calibrator.{key}", "is required")
    if method == "temperature":
        return TemperatureCalibrator(positive_number(d["temperature"], "calibrator.temperature"))
    if method == "platt":
        return PlattCalibrator(
            positive_number(d["slope"], "calibrator.slope"),
            finite_number(d["intercept"], "calibrator.intercept"),
        )
    return IdentityCalibrator()


def temperature_of(calibrator: Calibrator) -> float:
    """Return the multiclass temperature of ``calibrator`` (1 for identity); Platt is refused."""
    if isinstance(calibrator, TemperatureCalibrator):
        return calibrator.temperature
    if isinstance(calibrator, IdentityCalibrator):
        return 1.0
    raise CalibrationInputError(
        "calibrator.method", "platt is binary-only and cannot calibrate multiclass logits"
    )


def multiclass_probabilities(calibrator: Calibrator, logits: Any) -> FloatArray:
    """Return (N, K) calibrated probabilities for (N, K) logits."""
    return softmax(logits, temperature_of(calibrator))


def binary_log_odds(calibrator: Calibrator, scores: FloatArray) -> FloatArray:
    """Return the (N,) calibrated log-odds of validated scores in [0, 1].

    Identity gives ``logit(s)``, which is clipped: use ``binary_probabilities`` for ``p = s``.
    """
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
    return sigmoid_unchecked(binary_log_odds(calibrator, s))
