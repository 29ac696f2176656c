"""Readings: the metrics of a labeled batch or window, derived from ``CalibrationStats``.

Every field of a reading is a function of the additive statistics, except the binary ROC AUC:
from rows it is exact (mid-ranks for ties); from statistics alone it is estimated on the
1000-cell score histogram, which counts every positive/negative pair falling in the same cell
as a tie. The two agree exactly when no cell holds both a positive and a negative with
different scores; the gap is at most half the share of such same-cell pairs.

A reading of zero rows has NaN metrics (``None`` in ``to_dict``) and no bins.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.calibration._checks import (
    FloatArray,
    finite_number,
)
from service.calibration.ece_inference import EceInference, infer_ece
from service.calibration.errors import CalibrationInputError
from service.calibration.intervals import wilson_interval
from service.calibration.ranking import decision_threshold, histogram_auc
from service.calibration.reading_fields import (
    MCE_MIN_ROWS,
    fraction,
    json_number,
    mce_values,
    number_or_nan,
    whole_count,
    worst_bin,
)
from service.calibration.stats import CalibrationStats
from service.calibration.vocabulary import Task

_NAN = float("nan")


@dataclass(frozen=True)
class ReliabilityBin:
    """One non-empty reliability bin ``[lo, hi)`` (the last bin ``[lo, 1]``).

    ``accuracy`` is the observed frequency in the bin (multiclass: top-label accuracy; binary:
    positive rate); ``ci_lower``/``ci_upper`` its 95% Wilson interval.
    """

    lo: float
    hi: float
    n: int
    mean_confidence: float
    accuracy: float
    ci_lower: float
    ci_upper: float

    @property
    def ci(self) -> tuple[float, float]:
        """The 95% Wilson interval of ``accuracy``."""
        return self.ci_lower, self.ci_upper

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"lo", "hi", "n", "mean_confidence", "accuracy", "ci": [lo, hi]}``."""
        return {
            "lo": self.lo,
            "hi": self.hi,
            "n": self.n,
            "mean_confidence": self.mean_confidence,
            "accuracy": self.accuracy,
            "ci": [self.ci_lower, self.ci_upper],
        }


