"""Drift of a window's reading against the contract's baseline reading, and the policy rule.

The status is decided on evidence (``ece_inference``), never on the plug-in ECE. First match:

1. ``insufficient_data``: fewer than ``min_labeled`` labeled rows (or none): never an alert.
2. ``alert``: the window's 95% ECE interval lies above ``max_ece`` (lower bound > max_ece), or
   its lower bound exceeds the baseline's upper bound by more than ``max_ece_increase`` (an
   increase that survives both uncertainties).
3. ``warn``: the window shows miscalibration (its test of "every bin is calibrated" has
   p < ``WARN_P_VALUE``) and its debiased ECE exceeds ``max_ece``, or exceeds the baseline's
   debiased ECE by more than ``max_ece_increase``.
4. ``insufficient_data``: the window's interval reaches ``CANNOT_TELL_FACTOR`` x ``max_ece``:
   the window cannot rule out a calibration error twice the tolerance, so "ok" would claim more
   than the evidence shows.
5. ``ok``.

Error rates of this rule, measured by simulation, are in docs/calibration.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2

from service.calibration._checks import FloatArray, IntArray, float_array, non_negative_number
from service.calibration.ece_inference import EceInference
from service.calibration.errors import CalibrationInputError
from service.calibration.readings import Reading, ReliabilityBin, bins_inference
from service.calibration.refit import RefitEstimate

INSUFFICIENT_DATA = "insufficient_data"
OK = "ok"
WARN = "warn"
ALERT = "alert"
WARN_P_VALUE = 0.05
CANNOT_TELL_FACTOR = 2.0
PSI_EPSILON = 1e-4
#: Adjacent bins are merged for the shift test until each expects this many rows of the
#: smaller sample, so the chi-square approximation holds.
SHIFT_MIN_EXPECTED = 5.0
_NAN = float("nan")


def _distribution(counts: Any, field: str) -> np.ndarray:
    c = float_array(counts, field, 1)
    if (c < 0).any():
        raise CalibrationInputError(field, "counts must be >= 0")
    total = c.sum()
    if total <= 0:
        raise CalibrationInputError(field, "needs at least one count")
    return c / total


def population_stability_index(
    expected_counts: Any, actual_counts: Any, epsilon: float = PSI_EPSILON
) -> float:
    """Return ``sum_m (a_m - e_m) * ln(a_m / e_m)`` over two (M,) count vectors.

    Both are normalised to proportions and smoothed as ``(q_m + epsilon) / (1 + M * epsilon)``,
    so an empty bin on either side contributes a large but finite term; 0 means identical.
    """
    e = _distribution(expected_counts, "expected_counts")
    a = _distribution(actual_counts, "actual_counts")
    if e.shape != a.shape:
        raise CalibrationInputError("actual_counts", f"must have shape {e.shape}, got {a.shape}")
    eps = non_negative_number(epsilon, "epsilon")
    if eps == 0.0 and ((e == 0) | (a == 0)).any():
        raise CalibrationInputError("epsilon", "must be > 0 when a bin is empty")
    scale = 1.0 + e.size * eps
    e = (e + eps) / scale
    a = (a + eps) / scale
    return float(np.sum((a - e) * np.log(a / e)))


def total_variation(p_counts: Any, q_counts: Any) -> float:
    """Return ``0.5 * sum |p - q|`` between two (K,) count vectors after normalising each."""
    p = _distribution(p_counts, "p_counts")
    q = _distribution(q_counts, "q_counts")
    if p.shape != q.shape:
        raise CalibrationInputError("q_counts", f"must have shape {p.shape}, got {q.shape}")
    return float(0.5 * np.abs(p - q).sum())


@dataclass(frozen=True)
class ConfidenceShift:
    """How far the window's confidence distribution moved from the baseline's.

    ``psi`` is ``population_stability_index(baseline, window)``; ``no_shift`` its expected value
    when both samples come from one distribution, ``(M' - 1) (1 / n_b + 1 / n_w)`` over the M'
    bins either sample occupies (PSI is then about that multiple of a chi-square; below a few
    hundred rows the smoothing of empty bins adds to it: at 50 rows PSI averages about 1.45
    times ``no_shift``); ``p_value``
    is the chi-square test of homogeneity of the two count vectors, adjacent bins merged until
    each expects ``SHIFT_MIN_EXPECTED`` rows of the smaller sample.
    """

    psi: float
    no_shift: float
    p_value: float


def confidence_shift(baseline_counts: Any, window_counts: Any) -> ConfidenceShift:
    """Compare two (M,) confidence-bin count vectors (see ``ConfidenceShift``)."""
    b = float_array(baseline_counts, "baseline_counts", 1)
    w = float_array(window_counts, "window_counts", 1)
    psi = population_stability_index(b, w)
    nb, nw = float(b.sum()), float(w.sum())
    occupied = int(np.count_nonzero(b + w))
    scale = 1.0 / nb + 1.0 / nw
    return ConfidenceShift(psi, (occupied - 1) * scale, _homogeneity_p_value(b, w))


def _homogeneity_p_value(b: FloatArray, w: FloatArray) -> float:
    total = b + w
    share = min(b.sum(), w.sum()) / total.sum()
    groups: list[tuple[float, float]] = []
    pending = np.zeros(2)
    for pair in np.column_stack([b, w]):
        pending = pending + pair
        if pending.sum() * share >= SHIFT_MIN_EXPECTED:
            groups.append((pending[0], pending[1]))
            pending = np.zeros(2)
    if pending.sum() > 0:
        if groups:
            last = groups.pop()
            groups.append((last[0] + pending[0], last[1] + pending[1]))
        else:
            groups.append((pending[0], pending[1]))
    if len(groups) < 2:
        return 1.0
    table = np.array(groups).T
    expected = table.sum(axis=0) * (table.sum(axis=1, keepdims=True) / table.sum())
    statistic = float(((table - expected) ** 2 / expected).sum())
    return float(chi2.sf(statistic, len(groups) - 1))


@dataclass(frozen=True)
class ExpectedAccuracy:
    """Accuracy the still-unlabeled predictions should show when their labels arrive.

    ``value`` is their mean expected correctness (multiclass: top-label confidence; binary: p or
    1 - p by the predicted side), ``lower``/``upper`` a 95% interval for the accuracy they will
    show: the Poisson-binomial spread ``sqrt(sum e (1 - e)) / n`` around it. Both assume the
    calibrator still holds: no label shift and no change in what the scores mean.
    """

    value: float
    lower: float
    upper: float
    n: int

    @classmethod
    def of(cls, n: int, expected_sum: float, expected_square_sum: float) -> ExpectedAccuracy:
        """From the count, sum and sum of squares of the unlabeled rows' expected correctness."""
        value = expected_sum / n
        spread = math.sqrt(max(expected_sum - expected_square_sum, 0.0)) / n
        return cls(
            value,
            max(value - 1.959963984540054 * spread, 0.0),
            min(value + 1.959963984540054 * spread, 1.0),
            n,
        )


@dataclass(frozen=True)
class DriftPolicy:
    """Thresholds of the drift rule; costs (binary) fix the decision threshold when given."""

    max_ece: float
    max_ece_increase: float
    min_labeled: int
    c_fp: float | None = None
    c_fn: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_ece", "max_ece_increase"):
            value = non_negative_number(getattr(self, name), f"policy.{name}")
            object.__setattr__(self, name, value)
        m = self.min_labeled
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 0:
            raise CalibrationInputError("policy.min_labeled", "must be an integer >= 0")
        object.__setattr__(self, "min_labeled", int(m))
        if (self.c_fp is None) != (self.c_fn is None):
            missing = "c_fn" if self.c_fn is None else "c_fp"
            raise CalibrationInputError(f"policy.{missing}", "give both costs or none")
        if self.c_fp is not None and self.c_fn is not None:
            fp = non_negative_number(self.c_fp, "policy.c_fp")
            fn = non_negative_number(self.c_fn, "policy.c_fn")
            if fp + fn <= 0.0:
                raise CalibrationInputError("policy.c_fn", "c_fp + c_fn must be > 0")
            object.__setattr__(self, "c_fp", fp)
            object.__setattr__(self, "c_fn", fn)

    @property
    def costs(self) -> tuple[float, float] | None:
        """``(c_fp, c_fn)`` or None."""
        if self.c_fp is None or self.c_fn is None:
            return None
        return (self.c_fp, self.c_fn)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], field: str = "policy") -> DriftPolicy:
        """Build a policy from JSON; unknown keys and missing thresholds raise with the field."""
        if not isinstance(d, Mapping):
            raise CalibrationInputError(field, "must be an object")
        allowed = ("max_ece", "max_ece_increase", "min_labeled", "c_fp", "c_fn")
        for key in d:
            if key not in allowed:
                raise CalibrationInputError(f"{field}.{key}", "is not a policy field")
        for key in allowed[:3]:
            if key not in d:
                raise CalibrationInputError(f"{field}.{key}", "is required")
        return cls(**{key: d[key] for key in allowed if key in d})

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form; costs appear only when set."""
        out: dict[str, Any] = {
            "max_ece": self.max_ece,
            "max_ece_increase": self.max_ece_increase,
            "min_labeled": self.min_labeled,
        }
        if self.costs is not None:
            out["c_fp"], out["c_fn"] = self.costs
        return out


@dataclass(frozen=True)
class Drift:
    """Drift measures of a window against the baseline, with the status and its reasons.

    ``ece_delta`` compares plug-in ECEs, ``ece_debiased_delta`` debiased ones; the status uses
    the latter with both readings' intervals (module docstring).
    """

    ece_delta: float
    ece_debiased_delta: float
    nll_delta: float
    refit_temperature: RefitEstimate | None
    confidence_shift: ConfidenceShift | None
    prevalence_shift: float
    expected_accuracy: ExpectedAccuracy | None
    status: str
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (NaN becomes None, reasons a list)."""
        refit, shift, expected = (
            self.refit_temperature,
            self.confidence_shift,
            self.expected_accuracy,
        )
        return {
            "ece_delta": _clean(self.ece_delta),
            "ece_debiased_delta": _clean(self.ece_debiased_delta),
            "nll_delta": _clean(self.nll_delta),
            "refit_temperature": None if refit is None else refit.temperature,
            "refit_temperature_ci": None if refit is None else list(refit.temperature_ci),
            "confidence_psi": None if shift is None else _clean(shift.psi),
            "confidence_psi_no_shift": None if shift is None else _clean(shift.no_shift),
            "confidence_shift_p_value": None if shift is None else _clean(shift.p_value),
            "prevalence_shift": _clean(self.prevalence_shift),
            "expected_accuracy": None if expected is None else expected.value,
            "expected_accuracy_ci": None if expected is None else [expected.lower, expected.upper],
            "status": self.status,
            "reasons": list(self.reasons),
        }


