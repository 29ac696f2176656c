"""What a reviewer should know of a fitted calibrator: the warnings of a fit, for every family.

Each warning has a ``code`` (``FitWarningCode``) and a message with its numbers. From the
calibrator and the fit's baseline (mean NLL in nats, natural log; row counts):

* ``eval_nll_worse``: the calibrated model's eval NLL is worse than the uncalibrated model's
  beyond its noise: the mean per-row difference (calibrated minus uncalibrated) exceeds
  ``NOISE_SE`` = 2 standard errors of the paired differences, ``sd / sqrt(n)``.
* ``parameter_on_bound``: a parameter sits on a bound of its range (``parameters_on_bounds``),
  where a fit stops rather than reaches an optimum.
* ``overfit``: the fit NLL is far below the eval NLL: the calibrator's optimism, the calibrated
  model's eval-minus-fit NLL gap less the uncalibrated model's gap on the same two sets (which
  takes out how the sets differ), exceeds ``OVERFIT_NATS`` = 0.02 nats. A maximum-likelihood
  fit of k parameters has an expected optimism of about ``k / n_fit`` nats, so 0.02 is what
  12 free parameters cost on 600 fit rows, or one parameter on 50.
* ``small_fit_set`` and ``small_eval_set``: a set has fewer rows than the gate's default
  ``min_eval_samples``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from service.calibration.binary_families import (
    MAX_BETA_INTERCEPT,
    MAX_BETA_SHAPE,
    BetaCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
)
from service.calibration.calibrators import (
    BOUND_TOLERANCE,
    MAX_PLATT_INTERCEPT,
    MAX_PLATT_SLOPE,
    MIN_PLATT_SLOPE,
    Calibrator,
    PlattCalibrator,
    bound_warning,
)
from service.calibration.multiclass_families import (
    IsotonicOvRCalibrator,
    MatrixCalibrator,
    VectorCalibrator,
)
from service.calibration.nll_comparison import NllDifference
from service.calibration.odir import MAX_BIAS, MAX_SCALE

NOISE_SE = 2.0
OVERFIT_NATS = 0.02


class FitWarningCode(StrEnum):
    """The closed vocabulary of fit warnings (module docstring)."""

    EVAL_NLL_WORSE = "eval_nll_worse"
    PARAMETER_ON_BOUND = "parameter_on_bound"
    OVERFIT = "overfit"
    SMALL_FIT_SET = "small_fit_set"
    SMALL_EVAL_SET = "small_eval_set"


@dataclass(frozen=True)
class FitWarning:
    """One warning: its code and a message with its numbers."""

    code: FitWarningCode
    message: str


@dataclass(frozen=True)
class FitEvidence:
    """A fit's baseline numbers: each set's rows and mean NLL (nats) uncalibrated and
    calibrated, and the eval set's paired per-row NLL differences (None when not stored)."""

    fit_rows: int
    eval_rows: int
    fit_nll: tuple[float, float]
    eval_nll: tuple[float, float]
    eval_difference: NllDifference | None


def _on(value: float, bound: float) -> bool:
    return abs(abs(value) - bound) <= BOUND_TOLERANCE * bound


