"""Labeled sets and calibrators a client sends: the logit bound, the calibrator bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.calibration import CalibrationInputError
from service.calibration._checks import MAX_ABS_LOGIT
from service.calibration.calibrators import (
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    check_bounds,
)
from service.calibration.fitting import T_MAX, T_MIN
from service.calibration.stats import multiclass_stats
from service.common.errors import ErrorCollector
from service.contracts.labeled_sets import parse_inputs


def fields_of(errors: ErrorCollector) -> list[tuple[str, str]]:
    return [(d.field, d.message) for d in errors.details]


def test_labeled_sets_bound_logits_and_name_the_row() -> None:
    errors = ErrorCollector()
    rows = [[0.0, 1.0], [2e6, 0.0]]
    assert parse_inputs(rows, "fit.logits", task="multiclass", n_classes=2, errors=errors) is None
    assert [field for field, _ in fields_of(errors)] == ["fit.logits[1]"]


def test_the_logit_bound_keeps_statistics_finite_at_the_smallest_temperature() -> None:
    z = np.array([[MAX_ABS_LOGIT, -MAX_ABS_LOGIT] + [-MAX_ABS_LOGIT] * 998] * 4)
    stats = multiclass_stats(
        z, np.array([1, 1, 2, 3]), np.linspace(0, 1, 101), calibrator=TemperatureCalibrator(T_MIN)
    )
    assert np.isfinite(stats.nll_sum) and stats.nll_sum == pytest.approx(4 * 2e6 / T_MIN, rel=1e-6)


@pytest.mark.parametrize(
    ("calibrator", "field"),
    [
        (TemperatureCalibrator(T_MIN), None),
        (TemperatureCalibrator(T_MAX), None),
        (TemperatureCalibrator(T_MIN * 0.99), "calibrator.temperature"),
        (TemperatureCalibrator(T_MAX * 1.01), "calibrator.temperature"),
        (PlattCalibrator(1e6, 1e8), None),
        (PlattCalibrator(2e6, 0.0), "calibrator.slope"),
        (PlattCalibrator(1e-7, 0.0), "calibrator.slope"),
        (PlattCalibrator(1.0, -1.1e8), "calibrator.intercept"),
        (IdentityCalibrator(), None),
    ],
)
def test_calibrator_bounds(calibrator: Any, field: str | None) -> None:
    if field is None:
        check_bounds(calibrator)
    else:
        with pytest.raises(CalibrationInputError) as info:
            check_bounds(calibrator)
        assert info.value.field == field
