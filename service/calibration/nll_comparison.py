"""Does a calibrator make held-out NLL worse? A paired test on per-row differences.

Comparing two mean NLLs of the same rows ignores that they move together: the per-row
differences ``d_i = nll_calibrated_i - nll_uncalibrated_i`` have a far smaller spread than
either loss. And a fitted calibrator is never exactly the best one: when the model is already
calibrated, k parameters fitted on n_fit rows cost about ``chi2_k / (2 n_fit)`` nats of
held-out NLL (the excess risk of a maximum-likelihood fit), which a large evaluation set
resolves. So the calibrator counts as worse only when the one-sided 97.5% lower confidence bound
of the mean difference (Student t) exceeds that fitting noise at its 97.5% quantile,
``chi2.ppf(0.975, k) / (2 n_fit)``. Natural logs; nats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2
from scipy.stats import t as student_t

from service.calibration._checks import finite_number
from service.calibration.calibrators import (
    Calibrator,
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.stats import row_nll

LEVEL = 0.975


@dataclass(frozen=True)
class NllDifference:
    """Per-row NLL differences (calibrated minus uncalibrated) of n rows: mean and sd, nats."""

    n: int
    mean: float
    sd: float

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"n", "mean", "sd"}``."""
        return {"n": self.n, "mean": self.mean, "sd": self.sd}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], field: str = "nll_difference") -> NllDifference:
        """Rebuild from ``to_dict`` output; unknown or missing keys raise with the field."""
        if not isinstance(d, Mapping) or set(d) != {"n", "mean", "sd"}:
            raise CalibrationInputError(field, "must be an object with keys n, mean and sd")
        n = d["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CalibrationInputError(f"{field}.n", "must be an integer >= 1")
        sd = finite_number(d["sd"], f"{field}.sd")
        if sd < 0:
            raise CalibrationInputError(f"{field}.sd", "must be >= 0")
        return cls(n, finite_number(d["mean"], f"{field}.mean"), sd)


def nll_difference(task: str, inputs: Any, labels: Any, calibrator: Calibrator) -> NllDifference:
    """Per-row NLL of ``calibrator`` minus that of the identity on one labeled set.

    ``inputs``: (N, K) logits (multiclass) or (N,) scores in [0, 1] (binary); N >= 1.
    """
    after = row_nll(task, inputs, labels, calibrator)
    before = row_nll(task, inputs, labels, IdentityCalibrator())
    d = after - before
    if d.size == 0:
        raise CalibrationInputError("labels", "needs at least one row")
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    return NllDifference(int(d.size), float(d.mean()), sd)


def fitted_parameters(calibrator: Calibrator) -> int:
    """How many parameters the calibrator fits: temperature 1, Platt 2, identity 0."""
    if isinstance(calibrator, TemperatureCalibrator):
        return 1
    if isinstance(calibrator, PlattCalibrator):
        return 2
    return 0


@dataclass(frozen=True)
class NllComparison:
    """The paired test: ``worse`` when ``lower_bound > tolerance`` (nats, module docstring)."""

    mean_difference: float
    lower_bound: float
    tolerance: float
    worse: bool


def compare_nll(difference: NllDifference, parameters: int, fit_rows: int) -> NllComparison:
    """Test whether the calibrator makes NLL worse beyond the noise of fitting it."""
    if fit_rows < 1:
        raise CalibrationInputError("fit_rows", "must be >= 1")
    n = difference.n
    spread = difference.sd / math.sqrt(n) if n > 1 else math.inf
    quantile = float(student_t.ppf(LEVEL, n - 1)) if n > 1 else math.inf
    lower = difference.mean - quantile * spread if np.isfinite(spread) else -math.inf
    tolerance = float(chi2.ppf(LEVEL, parameters)) / (2.0 * fit_rows) if parameters else 0.0
    return NllComparison(difference.mean, lower, tolerance, lower > tolerance)