def _clean(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


def _counts_on(edges: Sequence[float], bins: Sequence[ReliabilityBin]) -> np.ndarray:
    """A reading's bin counts laid out on ``edges`` (M + 1,); refuses bins of other edges."""
    index = {(lo, hi): m for m, (lo, hi) in enumerate(itertools.pairwise(edges))}
    counts = np.zeros(len(edges) - 1)
    for b in bins:
        m = index.get((b.lo, b.hi))
        if m is None:
            raise CalibrationInputError("baseline.bins", "window and baseline use different edges")
        counts[m] += b.n
    return counts


def assess_drift(
    window: Reading,
    baseline: Reading,
    policy: DriftPolicy,
    *,
    edges: Sequence[float],
    confidence_counts: Any = None,
    refit_temperature: RefitEstimate | None = None,
    expected_accuracy: ExpectedAccuracy | None = None,
) -> Drift:
    """Compare a window reading with the baseline reading (same task and ``edges``).

    ``confidence_counts`` (M,) counts every prediction of the window, labeled or not, per
    confidence bin (default: the labeled rows' bins); ``confidence_shift`` compares them with
    the baseline's. ``prevalence_shift`` is the total variation between the label
    distributions. ``refit_temperature`` and ``expected_accuracy`` are passed through.
    """
    if window.task != baseline.task:
        raise CalibrationInputError("baseline", "window and baseline readings differ in task")
    if len(window.label_counts) != len(baseline.label_counts):
        raise CalibrationInputError("baseline.label_counts", "window and baseline differ in K")
    base_counts = _counts_on(edges, baseline.bins)
    seen = _counts_on(edges, window.bins) if confidence_counts is None else confidence_counts
    seen = float_array(seen, "confidence_counts", 1)
    if seen.shape != base_counts.shape:
        raise CalibrationInputError("confidence_counts", f"must have {base_counts.size} counts")
    shift = None
    if seen.sum() > 0 and baseline.n:
        shift = confidence_shift(base_counts, seen)
    tv = _NAN
    if window.n and baseline.n:
        tv = total_variation(baseline.label_counts, window.label_counts)
    base_evidence = bins_inference(baseline.bins)
    status, reasons = _status(window, base_evidence, policy)
    return Drift(
        ece_delta=window.ece - baseline.ece,
        ece_debiased_delta=window.ece_debiased - base_evidence.debiased,
        nll_delta=window.nll - baseline.nll,
        refit_temperature=refit_temperature,
        confidence_shift=shift,
        prevalence_shift=tv,
        expected_accuracy=expected_accuracy,
        status=status,
        reasons=reasons,
    )


@dataclass(frozen=True)
class StatusEvidence:
    """What the status rule looks at, for S windows as (S,) arrays (see the module docstring).

    ``labeled`` rows, the window's 95% ECE interval ``lower``/``upper``, its ``debiased`` ECE and
    calibration-test ``p_value``.
    """

    labeled: IntArray
    lower: FloatArray
    upper: FloatArray
    debiased: FloatArray
    p_value: FloatArray


@dataclass(frozen=True)
class StatusConditions:
    """Each condition of the rule, (S,) booleans, and the status they decide (S,) strings."""

    no_rows: np.ndarray
    too_few: np.ndarray
    above_max: np.ndarray
    increase_beyond_both: np.ndarray
    shows_miscalibration: np.ndarray
    debiased_above_max: np.ndarray
    debiased_increase: np.ndarray
    cannot_tell: np.ndarray
    status: np.ndarray


def decide_statuses(
    window: StatusEvidence, baseline: EceInference, policy: DriftPolicy
) -> StatusConditions:
    """The status rule over many windows at once: every condition, then the status."""
    no_rows = window.labeled == 0
    too_few = window.labeled < policy.min_labeled
    above_max = window.lower > policy.max_ece
    increase = window.lower - baseline.upper > policy.max_ece_increase
    shows = window.p_value < WARN_P_VALUE
    debiased_above = window.debiased > policy.max_ece
    debiased_increase = window.debiased - baseline.debiased > policy.max_ece_increase
    cannot_tell = window.upper >= CANNOT_TELL_FACTOR * policy.max_ece
    status = np.select(
        [
            no_rows | too_few,
            above_max | increase,
            shows & (debiased_above | debiased_increase),
            cannot_tell,
        ],
        [INSUFFICIENT_DATA, ALERT, WARN, INSUFFICIENT_DATA],
        default=OK,
    )
    return StatusConditions(
        no_rows,
        too_few,
        above_max,
        increase,
        shows,
        debiased_above,
        debiased_increase,
        cannot_tell,
        status,
    )


def _status(
    window: Reading, baseline: EceInference, policy: DriftPolicy
) -> tuple[str, tuple[str, ...]]:
    lower, upper = window.ece_ci
    evidence = StatusEvidence(
        labeled=np.array([window.n]),
        lower=np.array([lower]),
        upper=np.array([upper]),
        debiased=np.array([window.ece_debiased]),
        p_value=np.array([window.calibration_p_value]),
    )
    c = decide_statuses(evidence, baseline, policy)
    status = str(c.status[0])
    if c.no_rows[0]:
        return status, ("no labeled predictions in the window",)
    if c.too_few[0]:
        return status, (
            f"{window.n} labeled predictions in the window, fewer than min_labeled "
            f"{policy.min_labeled}",
        )
    reasons = []
    if status == ALERT:
        if c.above_max[0]:
            reasons.append(
                f"the ECE's 95% interval [{lower:.4f}, {upper:.4f}] lies above max_ece "
                f"{policy.max_ece:.4f}"
            )
        if c.increase_beyond_both[0]:
            reasons.append(
                f"the ECE's 95% lower bound {lower:.4f} exceeds the baseline's upper bound "
                f"{baseline.upper:.4f} by {lower - baseline.upper:.4f}, more than "
                f"max_ece_increase {policy.max_ece_increase:.4f}"
            )
    elif status == WARN:
        shown = f"(calibration test p = {window.calibration_p_value:.2g})"
        if c.debiased_above_max[0]:
            reasons.append(
                f"debiased ECE {window.ece_debiased:.4f} exceeds max_ece {policy.max_ece:.4f} "
                f"{shown}"
            )
        if c.debiased_increase[0]:
            rise = window.ece_debiased - baseline.debiased
            reasons.append(
                f"debiased ECE {window.ece_debiased:.4f} is {rise:.4f} above the baseline's "
                f"{baseline.debiased:.4f}, more than max_ece_increase "
                f"{policy.max_ece_increase:.4f} {shown}"
            )
    elif status == INSUFFICIENT_DATA:
        reasons.append(
            f"the ECE's 95% interval [{lower:.4f}, {upper:.4f}] still admits "
            f"{CANNOT_TELL_FACTOR:g} x max_ece: the window cannot tell"
        )
    return status, tuple(reasons)
