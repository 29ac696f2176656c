"""``CalibrationStats``: the additive sufficient statistics of a labeled batch, from which every
reading is computed.

A ``CalibrationStats`` summarises N labeled predictions against fixed bin edges (M bins, see
``binning``). Two of them with the same task, edges, number of classes, threshold and layout add
up with ``+`` to the statistics of the concatenated rows, so a rolling window is a sum of stored
buckets and never a rescan. ``service.calibration.stats`` computes them from rows.

The binary layout also keeps histograms of ``p`` for positives and negatives on
``AUC_CELLS`` = 1000 equal-width cells (the binning rule of ``binning``), from which an ROC AUC
is estimated additively.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from service.calibration._checks import FloatArray, IntArray, finite_number
from service.calibration.binning import validate_edges
from service.calibration.errors import CalibrationInputError
from service.calibration.vocabulary import Task

AUC_CELLS = 1000

# Array fields: dtype and shape as a function of (M bins, K classes, H cells).
_ARRAYS: dict[str, tuple[type, Any]] = {
    "bin_count": (np.int64, lambda M, K, H: (M,)),
    "bin_confidence_sum": (np.float64, lambda M, K, H: (M,)),
    "bin_correct_sum": (np.int64, lambda M, K, H: (M,)),
    "label_counts": (np.int64, lambda M, K, H: (K,)),
    "class_bin_count": (np.int64, lambda M, K, H: (K, M)),
    "class_bin_prob_sum": (np.float64, lambda M, K, H: (K, M)),
    "class_bin_label_sum": (np.int64, lambda M, K, H: (K, M)),
    "confusion": (np.int64, lambda M, K, H: (2, 2)),
    "positive_hist": (np.int64, lambda M, K, H: (H,)),
    "negative_hist": (np.int64, lambda M, K, H: (H,)),
}
_CLASSWISE = ("class_bin_count", "class_bin_prob_sum", "class_bin_label_sum")
_BINARY_ONLY = ("confusion", "positive_hist", "negative_hist")
_SCALARS = ("nll_sum", "brier_sum", "confidence_sum")
_COUNTS = ("n", "correct_sum")


@dataclass(frozen=True, eq=False)
class CalibrationStats:
    """Additive statistics of N labeled predictions for one task, edge set and threshold.

    Shapes: M = ``len(edges) - 1`` bins, K = ``n_classes`` (binary: 2), H = ``AUC_CELLS``.

    * ``bin_count`` (M,) rows per reliability bin (binned by confidence c, binary: by p);
      ``bin_confidence_sum`` (M,) sum of c (binary: p); ``bin_correct_sum`` (M,) sum of a
      (binary: sum of y, the positives).
    * ``nll_sum`` sum of ``-log p_y``; ``brier_sum`` sum of Brier terms; ``confidence_sum``
      sum of c (binary: p); ``correct_sum`` multiclass: top-label correct rows, binary: rows
      classified correctly at ``threshold`` (tp + tn).
    * ``label_counts`` (K,) rows per true class (binary: [negatives, positives]).
    * multiclass with ``classwise``: ``class_bin_count``, ``class_bin_prob_sum``,
      ``class_bin_label_sum`` (K, M): for class k, bin every row's ``p_k`` and sum ``p_k`` and
      ``1[y = k]``; otherwise these are None.
    * binary: ``threshold``; ``confusion`` (2, 2) indexed [y, predicted] = [[tn, fp], [fn, tp]];
      ``positive_hist`` / ``negative_hist`` (H,) counts of p per cell for y = 1 / y = 0.
    """

    task: str
    edges: FloatArray
    n_classes: int
    n: int
    bin_count: IntArray
    bin_confidence_sum: FloatArray
    bin_correct_sum: IntArray
    nll_sum: float
    brier_sum: float
    correct_sum: int
    confidence_sum: float
    label_counts: IntArray
    class_bin_count: IntArray | None = None
    class_bin_prob_sum: FloatArray | None = None
    class_bin_label_sum: IntArray | None = None
    threshold: float | None = None
    confusion: IntArray | None = None
    positive_hist: IntArray | None = None
    negative_hist: IntArray | None = None

    def __post_init__(self) -> None:
        if self.task not in (Task.MULTICLASS, Task.BINARY):
            raise CalibrationInputError("stats.task", "must be 'multiclass' or 'binary'")
        edges = validate_edges(self.edges, "stats.edges")
        object.__setattr__(self, "edges", edges)
        K = _count(self.n_classes, "stats.n_classes")
        if K < 2 or (self.task == Task.BINARY and K != 2):
            raise CalibrationInputError("stats.n_classes", "must be >= 2 (binary: exactly 2)")
        object.__setattr__(self, "n_classes", K)
        for name in _COUNTS:
            object.__setattr__(self, name, _count(getattr(self, name), f"stats.{name}"))
        for name in _SCALARS:
            object.__setattr__(self, name, finite_number(getattr(self, name), f"stats.{name}"))
        binary = self.task == Task.BINARY
        classwise = self.class_bin_count is not None
        if binary:
            tau = finite_number(self.threshold, "stats.threshold")
            if not 0.0 <= tau <= 1.0:
                raise CalibrationInputError("stats.threshold", "must lie in [0, 1]")
            object.__setattr__(self, "threshold", tau)
        elif self.threshold is not None:
            raise CalibrationInputError("stats.threshold", "is for binary statistics only")
        M = edges.size - 1
        for name, (dtype, shape_of) in _ARRAYS.items():
            value = getattr(self, name)
            if not _in_layout(name, binary, classwise):
                if value is not None:
                    raise CalibrationInputError(f"stats.{name}", "does not belong to this layout")
                continue
            shape = shape_of(M, K, AUC_CELLS)
            object.__setattr__(self, name, _frozen_array(value, dtype, shape, name))
        if int(self.bin_count.sum()) != self.n or int(self.label_counts.sum()) != self.n:
            raise CalibrationInputError("stats.n", "does not match the bin and label counts")

    @property
    def n_bins(self) -> int:
        """Number of reliability bins M."""
        return int(self.edges.size - 1)

    @property
    def classwise(self) -> bool:
        """Whether the classwise (K, M) tables are kept (multiclass only)."""
        return self.class_bin_count is not None

    def __add__(self, other: object) -> CalibrationStats:
        if not isinstance(other, CalibrationStats):
            return NotImplemented
        _check_compatible(self, other)
        summed: dict[str, Any] = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name in ("task", "edges", "n_classes", "threshold") or a is None:
                summed[f.name] = a
            else:
                summed[f.name] = a + b
        return CalibrationStats(**summed)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict: numbers, lists (nested for 2-D) and None for absent parts.

        ``from_dict(s.to_dict())`` reproduces ``s`` exactly (floats survive JSON via repr).
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.tolist() if isinstance(value, np.ndarray) else value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CalibrationStats:
        """Rebuild statistics from ``to_dict`` output; unknown or missing keys are refused."""
        if not isinstance(d, Mapping):
            raise CalibrationInputError("stats", "must be an object")
        names = {f.name for f in fields(cls)}
        for key in d:
            if key not in names:
                raise CalibrationInputError(f"stats.{key}", "is not a statistics field")
        for key in names:
            if key not in d:
                raise CalibrationInputError(f"stats.{key}", "is required")
        return cls(**dict(d))


def _in_layout(name: str, binary: bool, classwise: bool) -> bool:
    if name in _BINARY_ONLY:
        return binary
    if name in _CLASSWISE:
        return classwise and not binary
    return True


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise CalibrationInputError(field, f"must be a non-negative integer, got {value!r}")
    return int(value)


def _frozen_array(value: Any, dtype: type, shape: tuple[int, ...], name: str) -> Any:
    field = f"stats.{name}"
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CalibrationInputError(field, "must be an array of numbers") from exc
    if arr.shape != shape:
        raise CalibrationInputError(field, f"must have shape {shape}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise CalibrationInputError(field, "must be finite")
    if dtype is np.int64:
        if (arr < 0).any() or (arr != np.round(arr)).any():
            raise CalibrationInputError(field, "must hold non-negative whole counts")
        arr = np.array(value, dtype=np.int64)
    arr.setflags(write=False)
    return arr


def _check_compatible(a: CalibrationStats, b: CalibrationStats) -> None:
    if a.task != b.task:
        raise CalibrationInputError("stats.task", f"cannot add {a.task} and {b.task} statistics")
    if a.n_classes != b.n_classes:
        raise CalibrationInputError(
            "stats.n_classes", f"cannot add K={a.n_classes} and K={b.n_classes} statistics"
        )
    if not np.array_equal(a.edges, b.edges):
        raise CalibrationInputError("stats.edges", "cannot add statistics over different bin edges")
    if a.threshold != b.threshold:
        raise CalibrationInputError(
            "stats.threshold", f"cannot add thresholds {a.threshold} and {b.threshold}"
        )
    if a.classwise != b.classwise:
        raise CalibrationInputError(
            "stats.class_bin_count", "cannot add statistics with and without classwise tables"
        )


def combine_stats(parts: Iterable[CalibrationStats]) -> CalibrationStats:
    """Return the sum of one or more compatible statistics (e.g. a window's time buckets)."""
    it = iter(parts)
    try:
        total = next(it)
    except StopIteration:
        raise CalibrationInputError("stats", "needs at least one statistics object") from None
    for part in it:
        total = total + part
    return total


def empty_stats(
    task: str,
    edges: Any,
    n_classes: int = 2,
    *,
    classwise: bool = True,
    threshold: float = 0.5,
) -> CalibrationStats:
    """Return the zero statistics (the identity of ``+``) for a task, edge set and layout.

    ``classwise`` applies to multiclass, ``threshold`` to binary (``n_classes`` must be 2).
    """
    e = validate_edges(edges)
    M, K = e.size - 1, _count(n_classes, "n_classes")
    binary = task == Task.BINARY
    if binary and K != 2:
        raise CalibrationInputError("n_classes", "must be 2 for binary statistics")
    multi_cw = classwise and not binary
    return CalibrationStats(
        task=task,
        edges=e,
        n_classes=K,
        n=0,
        bin_count=np.zeros(M, np.int64),
        bin_confidence_sum=np.zeros(M),
        bin_correct_sum=np.zeros(M, np.int64),
        nll_sum=0.0,
        brier_sum=0.0,
        correct_sum=0,
        confidence_sum=0.0,
        label_counts=np.zeros(K, np.int64),
        class_bin_count=np.zeros((K, M), np.int64) if multi_cw else None,
        class_bin_prob_sum=np.zeros((K, M)) if multi_cw else None,
        class_bin_label_sum=np.zeros((K, M), np.int64) if multi_cw else None,
        threshold=threshold if binary else None,
        confusion=np.zeros((2, 2), np.int64) if binary else None,
        positive_hist=np.zeros(AUC_CELLS, np.int64) if binary else None,
        negative_hist=np.zeros(AUC_CELLS, np.int64) if binary else None,
    )
