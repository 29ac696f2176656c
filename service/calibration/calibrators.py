"""Calibrators: the fitted maps from raw model outputs to calibrated probabilities.

* ``TemperatureCalibrator(T)``: multiclass ``softmax(z / T)``; binary ``sigmoid(logit(s) / T)``.
* ``PlattCalibrator(a, b)``: binary only, ``sigmoid(a * logit(s) + b)`` with ``a > 0``.
* ``IdentityCalibrator()``: multiclass ``softmax(z)``; binary ``p = s``.

Binary scores ``s`` are probabilities in [0, 1]; ``logit`` clips them to [1e-6, 1 - 1e-6].
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
