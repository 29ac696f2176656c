"""Drift of a window's reading against the contract's baseline reading, and the status rule.

The status is decided on evidence, never on the plug-in ECE. Two levels come from the policy
and the baseline (``StatusLevels``): the **alert level** ``min(max_ece, U_b +
max_ece_increase)`` and the **warn level** ``min(max_ece / 2, U_b + max_ece_increase / 2)``,
``U_b`` the upper bound of the baseline's 95% ECE interval (an increase must survive the
baseline's uncertainty too). Each level has a sequential e-detector (``sequential``) run over
the window's buckets in time order. First match:

1. ``insufficient_data``: fewer than ``min_labeled`` labeled rows (or none): never an alert.
2. ``alert``: the alert detector shows the ECE above the alert level (it is tuned to catch twice
   that level).
3. ``warn``: the warn detector shows the ECE above the warn level (tuned to catch the alert
   level; it crosses its threshold fastest for ECEs above the midpoint, 3/4 of max_ece).
4. ``insufficient_data``: the window's 95% ECE interval reaches twice the alert level: it cannot
   rule out an ECE twice the tolerance, so "ok" would claim more than the evidence shows.
5. ``ok``.

A two-class multiclass model is judged in its positive-class view too (``Reading.positive_class``);
either view's evidence raises a status. Error rates, per evaluation and over time, are in
bench/results/statistics-tables.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import FloatArray, float_array, non_negative_number
from service.calibration.ece_inference import EceInference
from service.calibration.errors import CalibrationInputError
from service.calibration.intervals import Z_95
from service.calibration.readings import Reading, ReliabilityBin, bins_inference
from service.calibration.refit import RefitEstimate
from service.calibration.sequential import (
    BinTables,
    Detection,
    DetectorDesign,
    alert_design,
    detect,
    warn_design,
)
from service.calibration.shift import ConfidenceShift, confidence_shift, total_variation
from service.calibration.vocabulary import Status, Task

CANNOT_TELL_FACTOR = 2.0
_NAN = float("nan")


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
            max(value - Z_95 * spread, 0.0),
            min(value + Z_95 * spread, 1.0),
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

    ``ece_delta`` compares plug-in ECEs, ``ece_debiased_delta`` debiased ones; ``evidence`` is
    what the status detectors found (``StatusDecision.evidence``).
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
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)

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
            "detectors": dict(self.evidence),
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
    views: Sequence[tuple[BinTables, int]] | None = None,
) -> Drift:
    """Compare a window reading with the baseline reading (same task and ``edges``).

    ``confidence_counts`` (M,) counts every prediction of the window, labeled or not, per
    confidence bin (default: the labeled rows' bins); ``confidence_shift`` compares them with
    the baseline's. ``prevalence_shift`` is the total variation between the label
    distributions. ``refit_temperature`` and ``expected_accuracy`` are passed through.
    ``views`` are the window's buckets in time order per view, each with its count of leading
    lookback blocks (``sequential.detect``); without them the window is one block.
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
    levels = StatusLevels.of(policy, base_evidence)
    decision = decide_status(
        window, views if views is not None else window_views(window, edges), levels, policy
    )
    return Drift(
        ece_delta=window.ece - baseline.ece,
        ece_debiased_delta=window.ece_debiased - base_evidence.debiased,
        nll_delta=window.nll - baseline.nll,
        refit_temperature=refit_temperature,
        confidence_shift=shift,
        prevalence_shift=tv,
        expected_accuracy=expected_accuracy,
        status=decision.status,
        reasons=decision.reasons,
        evidence=decision.evidence(),
    )


@dataclass(frozen=True)
class StatusLevels:
    """The ECE levels the status detectors test, from the policy and the baseline."""

    alert: float
    warn: float
    baseline_upper: float

    @classmethod
    def of(cls, policy: DriftPolicy, baseline: EceInference) -> StatusLevels:
        """``alert = min(max_ece, U_b + increase)``, ``warn = min(max_ece, U_b + increase) / 2``
        per part (``U_b`` the baseline's upper bound; ignored when the baseline is empty)."""
        upper = baseline.upper
        if not math.isfinite(upper):
            return cls(policy.max_ece, 0.5 * policy.max_ece, _NAN)
        return cls(
            min(policy.max_ece, upper + policy.max_ece_increase),
            min(0.5 * policy.max_ece, upper + 0.5 * policy.max_ece_increase),
            upper,
        )

    @property
    def alert_design(self) -> DetectorDesign:
        return alert_design(self.alert)

    @property
    def warn_design(self) -> DetectorDesign:
        return warn_design(self.warn, self.alert)

    def describe(self, policy: DriftPolicy) -> str:
        """Where the alert level comes from, for reasons."""
        if math.isfinite(self.baseline_upper) and self.alert < policy.max_ece:
            return (
                f"the baseline's upper bound {self.baseline_upper:.4f} plus max_ece_increase "
                f"{policy.max_ece_increase:.4f}"
            )
        return f"max_ece {policy.max_ece:.4f}"


def window_views(reading: Reading, edges: Sequence[float]) -> list[tuple[BinTables, int]]:
    """The reading's bins as a one-block detector input per view (no lookback): what the
    status rule reads when a window comes without its buckets (a set of rows)."""
    e = np.asarray(edges, dtype=np.float64)
    views = [(_one_block(reading.bins, e, reading.task == Task.BINARY, _view_name(reading)), 0)]
    if reading.positive_class is not None:
        views.append((_one_block(reading.positive_class.bins, e, True, "positive-class"), 0))
    return views


def _view_name(reading: Reading) -> str:
    return "positive" if reading.task == Task.BINARY else "top-label"


def _one_block(
    bins: Sequence[ReliabilityBin], edges: FloatArray, confidence_view: bool, name: str
) -> BinTables:
    index = {lo: m for m, lo in enumerate(edges[:-1])}
    M = len(edges) - 1
    n, c, k = np.zeros((1, M)), np.zeros((1, M)), np.zeros((1, M))
    for b in bins:
        m = index.get(b.lo)
        if m is None:
            raise CalibrationInputError("bins", "bins do not match the edges")
        n[0, m] = b.n
        c[0, m] = b.mean_confidence * b.n
        k[0, m] = round(b.accuracy * b.n)
    return BinTables(n, c, k, edges, confidence_view, name)


@dataclass(frozen=True)
class StatusDecision:
    """A status, its reasons and the detectors' evidence behind it."""

    status: Status
    reasons: tuple[str, ...]
    levels: StatusLevels
    alert: Detection | None
    warn: Detection | None

    def evidence(self) -> dict[str, Any]:
        """The detectors' levels, values and thresholds (JSON)."""

        def one(level: float, d: Detection | None) -> dict[str, Any]:
            return {
                "level": level,
                "value": None if d is None else d.value,
                "threshold": None if d is None else d.design.threshold,
                "pattern": None if d is None else d.pattern,
                "view": None if d is None else d.view,
                "rows": None if d is None else d.rows,
            }

        return {
            "alert": one(self.levels.alert, self.alert),
            "warn": one(self.levels.warn, self.warn),
        }


def decide_status(
    window: Reading,
    views: Sequence[tuple[BinTables, int]],
    levels: StatusLevels,
    policy: DriftPolicy,
) -> StatusDecision:
    """The status of one window (module docstring), with its reasons and evidence."""
    if window.n == 0:
        return StatusDecision(
            Status.INSUFFICIENT_DATA, ("no labeled predictions in the window",), levels, None, None
        )
    if window.n < policy.min_labeled:
        reason = (
            f"{window.n} labeled predictions in the window, fewer than min_labeled "
            f"{policy.min_labeled}"
        )
        return StatusDecision(Status.INSUFFICIENT_DATA, (reason,), levels, None, None)
    alert = detect(views, levels.alert_design)
    warn = detect(views, levels.warn_design)
    lower, upper = window.ece_ci
    interval = f"the window's 95% ECE interval is [{lower:.4f}, {upper:.4f}]"
    if alert.alarm:
        reason = f"{alert.describe()}, the alert level ({levels.describe(policy)}); {interval}"
        return StatusDecision(Status.ALERT, (reason,), levels, alert, warn)
    if warn.alarm:
        reason = f"{warn.describe()}, the warn level; {interval}"
        return StatusDecision(Status.WARN, (reason,), levels, alert, warn)
    if _cannot_tell(upper, window.positive_class, levels):
        reason = (
            f"{interval}: it still admits {CANNOT_TELL_FACTOR:g} x the alert level "
            f"{levels.alert:.4f}, so the window cannot tell"
        )
        return StatusDecision(Status.INSUFFICIENT_DATA, (reason,), levels, alert, warn)
    return StatusDecision(Status.OK, (), levels, alert, warn)


def _cannot_tell(upper: float, view: Any, levels: StatusLevels) -> bool:
    bound = CANNOT_TELL_FACTOR * levels.alert
    if view is not None and view.ece_ci[1] >= bound:
        return True
    return bool(upper >= bound)


def decide_statuses(
    labeled: np.ndarray,
    upper: FloatArray,
    alert_values: FloatArray,
    warn_values: FloatArray,
    levels: StatusLevels,
    policy: DriftPolicy,
) -> np.ndarray:
    """The status rule over S windows at once, from their labeled counts, interval upper bounds
    and detector values (S,) (a history's steps)."""
    too_few = (labeled == 0) | (labeled < policy.min_labeled)
    return np.select(
        [
            too_few,
            alert_values >= levels.alert_design.threshold,
            warn_values >= levels.warn_design.threshold,
            upper >= CANNOT_TELL_FACTOR * levels.alert,
        ],
        [Status.INSUFFICIENT_DATA, Status.ALERT, Status.WARN, Status.INSUFFICIENT_DATA],
        default=Status.OK,
    )