@dataclass(frozen=True)
class PositiveClassView:
    """The positive-class reliability diagram of a two-class multiclass model: class 1's
    probability binned against ``1{y = 1}``, the view a binary model is read in. The top-label
    diagram folds it at 1/2, where a prevalence error's gaps above and below cancel.

    ``ece`` is its plug-in ECE; ``ece_debiased``, ``ece_ci`` and ``calibration_p_value`` its
    inference (``ece_inference``); ``bins`` its non-empty bins.
    """

    ece: float
    ece_debiased: float
    ece_ci: tuple[float, float]
    calibration_p_value: float
    bins: tuple[ReliabilityBin, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"ece", "ece_debiased", "ece_ci", "calibration_p_value", "bins"}``."""
        return {
            "ece": json_number(self.ece),
            "ece_debiased": json_number(self.ece_debiased),
            "ece_ci": [json_number(self.ece_ci[0]), json_number(self.ece_ci[1])],
            "calibration_p_value": json_number(self.calibration_p_value),
            "bins": [b.to_dict() for b in self.bins],
        }

    @classmethod
    def from_dict(cls, d: Any, field: str) -> PositiveClassView:
        """Rebuild from ``to_dict`` output; the inference is recomputed from the bins."""
        if not isinstance(d, Mapping) or set(d) != {
            "ece",
            "ece_debiased",
            "ece_ci",
            "calibration_p_value",
            "bins",
        }:
            raise CalibrationInputError(
                field, "must be an object with ece, ece_debiased, ece_ci, calibration_p_value, bins"
            )
        if not isinstance(d["bins"], list | tuple):
            raise CalibrationInputError(f"{field}.bins", "must be a list")
        bins = tuple(_bin_from_dict(b, f"{field}.bins[{i}]") for i, b in enumerate(d["bins"]))
        return positive_view_of_bins(bins, number_or_nan(d["ece"], f"{field}.ece"))


@dataclass(frozen=True)
class Reading:
    """Calibration metrics of N labeled predictions (see docs/calibration.md for definitions).

    Common: ``ece`` (the plug-in binned ECE), ``ece_debiased`` and ``ece_ci`` (its 95% interval)
    for the true binned ECE, ``calibration_p_value`` (of "every bin is calibrated"), ``mce``
    (the maximum calibration error: largest gap over every non-empty bin, as torchmetrics and
    netcal compute it; NaN without rows) and ``mce_n`` (that bin's rows), ``mce_supported``
    (largest gap among bins of at least ``mce_min_rows`` rows; NaN if none) and
    ``mce_supported_n`` (that bin's rows), ``nll`` (mean natural-log loss), ``brier``
    (multiclass in [0, 2], binary in [0, 1]), ``accuracy``, ``mean_confidence`` (binary: mean
    p), ``bins`` (non-empty bins only), ``label_counts``. See ``ece_inference`` for the
    estimate, interval and test.
    Multiclass: ``classwise_ece`` (None without classwise tables) and, for two classes with
    classwise tables, ``positive_class`` (``PositiveClassView``). Binary: ``auc``,
    ``prevalence``, ``mean_score``, ``threshold`` and ``expected_cost`` (None without costs).
    """

    task: str
    n: int
    ece: float
    ece_debiased: float
    ece_ci: tuple[float, float]
    calibration_p_value: float
    mce: float
    mce_n: int | None
    mce_supported: float
    mce_supported_n: int | None
    mce_min_rows: int
    nll: float
    brier: float
    accuracy: float
    mean_confidence: float
    bins: tuple[ReliabilityBin, ...]
    label_counts: tuple[int, ...]
    classwise_ece: float | None = None
    positive_class: PositiveClassView | None = None
    auc: float | None = None
    prevalence: float | None = None
    mean_score: float | None = None
    threshold: float | None = None
    expected_cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able reading (NaN becomes None); keys depend on the task."""
        out: dict[str, Any] = {
            "n": self.n,
            "ece": json_number(self.ece),
            "ece_debiased": json_number(self.ece_debiased),
            "ece_ci": [json_number(self.ece_ci[0]), json_number(self.ece_ci[1])],
            "calibration_p_value": json_number(self.calibration_p_value),
            "mce": json_number(self.mce),
            "mce_n": self.mce_n,
            "mce_supported": json_number(self.mce_supported),
            "mce_supported_n": self.mce_supported_n,
            "mce_min_rows": self.mce_min_rows,
            "nll": json_number(self.nll),
            "brier": json_number(self.brier),
            "accuracy": json_number(self.accuracy),
            "mean_confidence": json_number(self.mean_confidence),
            "bins": [b.to_dict() for b in self.bins],
            "label_counts": list(self.label_counts),
        }
        extra = _MULTICLASS_KEYS if self.task == Task.MULTICLASS else _BINARY_KEYS
        for key in extra:
            out[key] = json_number(getattr(self, key))
        if self.task == Task.MULTICLASS:
            view = self.positive_class
            out["positive_class"] = None if view is None else view.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], field: str = "reading") -> Reading:
        """Rebuild a reading from ``to_dict`` output (the task is told by its keys).

        Raises ``CalibrationInputError`` naming the first field (under ``field``) that is
        missing, unknown or of the wrong type: every key of ``to_dict`` but the inferred ones
        (``ece_debiased`` and ``calibration_p_value``, recomputed from the bins when either is
        absent, and ``mce_n``) and the task's extra keys; counts are integers in
        [0, 2^53 - 1], numbers finite (metrics may be null, read as NaN); every bin has all of
        ``lo, hi, n, mean_confidence, accuracy, ci``.
        """
        if not isinstance(d, Mapping):
            raise CalibrationInputError(field, "must be an object")
        task = Task.BINARY if "auc" in d else Task.MULTICLASS
        extra = _BINARY_KEYS if task == Task.BINARY else _MULTICLASS_KEYS
        allowed = set(REQUIRED_KEYS) | set(_INFERRED_KEYS) | set(extra)
        if task == Task.MULTICLASS:
            allowed.add("positive_class")
        for key in d:
            if key not in allowed:
                raise CalibrationInputError(f"{field}.{key}", "is not a reading field")
        for key in REQUIRED_KEYS:
            if key not in d:
                raise CalibrationInputError(f"{field}.{key}", "is required")
        n = whole_count(d["n"], f"{field}.n")
        ci = d["ece_ci"]
        if not isinstance(ci, list | tuple) or len(ci) != 2:
            raise CalibrationInputError(f"{field}.ece_ci", "must be [lower, upper]")
        counts = d["label_counts"]
        if not isinstance(counts, list | tuple) or len(counts) < 2:
            raise CalibrationInputError(f"{field}.label_counts", "must list >= 2 counts")
        bins = d["bins"]
        if not isinstance(bins, list | tuple):
            raise CalibrationInputError(f"{field}.bins", "must be a list")
        values: dict[str, Any] = {
            key: number_or_nan(d.get(key), f"{field}.{key}")
            for key in ("ece", "mce", "nll", "brier", "accuracy", "mean_confidence")
        }
        for key in extra:
            raw = d.get(key)
            values[key] = (
                None
                if raw is None and key == "expected_cost"
                else number_or_nan(raw, f"{field}.{key}")
            )
        parsed_bins = tuple(_bin_from_dict(b, f"{field}.bins[{i}]") for i, b in enumerate(bins))
        if any(key not in d for key in ("ece_debiased", "calibration_p_value")):
            try:
                inferred = bins_inference(parsed_bins)
            except CalibrationInputError as exc:
                raise CalibrationInputError(f"{field}.bins", exc.message) from None
            values["ece_debiased"] = inferred.debiased
            values["calibration_p_value"] = inferred.p_value
        else:
            values["ece_debiased"] = number_or_nan(d["ece_debiased"], f"{field}.ece_debiased")
            values["calibration_p_value"] = number_or_nan(
                d["calibration_p_value"], f"{field}.calibration_p_value"
            )
        values.update(mce_values(d, values.pop("mce"), parsed_bins, field))
        if d.get("positive_class") is not None:
            values["positive_class"] = PositiveClassView.from_dict(
                d["positive_class"], f"{field}.positive_class"
            )
        return cls(
            task=task,
            n=n,
            ece_ci=(
                number_or_nan(ci[0], f"{field}.ece_ci"),
                number_or_nan(ci[1], f"{field}.ece_ci"),
            ),
            bins=parsed_bins,
            label_counts=tuple(whole_count(c, f"{field}.label_counts") for c in counts),
            **values,
        )


