"""Readings: the metrics of a labeled batch or window, derived from ``CalibrationStats``.

Every field of a reading is a function of the additive statistics, except the binary ROC AUC:
from rows it is exact (mid-ranks for ties); from statistics alone it is estimated on the
1000-cell score histogram, which counts every positive/negative pair falling in the same cell
as a tie. The two agree exactly when no cell holds both a positive and a negative with
different scores; the gap is at most half the share of such same-cell pairs.

A reading of zero rows has NaN metrics (``None`` in ``to_dict``) and no bins.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from service.calibration._checks import (
    FloatArray,
    IntArray,
    class_labels,
    finite_number,
    logit_matrix,
    non_negative_number,
    unit_scores,
)
from service.calibration.calibrators import (
    Calibrator,
    IdentityCalibrator,
    binary_probabilities,
    calibrated_logits,
)
from service.calibration.ece_inference import EceInference, infer_ece
from service.calibration.errors import CalibrationInputError
from service.calibration.intervals import wilson_interval
from service.calibration.stats import (
    CalibrationStats,
    binary_stats,
    multiclass_stats,
)
from service.calibration.vocabulary import Task

_NAN = float("nan")
#: ``mce_supported`` looks only at bins holding at least this many rows: a bin of n rows has a
#: gap whose noise alone is up to ``0.5 / sqrt(n)``, so the largest gap of a few tiny bins says
#: little. ``mce`` itself (the standard maximum calibration error) looks at every non-empty bin.
MCE_MIN_ROWS = 50


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
            "ece": _json(self.ece),
            "ece_debiased": _json(self.ece_debiased),
            "ece_ci": [_json(self.ece_ci[0]), _json(self.ece_ci[1])],
            "calibration_p_value": _json(self.calibration_p_value),
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
        return positive_view_of_bins(bins, _number_or_nan(d["ece"], f"{field}.ece"))


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
            "ece": _json(self.ece),
            "ece_debiased": _json(self.ece_debiased),
            "ece_ci": [_json(self.ece_ci[0]), _json(self.ece_ci[1])],
            "calibration_p_value": _json(self.calibration_p_value),
            "mce": _json(self.mce),
            "mce_n": self.mce_n,
            "mce_supported": _json(self.mce_supported),
            "mce_supported_n": self.mce_supported_n,
            "mce_min_rows": self.mce_min_rows,
            "nll": _json(self.nll),
            "brier": _json(self.brier),
            "accuracy": _json(self.accuracy),
            "mean_confidence": _json(self.mean_confidence),
            "bins": [b.to_dict() for b in self.bins],
            "label_counts": list(self.label_counts),
        }
        extra = _MULTICLASS_KEYS if self.task == Task.MULTICLASS else _BINARY_KEYS
        for key in extra:
            out[key] = _json(getattr(self, key))
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
        n = _whole(d["n"], f"{field}.n")
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
            key: _number_or_nan(d.get(key), f"{field}.{key}")
            for key in ("ece", "mce", "nll", "brier", "accuracy", "mean_confidence")
        }
        for key in extra:
            raw = d.get(key)
            values[key] = (
                None
                if raw is None and key == "expected_cost"
                else _number_or_nan(raw, f"{field}.{key}")
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
            values["ece_debiased"] = _number_or_nan(d["ece_debiased"], f"{field}.ece_debiased")
            values["calibration_p_value"] = _number_or_nan(
                d["calibration_p_value"], f"{field}.calibration_p_value"
            )
        values.update(_mce_values(d, values.pop("mce"), parsed_bins, field))
        if d.get("positive_class") is not None:
            values["positive_class"] = PositiveClassView.from_dict(
                d["positive_class"], f"{field}.positive_class"
            )
        return cls(
            task=task,
            n=n,
            ece_ci=(
                _number_or_nan(ci[0], f"{field}.ece_ci"),
                _number_or_nan(ci[1], f"{field}.ece_ci"),
            ),
            bins=parsed_bins,
            label_counts=tuple(_whole(c, f"{field}.label_counts") for c in counts),
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
#: Counts beyond 2^53 - 1 are neither exact in JSON clients nor in float64 arithmetic.
_MAX_COUNT = 2**53 - 1


def worst_bin(gaps: FloatArray, sizes: IntArray, min_rows: int = 1) -> tuple[float, int | None]:
    """The largest gap among bins of at least ``min_rows`` rows and that bin's rows, or
    ``(NaN, None)`` when no bin has that many; ``gaps`` and ``sizes`` are (B,) per bin."""
    kept = np.flatnonzero(sizes >= max(min_rows, 1))
    if not kept.size:
        return _NAN, None
    worst = int(kept[np.argmax(gaps[kept])])
    return float(gaps[worst]), int(sizes[worst])


def _mce_values(
    d: Mapping[str, Any], mce: float, bins: tuple[ReliabilityBin, ...], field: str
) -> dict[str, Any]:
    """The MCE fields of a stored reading. One without ``mce_supported`` was written when
    ``mce`` named the supported variant: its ``mce`` and ``mce_n`` are that variant's, and the
    maximum over every non-empty bin is recomputed from its bins."""
    mce_n = d.get("mce_n")
    if "mce_supported" not in d:
        gaps = np.array([abs(b.mean_confidence - b.accuracy) for b in bins], dtype=np.float64)
        sizes = np.array([b.n for b in bins], dtype=np.int64)
        full, full_n = worst_bin(gaps, sizes)
        return {
            "mce": full,
            "mce_n": full_n,
            "mce_supported": mce,
            "mce_supported_n": None if mce_n is None else _whole(mce_n, f"{field}.mce_n"),
            "mce_min_rows": MCE_MIN_ROWS,
        }
    supported_n = d.get("mce_supported_n")
    min_rows = _whole(d.get("mce_min_rows", MCE_MIN_ROWS), f"{field}.mce_min_rows")
    if min_rows < 1:
        raise CalibrationInputError(f"{field}.mce_min_rows", "must be at least 1")
    return {
        "mce": mce,
        "mce_n": None if mce_n is None else _whole(mce_n, f"{field}.mce_n"),
        "mce_supported": _number_or_nan(d["mce_supported"], f"{field}.mce_supported"),
        "mce_supported_n": (
            None if supported_n is None else _whole(supported_n, f"{field}.mce_supported_n")
        ),
        "mce_min_rows": min_rows,
    }


def _json(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def _number_or_nan(value: Any, field: str) -> float:
    return _NAN if value is None else finite_number(value, field)


def _whole(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise CalibrationInputError(field, f"must be an integer in [0, {_MAX_COUNT}]")
    return value


def _fraction(value: Any, field: str) -> float:
    """A bin's mean or frequency: finite and in [0, 1] (the inference multiplies it by the
    bin's count, which a larger value would overflow)."""
    number = finite_number(value, field)
    if not 0.0 <= number <= 1.0:
        raise CalibrationInputError(field, "must lie in [0, 1]")
    return number


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
        n=_whole(d["n"], f"{field}.n"),
        mean_confidence=_fraction(d["mean_confidence"], f"{field}.mean_confidence"),
        accuracy=_fraction(d["accuracy"], f"{field}.accuracy"),
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


