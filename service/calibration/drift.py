"""Drift of a window's reading against the contract's baseline reading, and the policy rule.

Status, in order of precedence:

* ``insufficient_data``: the window has fewer than ``min_labeled`` labeled rows (or none);
  never an alert, whatever the numbers say.
* ``alert``: the evidence rule: the lower bound of the window's 95% ECE interval exceeds
  ``max_ece``, or exceeds the baseline ECE by more than ``max_ece_increase``.
* ``warn``: a point estimate is beyond a threshold: ECE > ``max_ece`` or
  ``ece_delta`` = window ECE - baseline ECE > ``max_ece_increase``.
* ``ok`` otherwise.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import float_array, non_negative_number
from service.calibration.errors import CalibrationInputError
from service.calibration.readings import Reading, ReliabilityBin

INSUFFICIENT_DATA = "insufficient_data"
OK = "ok"
WARN = "warn"
ALERT = "alert"
PSI_EPSILON = 1e-4
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
    """Drift measures of a window against the baseline, with the status and its reasons."""

    ece_delta: float
    nll_delta: float
    refit_temperature: float | None
    confidence_psi: float
    prevalence_shift: float
    expected_accuracy: float | None
    status: str
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (NaN becomes None, reasons a list)."""

        def clean(v: float | None) -> float | None:
            return None if v is None or math.isnan(v) else v

        return {
            "ece_delta": clean(self.ece_delta),
            "nll_delta": clean(self.nll_delta),
            "refit_temperature": clean(self.refit_temperature),
            "confidence_psi": clean(self.confidence_psi),
            "prevalence_shift": clean(self.prevalence_shift),
            "expected_accuracy": clean(self.expected_accuracy),
            "status": self.status,
            "reasons": list(self.reasons),
        }


def _aligned_counts(
    a: tuple[ReliabilityBin, ...], b: tuple[ReliabilityBin, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Counts of both readings over the union of their non-empty bins (missing bins are 0)."""
    keys = sorted({(x.lo, x.hi) for x in a} | {(x.lo, x.hi) for x in b})
    for (lo1, hi1), (lo2, _) in itertools.pairwise(keys):
        if lo2 < hi1 or lo1 == lo2:
            raise CalibrationInputError("baseline.bins", "window and baseline use different edges")
    index = {key: i for i, key in enumerate(keys)}
    ca, cb = np.zeros(len(keys)), np.zeros(len(keys))
    for x in a:
        ca[index[(x.lo, x.hi)]] = x.n
    for x in b:
        cb[index[(x.lo, x.hi)]] = x.n
    return ca, cb


def assess_drift(
    window: Reading,
    baseline: Reading,
    policy: DriftPolicy,
    *,
    refit_temperature: float | None,
    expected_accuracy: float | None,
) -> Drift:
    """Compare a window reading with the baseline reading (same task and edges) under a policy.

    ``confidence_psi`` is the PSI of the window's bin counts against the baseline's;
    ``prevalence_shift`` the total variation between their label distributions. Both are NaN
    when either reading is empty. ``refit_temperature`` and ``expected_accuracy`` are passed
    through (they need rows: see ``fitting.refit_temperature`` and the ``*_expected_accuracy``
    helpers).
    """
    if window.task != baseline.task:
        raise CalibrationInputError("baseline", "window and baseline readings differ in task")
    if len(window.label_counts) != len(baseline.label_counts):
        raise CalibrationInputError("baseline.label_counts", "window and baseline differ in K")
    psi = shift = _NAN
    if window.n and baseline.n:
        expected, actual = _aligned_counts(baseline.bins, window.bins)
        psi = population_stability_index(expected, actual)
        shift = total_variation(baseline.label_counts, window.label_counts)
    ece_delta = window.ece - baseline.ece
    status, reasons = _status(window, baseline, policy, ece_delta)
    return Drift(
        ece_delta=ece_delta,
        nll_delta=window.nll - baseline.nll,
        refit_temperature=refit_temperature,
        confidence_psi=psi,
        prevalence_shift=shift,
        expected_accuracy=expected_accuracy,
        status=status,
        reasons=reasons,
    )


def _status(
    window: Reading, baseline: Reading, policy: DriftPolicy, ece_delta: float
) -> tuple[str, tuple[str, ...]]:
    if window.n == 0:
        return INSUFFICIENT_DATA, ("no labeled predictions in the window",)
    if window.n < policy.min_labeled:
        return INSUFFICIENT_DATA, (
            f"{window.n} labeled predictions in the window, fewer than min_labeled "
            f"{policy.min_labeled}",
        )
    lower = window.ece_ci[0]
    rise = lower - baseline.ece
    alerts = []
    if lower > policy.max_ece:
        alerts.append(
            f"ECE 95% interval lower bound {lower:.4f} exceeds max_ece {policy.max_ece:.4f}"
        )
    if rise > policy.max_ece_increase:
        alerts.append(
            f"ECE 95% interval lower bound {lower:.4f} is {rise:.4f} above the baseline ECE "
            f"{baseline.ece:.4f}, more than max_ece_increase {policy.max_ece_increase:.4f}"
        )
    if alerts:
        return ALERT, tuple(alerts)
    warnings = []
    if window.ece > policy.max_ece:
        warnings.append(f"ECE {window.ece:.4f} exceeds max_ece {policy.max_ece:.4f}")
    if ece_delta > policy.max_ece_increase:
        warnings.append(
            f"ECE {window.ece:.4f} is {ece_delta:.4f} above the baseline ECE "
            f"{baseline.ece:.4f}, more than max_ece_increase {policy.max_ece_increase:.4f}"
        )
    if warnings:
        return WARN, tuple(warnings)
    return OK, ()