#: The keys every stored reading carries.
REQUIRED_KEYS = (
    "n",
    "ece",
    "ece_ci",
    "mce",
    "nll",
    "brier",
    "accuracy",
    "mean_confidence",
    "bins",
    "label_counts",
)
#: Written by ``to_dict``; readings stored before they existed are read back without them.
_INFERRED_KEYS = (
    "ece_debiased",
    "calibration_p_value",
    "mce_n",
    "mce_supported",
    "mce_supported_n",
    "mce_min_rows",
)
_MULTICLASS_KEYS = ("classwise_ece",)
_BINARY_KEYS = ("auc", "prevalence", "mean_score", "threshold", "expected_cost")
_BIN_KEYS = ("lo", "hi", "n", "mean_confidence", "accuracy", "ci")


def _bin_from_dict(d: Any, field: str) -> ReliabilityBin:
    if not isinstance(d, Mapping):
        raise CalibrationInputError(field, f"must be an object with keys {list(_BIN_KEYS)}")
    for key in d:
        if key not in _BIN_KEYS:
            raise CalibrationInputError(f"{field}.{key}", "is not a bin field")
    for key in _BIN_KEYS:
        if key not in d:
            raise CalibrationInputError(f"{field}.{key}", "is required")
    ci = d["ci"]
    if not isinstance(ci, list | tuple) or len(ci) != 2:
        raise CalibrationInputError(f"{field}.ci", "must be [lower, upper]")
    return ReliabilityBin(
        lo=finite_number(d["lo"], f"{field}.lo"),
        hi=finite_number(d["hi"], f"{field}.hi"),
        n=whole_count(d["n"], f"{field}.n"),
        mean_confidence=fraction(d["mean_confidence"], f"{field}.mean_confidence"),
        accuracy=fraction(d["accuracy"], f"{field}.accuracy"),
        ci_lower=finite_number(ci[0], f"{field}.ci"),
        ci_upper=finite_number(ci[1], f"{field}.ci"),
    )


@functools.lru_cache(maxsize=1024)
def bins_inference(bins: tuple[ReliabilityBin, ...]) -> EceInference:
    """Infer the true binned ECE from a reading's listed bins (counts, means, frequencies).

    Each bin's successes are ``round(accuracy * n)``, exact for a frequency written as k / n.
    Memoised (the bins are immutable): a contract's baseline, against which every reading and
    every history step is judged, is inferred once per process, not once per request.
    """
    counts = np.array([b.n for b in bins], dtype=np.float64)
    return infer_ece(
        counts,
        np.array([b.mean_confidence for b in bins]) * counts,
        np.rint(np.array([b.accuracy for b in bins]) * counts),
    )


def _table_bins(
    edges: FloatArray, counts: Any, prob_sums: Any, hits: Any
) -> tuple[ReliabilityBin, ...]:
    """The non-empty bins of one (M,) reliability table, with Wilson intervals."""
    counts = np.asarray(counts, dtype=np.float64)
    occupied = np.flatnonzero(counts)
    size = counts[occupied]
    k = np.asarray(hits, dtype=np.float64)[occupied]
    lo, hi = wilson_interval(k, size)
    mean = np.asarray(prob_sums, dtype=np.float64)[occupied] / size
    return tuple(
        ReliabilityBin(
            lo=float(edges[m]),
            hi=float(edges[m + 1]),
            n=int(size[i]),
            mean_confidence=float(mean[i]),
            accuracy=float(k[i] / size[i]),
            ci_lower=float(lo[i]),
            ci_upper=float(hi[i]),
        )
        for i, m in enumerate(occupied)
    )


