"""Does a calibrator make held-out NLL worse? A paired test on per-row differences.

What the gate's ``nll_improvement`` check protects: the calibrator must not make the held-out
probabilities worse than the uncalibrated model's by a proper score, the log loss (natural
logs, as ``stats.row_nll`` computes it: calibrated probabilities floored at 1e-6, so one row
costs at most 13.8 nats; log loss is proper, and floored it stays proper for true probabilities
in [1e-6, 1 - 1e-6]). Its truth is the population's expected log loss under the fitted
calibrator minus that of the uncalibrated model, ``delta = E[d]``: the per-row differences of an
evaluation set are independent draws of ``d``, so the paired test below estimates exactly that.
``judge_nll`` fails when the evidence shows ``delta`` above a materiality margin,
``NLL_MARGIN`` = 1% of the uncalibrated held-out log loss: the one-sided 97.5% lower bound of
``mean(d)`` exceeds ``NLL_MARGIN x uncalibrated``. A calibrator truly no worse then fails in at
most about 2.5% of evaluation sets, one truly worse by 5% of the uncalibrated log loss is
caught at 3,000 rows (the rates per family are in ``bench/bench_statistics.py``'s table 9).
A calibrator fitted on few rows is worse than the identity on an already calibrated model by
its fitting noise (about ``chi2_k / (2 n_fit)`` nats); that loss is real, and once it exceeds the
margin the check says so.

Comparing two mean NLLs of the same rows ignores that they move together: the per-row
differences ``d_i = nll_calibrated_i - nll_uncalibrated_i`` have a far smaller spread than
either loss. ``compare_nll`` is the older rule, kept for its callers: it counts the calibrator
worse only when the lower bound exceeds the fitting noise at its 97.5% quantile,
``chi2.ppf(0.975, k) / (2 n_fit)``, which for many-parameter families (isotonic, histogram,
vector) lets through calibrators that truly lose 5-15% of log loss.

The bound is a studentized bootstrap (bootstrap-t) one when the rows are at hand (fit time, a
fresh evaluation): ``mean - q* sd / sqrt(n)``, ``q*`` the 97.5% quantile of the resampled
``(mean* - mean) / (sd* / sqrt(n))`` over ``BOOTSTRAP_RESAMPLES`` resamples from a fixed seed.
Differences are heavy-tailed exactly when a calibrator fails badly (a few confidently wrong rows
cost tens of nats each); that inflates the sample sd, and a Student-t bound then hides the
damage, while the bootstrap-t quantile follows the skewness. A stored summary without the bound
(registered before it was kept) falls back to Student t.
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
BOOTSTRAP_RESAMPLES = 999
BOOTSTRAP_SEED = 20261201
#: Resampled values held in memory at once.
_CHUNK = 10_000_000


@dataclass(frozen=True)
class NllDifference:
    """Per-row NLL differences (calibrated minus uncalibrated) of n rows: mean and sd, nats,
    and the bootstrap-t one-sided 97.5% lower bound of the mean when it was computed."""

    n: int
    mean: float
    sd: float
    lower_bound: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"n", "mean", "sd"}``, with ``"lower_bound"`` when known."""
        out: dict[str, Any] = {"n": self.n, "mean": self.mean, "sd": self.sd}
        if self.lower_bound is not None:
            out["lower_bound"] = self.lower_bound
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], field: str = "nll_difference") -> NllDifference:
        """Rebuild from ``to_dict`` output; unknown or missing keys raise with the field."""
        if not isinstance(d, Mapping) or not {"n", "mean", "sd"} <= set(d) <= _KEYS:
            raise CalibrationInputError(
                field, "must be an object with keys n, mean and sd (and optionally lower_bound)"
            )
        n = d["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CalibrationInputError(f"{field}.n", "must be an integer >= 1")
        sd = finite_number(d["sd"], f"{field}.sd")
        if sd < 0:
            raise CalibrationInputError(f"{field}.sd", "must be >= 0")
        mean = finite_number(d["mean"], f"{field}.mean")
        lower = d.get("lower_bound")
        if lower is not None:
            lower = finite_number(lower, f"{field}.lower_bound")
        return cls(n, mean, sd, lower)


_KEYS = {"n", "mean", "sd", "lower_bound"}


def bootstrap_t_lower(d: Any, level: float = LEVEL) -> float:
    """The studentized-bootstrap one-sided ``level`` lower confidence bound of ``mean(d)``.

    ``BOOTSTRAP_RESAMPLES`` resamples from ``BOOTSTRAP_SEED`` (deterministic). Fewer than 3 rows,
    or rows all equal: the mean itself (there is no spread to resample).
    """
    d = np.asarray(d, dtype=np.float64)
    n = d.size
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if n < 3 or sd == 0.0:
        return mean
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    per_chunk = max(1, _CHUNK // n)
    t: list[np.ndarray] = []
    left = BOOTSTRAP_RESAMPLES
    while left:
        b = min(left, per_chunk)
        sample = d[rng.integers(0, n, size=(b, n))]
        spread = sample.std(axis=1, ddof=1) / math.sqrt(n)
        shift = sample.mean(axis=1) - mean
        t.append(np.where(spread > 0, shift / np.where(spread > 0, spread, 1.0), 0.0))
        left -= b
    q = float(np.quantile(np.concatenate(t), level))
    return min(mean, mean - q * sd / math.sqrt(n))


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
    return NllDifference(int(d.size), float(d.mean()), sd, bootstrap_t_lower(d))


def fitted_parameters(calibrator: Calibrator) -> int:
    """How many parameters the calibrator fits: temperature 1, Platt 2, identity 0, a family
    its ``parameters`` (isotonic: its distinct levels; histogram: its bins)."""
    if isinstance(calibrator, TemperatureCalibrator):
        return 1
    if isinstance(calibrator, PlattCalibrator):
        return 2
    if isinstance(calibrator, IdentityCalibrator):
        return 0
    return int(calibrator.parameters)


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
    if difference.lower_bound is not None and n > 1:
        lower = difference.lower_bound
    else:
        spread = difference.sd / math.sqrt(n) if n > 1 else math.inf
        quantile = float(student_t.ppf(LEVEL, n - 1)) if n > 1 else math.inf
        lower = difference.mean - quantile * spread if np.isfinite(spread) else -math.inf
    tolerance = float(chi2.ppf(LEVEL, parameters)) / (2.0 * fit_rows) if parameters else 0.0
    return NllComparison(difference.mean, lower, tolerance, lower > tolerance)


#: The materiality margin of ``judge_nll``: a share of the uncalibrated held-out log loss.
NLL_MARGIN = 0.01


def judge_nll(difference: NllDifference, uncalibrated_nll: float) -> NllComparison:
    """The gate's rule (module docstring): ``worse`` when the one-sided 97.5% lower bound of
    the mean per-row difference exceeds ``NLL_MARGIN x uncalibrated_nll`` (nats; the
    comparison's ``tolerance``). The bound is the stored bootstrap-t one, else Student t."""
    n = difference.n
    if difference.lower_bound is not None and n > 1:
        lower = difference.lower_bound
    elif n > 1:
        quantile = float(student_t.ppf(LEVEL, n - 1))
        lower = difference.mean - quantile * difference.sd / math.sqrt(n)
    else:
        lower = -math.inf
    margin = NLL_MARGIN * uncalibrated_nll if math.isfinite(uncalibrated_nll) else 0.0
    return NllComparison(difference.mean, lower, margin, lower > margin)