def parameters_on_bounds(calibrator: Calibrator) -> list[str]:
    """Why each parameter on a bound of its range sits there (empty when none): temperature at
    0.05 or 20; Platt slope at 1e-6 or 1e6, intercept at +-1e8; beta shape ``a`` or ``b`` at 0
    (the monotone constraint holds it) or 1,000, ``c`` at +-1e6; a vector or matrix entry at
    +-100 or a bias at +-1e4; an isotonic or histogram probability of exactly 0 or 1 (a row
    there that turns out otherwise costs the NLL of the clipped probability, 13.8 nats)."""
    temperature = bound_warning(calibrator)
    if temperature is not None:
        return [temperature]
    out: list[str] = []
    if isinstance(calibrator, PlattCalibrator):
        if _on(calibrator.slope, MIN_PLATT_SLOPE) or _on(calibrator.slope, MAX_PLATT_SLOPE):
            out.append(f"the Platt slope {calibrator.slope:g} sits on a bound of [1e-6, 1e6]")
        if _on(calibrator.intercept, MAX_PLATT_INTERCEPT):
            out.append(f"the Platt intercept {calibrator.intercept:g} sits on the bound +-1e8")
    elif isinstance(calibrator, BetaCalibrator):
        for name, value in (("a", calibrator.a), ("b", calibrator.b)):
            if value == 0.0:
                out.append(
                    f"the beta shape {name} is 0, the bound the monotone map keeps it at: the "
                    "fit set would have it decrease"
                )
            elif _on(value, MAX_BETA_SHAPE):
                out.append(f"the beta shape {name} {value:g} sits on the bound 1000")
        if _on(calibrator.c, MAX_BETA_INTERCEPT):
            out.append(f"the beta intercept c {calibrator.c:g} sits on the bound +-1e6")
    elif isinstance(calibrator, VectorCalibrator | MatrixCalibrator):
        weights, bias = calibrator._arrays
        scales = sum(_on(float(w), MAX_SCALE) for w in weights.ravel())
        biases = sum(_on(float(b), MAX_BIAS) for b in bias)
        if scales or biases:
            out.append(
                f"{scales} weight(s) sit on +-{MAX_SCALE:g} and {biases} bias(es) on "
                f"+-{MAX_BIAS:g}: the fit set separates the classes, so the fit sharpened the "
                "probabilities as far as it could"
            )
    else:
        maps: tuple[IsotonicCalibrator | HistogramCalibrator, ...] = ()
        if isinstance(calibrator, IsotonicOvRCalibrator):
            maps = calibrator.per_class
        elif isinstance(calibrator, IsotonicCalibrator | HistogramCalibrator):
            maps = (calibrator,)
        extremes = sum(
            1
            for m in maps
            for v in (m.y if isinstance(m, IsotonicCalibrator) else m.values)
            if v in (0.0, 1.0)
        )
        if extremes:
            out.append(
                f"{extremes} step(s) of the map give a probability of exactly 0 or 1: a row "
                "there that turns out otherwise costs 13.8 nats (a clipped probability)"
            )
    return out


def fit_warnings(calibrator: Calibrator, evidence: FitEvidence, min_rows: int) -> list[FitWarning]:
    """The warnings of a fit (module docstring), in the order of ``FitWarningCode``;
    ``min_rows`` is the gate's default ``min_eval_samples``."""
    out: list[FitWarning] = []
    d = evidence.eval_difference
    if d is not None and d.n > 1:
        se = d.sd / math.sqrt(d.n)
        if d.mean > NOISE_SE * se:
            out.append(
                FitWarning(
                    FitWarningCode.EVAL_NLL_WORSE,
                    f"the eval NLL {evidence.eval_nll[1]:.4g} is worse than the uncalibrated "
                    f"model's {evidence.eval_nll[0]:.4g}: the paired mean difference "
                    f"{d.mean:.4g} is more than {NOISE_SE:g} standard errors ({se:.2g}) above 0",
                )
            )
    for why in parameters_on_bounds(calibrator):
        out.append(FitWarning(FitWarningCode.PARAMETER_ON_BOUND, why))
    optimism = (evidence.eval_nll[1] - evidence.fit_nll[1]) - (
        evidence.eval_nll[0] - evidence.fit_nll[0]
    )
    if optimism > OVERFIT_NATS:
        out.append(
            FitWarning(
                FitWarningCode.OVERFIT,
                f"the fit NLL {evidence.fit_nll[1]:.4g} is far below the eval NLL "
                f"{evidence.eval_nll[1]:.4g}: the calibrator's optimism {optimism:.4g} nats "
                f"(its eval-minus-fit gap less the uncalibrated model's) exceeds {OVERFIT_NATS:g}",
            )
        )
    for code, name, rows in (
        (FitWarningCode.SMALL_FIT_SET, "fit", evidence.fit_rows),
        (FitWarningCode.SMALL_EVAL_SET, "eval", evidence.eval_rows),
    ):
        if rows < min_rows:
            out.append(
                FitWarning(
                    code,
                    f"the {name} set has {rows} rows, fewer than the gate's default "
                    f"min_eval_samples {min_rows}",
                )
            )
    return out