def positive_view(stats: CalibrationStats) -> PositiveClassView | None:
    """Class 1's reliability view of two-class multiclass statistics (None otherwise)."""
    if (
        stats.task != Task.MULTICLASS
        or len(stats.label_counts) != 2
        or stats.class_bin_count is None
        or stats.class_bin_prob_sum is None
        or stats.class_bin_label_sum is None
    ):
        return None
    counts = stats.class_bin_count[1]
    sums, hits = stats.class_bin_prob_sum[1], stats.class_bin_label_sum[1]
    bins = _table_bins(stats.edges, counts, sums, hits)
    ece = float(np.abs(sums - hits).sum() / stats.n) if stats.n else _NAN
    return positive_view_of_bins(bins, ece)


def positive_view_of_bins(bins: tuple[ReliabilityBin, ...], ece: float) -> PositiveClassView:
    """A positive-class view from its bins (the inference recomputed from them)."""
    inferred = bins_inference(bins)
    return PositiveClassView(ece, inferred.debiased, inferred.interval, inferred.p_value, bins)


def reading_from_stats(
    stats: CalibrationStats, *, costs: tuple[float, float] | None = None
) -> Reading:
    """Compute a reading from additive statistics.

    ``costs = (c_fp, c_fn)`` (binary only) adds ``expected_cost = (c_fp FP + c_fn FN) / N``;
    the statistics must then have been taken at ``threshold = decision_threshold(c_fp, c_fn)``.
    """
    binary = stats.task == Task.BINARY
    if costs is not None:
        if not binary:
            raise CalibrationInputError("costs", "apply to binary readings only")
        tau = decision_threshold(*costs)
        if tau != stats.threshold:
            raise CalibrationInputError(
                "costs",
                f"imply threshold {tau!r} but the statistics used {stats.threshold!r}",
            )
    N = stats.n
    counts = stats.bin_count
    occupied = np.flatnonzero(counts)
    size = counts[occupied]
    conf_sum = stats.bin_confidence_sum[occupied]
    hits = stats.bin_correct_sum[occupied]
    gaps = np.abs(conf_sum - hits)
    lo, hi = wilson_interval(hits, size)
    mean_conf = conf_sum / size
    freq = hits / size
    bins = tuple(
        ReliabilityBin(
            lo=float(stats.edges[m]),
            hi=float(stats.edges[m + 1]),
            n=int(size[i]),
            mean_confidence=float(mean_conf[i]),
            accuracy=float(freq[i]),
            ci_lower=float(lo[i]),
            ci_upper=float(hi[i]),
        )
        for i, m in enumerate(occupied)
    )
    per_n = (lambda x: x / N) if N else (lambda x: _NAN)
    inferred = infer_ece(counts, stats.bin_confidence_sum, stats.bin_correct_sum)
    mce, mce_n = worst_bin(gaps / size, size)
    supported, supported_n = worst_bin(gaps / size, size, MCE_MIN_ROWS)
    common: dict[str, Any] = {
        "task": stats.task,
        "n": N,
        "ece": per_n(float(gaps.sum())),
        "ece_debiased": inferred.debiased,
        "ece_ci": inferred.interval,
        "calibration_p_value": inferred.p_value,
        "mce": mce,
        "mce_n": mce_n,
        "mce_supported": supported,
        "mce_supported_n": supported_n,
        "mce_min_rows": MCE_MIN_ROWS,
        "nll": per_n(stats.nll_sum),
        "brier": per_n(stats.brier_sum),
        "accuracy": per_n(float(stats.correct_sum)),
        "mean_confidence": per_n(stats.confidence_sum),
        "bins": bins,
        "label_counts": tuple(int(c) for c in stats.label_counts),
    }
    if not binary:
        classwise = None
        if stats.class_bin_prob_sum is not None and stats.class_bin_label_sum is not None:
            table = np.abs(stats.class_bin_prob_sum - stats.class_bin_label_sum).sum(axis=1)
            classwise = per_n(float(table.mean()))
        return Reading(classwise_ece=classwise, positive_class=positive_view(stats), **common)
    assert stats.confusion is not None
    expected_cost = None
    if costs is not None:
        fp, fn = int(stats.confusion[0, 1]), int(stats.confusion[1, 0])
        expected_cost = per_n(costs[0] * fp + costs[1] * fn)
    return Reading(
        auc=histogram_auc(stats.positive_hist, stats.negative_hist),
        prevalence=per_n(float(stats.label_counts[1])),
        mean_score=per_n(stats.confidence_sum),
        threshold=stats.threshold,
        expected_cost=expected_cost,
        **common,
    )