def decision_threshold(c_fp: float, c_fn: float) -> float:
    """Return the cost-minimising threshold ``c_fp / (c_fp + c_fn)`` for calibrated p."""
    fp = non_negative_number(c_fp, "c_fp")
    fn = non_negative_number(c_fn, "c_fn")
    if fp + fn <= 0.0:
        raise CalibrationInputError("c_fn", "c_fp + c_fn must be > 0")
    return fp / (fp + fn)


def binary_auc(scores: Any, labels: Any) -> float:
    """Return the exact ROC AUC of (N,) scores against (N,) labels in {0, 1}.

    Mann-Whitney form with mid-ranks, so tied scores count one half. NaN if a class is absent.
    """
    s = unit_scores(scores)
    y = class_labels(labels, s.shape[0], 2)
    positives = int(y.sum())
    negatives = y.size - positives
    if positives == 0 or negatives == 0:
        return _NAN
    rank_sum = float(rankdata(s)[y == 1].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def histogram_auc(positive_hist: Any, negative_hist: Any) -> float:
    """Return the ROC AUC estimated from per-cell counts of positives and negatives.

    Pairs in different cells are ordered by cell; pairs in the same cell count as ties.
    """
    pos = np.asarray(positive_hist, dtype=np.float64)
    neg = np.asarray(negative_hist, dtype=np.float64)
    P, Q = pos.sum(), neg.sum()
    if P == 0 or Q == 0:
        return _NAN
    below = np.cumsum(neg) - neg
    return float(np.dot(pos, below + 0.5 * neg) / (P * Q))


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


def multiclass_reading(
    logits: Any,
    labels: Any,
    edges: Any,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
    *,
    classwise: bool = True,
) -> Reading:
    """Return the reading of (N, K) logits and (N,) labels under ``calibrator``."""
    stats = multiclass_stats(logits, labels, edges, calibrator=calibrator, classwise=classwise)
    return reading_from_stats(stats)


def binary_reading(
    scores: Any,
    labels: Any,
    edges: Any,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
    c_fp: float | None = None,
    c_fn: float | None = None,
) -> Reading:
    """Return the reading of (N,) scores in [0, 1] and (N,) labels in {0, 1}.

    With both costs, tau = ``c_fp / (c_fp + c_fn)`` and ``expected_cost`` is set; with neither,
    tau = 0.5. The AUC is the exact one of the calibrated probabilities.
    """
    if (c_fp is None) != (c_fn is None):
        raise CalibrationInputError("c_fn" if c_fn is None else "c_fp", "give both costs or none")
    costs = None if c_fp is None or c_fn is None else (float(c_fp), float(c_fn))
    tau = 0.5 if costs is None else decision_threshold(*costs)
    stats = binary_stats(scores, labels, edges, calibrator=calibrator, threshold=tau)
    reading = reading_from_stats(stats, costs=costs)
    p = binary_probabilities(calibrator, scores)
    return dataclasses.replace(reading, auc=binary_auc(p, labels))


def multiclass_expected_accuracy(
    logits: Any,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
) -> float:
    """Return the mean top-label confidence of unlabeled (N, K) logits (NaN when N = 0).

    For a calibrated model this is the accuracy it predicts before the labels arrive.
    """
    z, T = calibrated_logits(calibrator, logit_matrix(logits))
    if z.shape[0] == 0:
        return _NAN
    work = z - z.max(axis=1, keepdims=True)
    if T != 1.0:
        work /= T
    np.exp(work, out=work)
    return float((1.0 / np.einsum("ij->i", work)).mean())


def binary_expected_accuracy(
    scores: Any,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
    threshold: float = 0.5,
) -> float:
    """Return the expected accuracy at ``threshold`` of unlabeled (N,) scores (NaN when N = 0).

    Each row contributes its calibrated ``p`` if predicted positive (``p >= tau``), else ``1 - p``.
    """
    p = binary_probabilities(calibrator, scores)
    if p.size == 0:
        return _NAN
    return float(np.where(p >= threshold, p, 1.0 - p).mean())
