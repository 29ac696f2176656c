"""Calibrator construction from JSON and the probability maps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.calibration import (
    CalibrationInputError,
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    binary_probabilities,
    calibrator_from_dict,
    multiclass_probabilities,
    softmax,
)


@pytest.mark.parametrize(
    "cal",
    [TemperatureCalibrator(1.5), PlattCalibrator(0.3, -0.2), IdentityCalibrator()],
)
def test_round_trip(cal):
    assert calibrator_from_dict(cal.to_dict()) == cal


@pytest.mark.parametrize(
    ("d", "field"),
    [
        ({"method": "temperature", "temperature": 0}, "calibrator.temperature"),
        ({"method": "temperature", "temperature": -2.0}, "calibrator.temperature"),
        ({"method": "temperature", "temperature": "1"}, "calibrator.temperature"),
        ({"method": "temperature", "temperature": float("inf")}, "calibrator.temperature"),
        ({"method": "temperature"}, "calibrator.temperature"),
        ({"method": "temperature", "temperature": 1.0, "slope": 1}, "calibrator.slope"),
        ({"method": "platt", "slope": 0.0, "intercept": 0.0}, "calibrator.slope"),
        ({"method": "platt", "slope": 1.0}, "calibrator.intercept"),
        ({"method": "platt", "slope": 1.0, "intercept": None}, "calibrator.intercept"),
        ({"method": "identity", "temperature": 1.0}, "calibrator.temperature"),
        ({"method": "isotonic"}, "calibrator.x"),
        ({"method": "splines"}, "calibrator.method"),
        ({}, "calibrator.method"),
        ([], "calibrator"),
    ],
)
def test_invalid_dicts_name_the_field(d, field):
    with pytest.raises(CalibrationInputError) as info:
        calibrator_from_dict(d)
    assert info.value.field == field


def test_multiclass_maps():
    z = np.array([[2.0, 1.0, -1.0], [0.0, 0.0, 0.0]])
    assert np.allclose(multiclass_probabilities(IdentityCalibrator(), z), softmax(z))
    assert np.allclose(multiclass_probabilities(TemperatureCalibrator(2.0), z), softmax(z / 2.0))
    assert np.allclose(softmax(z).sum(axis=1), 1.0)
    e = np.exp([1.0, 0.5, -0.5])
    assert multiclass_probabilities(TemperatureCalibrator(2.0), z)[0] == pytest.approx(e / e.sum())


def test_binary_maps():
    s = np.array([0.0, 0.25, 0.5, 0.9, 1.0])
    assert binary_probabilities(IdentityCalibrator(), s).tolist() == s.tolist()
    clipped = np.clip(s, 1e-6, 1 - 1e-6)
    z = np.log(clipped / (1 - clipped))
    want_t = 1 / (1 + np.exp(-z / 3.0))
    want_p = 1 / (1 + np.exp(-(0.4 * z - 1.0)))
    assert binary_probabilities(TemperatureCalibrator(3.0), s) == pytest.approx(want_t, abs=1e-15)
    assert binary_probabilities(PlattCalibrator(0.4, -1.0), s) == pytest.approx(want_p, abs=1e-15)
    assert binary_probabilities(TemperatureCalibrator(1.0), [0.25])[0] == pytest.approx(0.25)
    assert math.isclose(binary_probabilities(PlattCalibrator(1.0, 0.0), [0.5])[0], 0.5)
