"""Each fit warning is raised on its side of its threshold and not on the other, and every
family's parameters on a bound are named."""

from __future__ import annotations

import math

import pytest

from service.calibration.binary_families import (
    BetaCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
)
from service.calibration.calibrators import (
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
)
from service.calibration.fit_warnings import (
    NOISE_SE,
    OVERFIT_NATS,
    FitEvidence,
    FitWarningCode,
    fit_warnings,
    parameters_on_bounds,
)
from service.calibration.multiclass_families import (
    IsotonicOvRCalibrator,
    MatrixCalibrator,
    VectorCalibrator,
)
from service.calibration.nll_comparison import NllDifference

QUIET = FitEvidence(
    fit_rows=600,
    eval_rows=600,
    fit_nll=(0.30, 0.29),
    eval_nll=(0.31, 0.30),
    eval_difference=NllDifference(n=600, mean=-0.01, sd=0.1),
)


def _codes(evidence: FitEvidence, calibrator=None, min_rows: int = 500) -> list[FitWarningCode]:
    chosen = TemperatureCalibrator(1.2) if calibrator is None else calibrator
    return [w.code for w in fit_warnings(chosen, evidence, min_rows)]


def test_a_quiet_fit_has_no_warnings():
    assert _codes(QUIET) == []


@pytest.mark.parametrize(("ses", "warned"), [(NOISE_SE * 0.99, False), (NOISE_SE * 1.01, True)])
def test_eval_nll_worse_beyond_its_noise(ses: float, warned: bool):
    sd, n = 0.2, 900
    mean = ses * sd / math.sqrt(n)
    evidence = FitEvidence(600, 900, (0.3, 0.3), (0.3, 0.3 + mean), NllDifference(n, mean, sd))
    assert (FitWarningCode.EVAL_NLL_WORSE in _codes(evidence)) is warned


@pytest.mark.parametrize(
    ("gap", "warned"), [(OVERFIT_NATS * 0.99, False), (OVERFIT_NATS * 1.01, True)]
)
def test_overfit_is_the_calibrators_optimism_beyond_the_uncalibrated_gap(gap: float, warned: bool):
    # The uncalibrated model is itself 0.05 worse on eval than on fit: that gap is the sets'.
    evidence = FitEvidence(600, 600, (0.30, 0.28), (0.35, 0.33 + gap), None)
    assert (FitWarningCode.OVERFIT in _codes(evidence)) is warned


def test_small_sets_are_each_named():
    evidence = FitEvidence(499, 500, QUIET.fit_nll, QUIET.eval_nll, QUIET.eval_difference)
    warnings = fit_warnings(TemperatureCalibrator(1.0), evidence, 500)
    assert [w.code for w in warnings] == [FitWarningCode.SMALL_FIT_SET]
    assert "499 rows" in warnings[0].message
    evidence = FitEvidence(500, 12, QUIET.fit_nll, QUIET.eval_nll, QUIET.eval_difference)
    assert _codes(evidence) == [FitWarningCode.SMALL_EVAL_SET]


ON_BOUND = [
    TemperatureCalibrator(0.05),
    TemperatureCalibrator(20.0),
    PlattCalibrator(1e6, 0.0),
    PlattCalibrator(1.0, -1e8),
    BetaCalibrator(0.0, 1.2, 0.1),
    BetaCalibrator(1.0, 1000.0, 0.1),
    VectorCalibrator((1.0, 100.0), (0.0, 0.0)),
    MatrixCalibrator(((1.0, 0.0), (0.0, 1.0)), (1e4, 0.0)),
    IsotonicCalibrator((0.1, 0.9), (0.0, 0.8)),
    HistogramCalibrator((0.5,), (0.2, 1.0)),
    IsotonicOvRCalibrator(
        (IsotonicCalibrator((0.1, 0.9), (0.1, 0.8)), IsotonicCalibrator((0.1, 0.9), (0.2, 1.0)))
    ),
]
INSIDE = [
    TemperatureCalibrator(1.3),
    PlattCalibrator(1.1, 0.2),
    BetaCalibrator(1.0, 1.2, 0.1),
    VectorCalibrator((1.0, 99.0), (0.0, 3.0)),
    MatrixCalibrator(((1.0, -2.0), (0.5, 1.0)), (2.0, 0.0)),
    IsotonicCalibrator((0.1, 0.9), (0.01, 0.99)),
    HistogramCalibrator((0.5,), (0.2, 0.9)),
    IsotonicOvRCalibrator(
        (IsotonicCalibrator((0.1, 0.9), (0.1, 0.8)), IsotonicCalibrator((0.1, 0.9), (0.2, 0.9)))
    ),
    IdentityCalibrator(),
]


@pytest.mark.parametrize("calibrator", ON_BOUND, ids=lambda c: str(c.to_dict()))
def test_a_parameter_on_a_bound_is_warned_for_every_family(calibrator):
    assert len(parameters_on_bounds(calibrator)) == 1
    assert _codes(QUIET, calibrator) == [FitWarningCode.PARAMETER_ON_BOUND]


@pytest.mark.parametrize("calibrator", INSIDE, ids=lambda c: str(c.to_dict()))
def test_parameters_inside_their_bounds_are_not(calibrator):
    assert parameters_on_bounds(calibrator) == []
    assert _codes(QUIET, calibrator) == []
