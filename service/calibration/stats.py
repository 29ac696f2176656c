"""Additive sufficient statistics of a labeled batch: every reading is a function of these.

A ``CalibrationStats`` summarises N labeled predictions against fixed bin edges (M bins, see
``binning``). Two of them with the same task, edges, number of classes, threshold and layout add
up with ``+`` to the statistics of the concatenated rows, so a rolling window is a sum of stored
buckets and never a rescan.

Per row (natural logs throughout):

* multiclass, from (N, K) logits z and calibrator temperature T: ``p = softmax(z / T)``,
  prediction ``argmax z`` (ties: lowest index), confidence ``c = max p``, correct
  ``a = 1[pred = y]``, ``-log p_y`` from the log-softmax, Brier ``sum_k (p_k - 1[y = k])^2``.
* binary, from (N,) scores in [0, 1] and a calibrator: ``p`` = calibrated P(positive),
  confidence ``p``, "correct" (what the reliability bins compare against) ``y``,
  ``-log p_y`` from the stable log-sigmoid of the calibrated log-odds (identity: ``logit(s)``,
  clipped to [1e-6, 1 - 1e-6]), Brier ``(p - y)^2``, prediction positive when ``p >= threshold``.

The binary layout also keeps histograms of ``p`` for positives and negatives on
``AUC_CELLS`` = 1000 equal-width cells (the binning rule of ``binning``), from which an ROC AUC
is estimated additively.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from service.calibration._checks import (
    FloatArray,
    IntArray,
    class_labels,
    finite_number,
    logit_matrix,
    unit_scores,
)
from service.calibration.binning import bin_index, default_edges, is_equal_width, validate_edges
from service.calibration.calibrators import (
    Calibrator,
    IdentityCalibrator,
    binary_map,
    calibrated_logits,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.probabilities import log_sigmoid_unchecked
from service.calibration.vocabulary import Task

AUC_CELLS = 1000
_AUC_EDGES = default_edges(AUC_CELLS)

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


@dataclass(frozen=True)
class _RowTerms:
    """Per-row contributions of N labeled rows, before they are summed into statistics.

    ``cells`` (N, K) is ``k * M + bin of p_k`` (multiclass with classwise tables); ``auc_cells``
    (N,) the AUC histogram cell of p and ``outcome`` (N,) ``2 * y + predicted`` (binary).
    """

    task: str
    edges: FloatArray
    n_classes: int
    bins: IntArray
    confidence: FloatArray
    correct: Any
    nll: FloatArray
    brier: FloatArray
    hit: Any
    labels: IntArray
    probs: FloatArray | None = None
    cells: IntArray | None = None
    threshold: float | None = None
    outcome: IntArray | None = None
    auc_cells: IntArray | None = None


def _multiclass_terms(
    z: FloatArray, T: float, y: IntArray, e: FloatArray, classwise: bool
) -> _RowTerms:
    N, K = z.shape
    M = e.size - 1
    equal = is_equal_width(e)
    rows = np.arange(N)
    pred = z.argmax(axis=1)
    work = np.subtract(z, z[rows, pred][:, None])
    if T != 1.0:
        work /= T
    shifted_y = work[rows, y]
    np.exp(work, out=work)
    total = np.einsum("ij->i", work)
    conf = 1.0 / total
    brier = np.einsum("ij,ij->i", work, work)
    brier *= conf * conf
    brier += 1.0 - 2.0 * np.exp(shifted_y) * conf
    np.maximum(brier, 0.0, out=brier)
    correct = pred == y
    probs = cells = None
    if classwise:
        work /= total[:, None]
        cells = bin_index(work, e, equal)
        cells += np.arange(K, dtype=np.int64) * M
        probs = work
    return _RowTerms(
        task=Task.MULTICLASS,
        edges=e,
        n_classes=K,
        bins=bin_index(conf, e, equal),
        confidence=conf,
        correct=correct,
        nll=np.log(total) - shifted_y,
        brier=brier,
        hit=correct,
        labels=y,
        probs=probs,
        cells=cells,
    )


def _binary_terms(
    s: FloatArray, y: IntArray, e: FloatArray, calibrator: Calibrator, tau: float
) -> _RowTerms:
    p, log_odds = binary_map(calibrator, s)
    positive = y == 1
    signed = np.where(positive, log_odds, -log_odds)
    residual = p - y
    predicted = p >= tau
    return _RowTerms(
        task=Task.BINARY,
        edges=e,
        n_classes=2,
        bins=bin_index(p, e, is_equal_width(e)),
        confidence=p,
        correct=positive,
        nll=-log_sigmoid_unchecked(signed),
        brier=residual * residual,
        hit=positive == predicted,
        labels=y,
        threshold=tau,
        outcome=2 * y + predicted,
        auc_cells=bin_index(p, _AUC_EDGES, True),
    )


def _reduce(t: _RowTerms, group: IntArray | None, G: int) -> dict[str, Any]:
    """Sum row terms per group (``group`` (N,) in 0..G-1, or None for one group).

    Returns every statistics field with a leading axis of length G.
    """
    M, K = t.edges.size - 1, t.n_classes
    N = t.bins.size
    g = None if group is None else np.asarray(group, dtype=np.int64)

    def scalar(weights: Any) -> Any:
        if g is None:
            return np.array([np.sum(weights)], dtype=np.float64)
        return np.bincount(g, weights=weights, minlength=G)

    def offset(index: IntArray, size: int) -> IntArray:
        return index if g is None else g * size + index

    def per(index: IntArray, size: int, weights: Any = None) -> Any:
        return np.bincount(offset(index, size), weights=weights, minlength=G * size).reshape(G, -1)

    out: dict[str, Any] = {
        "n": np.array([N]) if g is None else np.bincount(g, minlength=G),
        "nll_sum": scalar(t.nll),
        "brier_sum": scalar(t.brier),
        "correct_sum": np.array([np.count_nonzero(t.hit)])
        if g is None
        else np.bincount(g, weights=t.hit, minlength=G).round().astype(np.int64),
        "confidence_sum": scalar(t.confidence),
        "bin_count": per(t.bins, M),
        "bin_confidence_sum": per(t.bins, M, t.confidence),
        "bin_correct_sum": np.rint(per(t.bins, M, t.correct)).astype(np.int64),
        "label_counts": per(t.labels, K),
    }
    if t.cells is not None and t.probs is not None:
        KM = K * M
        flat = (t.cells if g is None else t.cells + (g * KM)[:, None]).ravel()
        out["class_bin_count"] = np.bincount(flat, minlength=G * KM).reshape(G, K, M)
        out["class_bin_prob_sum"] = np.bincount(
            flat, weights=t.probs.ravel(), minlength=G * KM
        ).reshape(G, K, M)
        label_cells = offset(t.cells[np.arange(N), t.labels], KM)
        out["class_bin_label_sum"] = np.bincount(label_cells, minlength=G * KM).reshape(G, K, M)
    if t.outcome is not None and t.auc_cells is not None:
        out["confusion"] = per(t.outcome, 4).reshape(G, 2, 2)
        positive = t.labels == 1
        out["positive_hist"] = per(t.auc_cells, AUC_CELLS, positive)
        out["negative_hist"] = per(t.auc_cells, AUC_CELLS, ~positive)
        out["positive_hist"] = np.rint(out["positive_hist"]).astype(np.int64)
        out["negative_hist"] = np.rint(out["negative_hist"]).astype(np.int64)
    return out


def _stats_of(t: _RowTerms, sums: Mapping[str, Any], i: int) -> CalibrationStats:
    values = {name: value[i] for name, value in sums.items()}
    for name in ("n", "correct_sum"):
        values[name] = int(values[name])
    for name in ("nll_sum", "brier_sum", "confidence_sum"):
        values[name] = float(values[name])
    return CalibrationStats(
        task=t.task, edges=t.edges, n_classes=t.n_classes, threshold=t.threshold, **values
    )


def multiclass_stats(
    logits: Any,
    labels: Any,
    edges: Any,
    *,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
    classwise: bool = True,
) -> CalibrationStats:
    """Summarise (N, K) raw logits and (N,) labels in 0..K-1 under a multiclass calibrator.

    Any per-row shift of the logits is irrelevant, so log-probabilities work as input too.
    Binary-only calibrators are refused. The prediction is the argmax of the calibrated logits
    (of the raw logits under temperature and identity). ``classwise=False`` skips the (K, M) tables,
    which cost about as much as everything else together.
    """
    z = logit_matrix(logits)
    N, K = z.shape
    y = class_labels(labels, N, K)
    e = validate_edges(edges)
    if N == 0:
        calibrated_logits(calibrator, z)  # refuses a binary-only calibrator
        return empty_stats(Task.MULTICLASS, e, K, classwise=classwise)
    terms = _multiclass_terms(*calibrated_logits(calibrator, z), y, e, classwise)
    return _stats_of(terms, _reduce(terms, None, 1), 0)


def binary_stats(
    scores: Any,
    labels: Any,
    edges: Any,
    *,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
    threshold: float = 0.5,
) -> CalibrationStats:
    """Summarise (N,) scores in [0, 1] and (N,) labels in {0, 1} under a binary calibrator.

    ``threshold`` tau in [0, 1]: a row is predicted positive when its calibrated ``p >= tau``.
    """
    s = unit_scores(scores)
    N = s.shape[0]
    y = class_labels(labels, N, 2)
    e = validate_edges(edges)
    tau = _threshold(threshold)
    if N == 0:
        return empty_stats(Task.BINARY, e, 2, threshold=tau)
    terms = _binary_terms(s, y, e, calibrator, tau)
    return _stats_of(terms, _reduce(terms, None, 1), 0)


def row_nll(task: str, inputs: Any, labels: Any, calibrator: Calibrator) -> FloatArray:
    """Return the (N,) per-row ``-log p_y`` (nats) of the rows under ``calibrator``.

    ``inputs``: (N, K) logits for ``task="multiclass"``, (N,) scores in [0, 1] for ``"binary"``;
    computed exactly as the statistics' ``nll_sum`` terms.
    """
    e = default_edges(1)
    if task == Task.MULTICLASS:
        z = logit_matrix(inputs)
        y = class_labels(labels, z.shape[0], z.shape[1])
        return _multiclass_terms(*calibrated_logits(calibrator, z), y, e, False).nll
    if task == Task.BINARY:
        s = unit_scores(inputs)
        return _binary_terms(s, class_labels(labels, s.shape[0], 2), e, calibrator, 0.5).nll
    raise CalibrationInputError("task", f"must be 'multiclass' or 'binary', got {task!r}")


def _threshold(threshold: float) -> float:
    tau = finite_number(threshold, "threshold")
    if not 0.0 <= tau <= 1.0:
        raise CalibrationInputError("threshold", "must lie in [0, 1]")
    return tau


def grouped_stats(
    task: str,
    inputs: Any,
    labels: Any,
    edges: Any,
    group: Any,
    n_groups: int,
    *,
    calibrator: Calibrator = IdentityCalibrator(),  # noqa: B008 - immutable frozen dataclass
    threshold: float = 0.5,
    classwise: bool = True,
) -> dict[str, Any]:
    """Statistics of many groups of rows in one pass: every field with a leading G axis.

    ``group`` (N,) assigns each row to a group in 0..G-1 (``n_groups`` = G). Group g's fields
    equal those of ``multiclass_stats``/``binary_stats`` (with ``classwise`` for multiclass) on
    its rows; without the class-wise tables no (N, K) probabilities are binned and nothing of
    size K times M is formed. The result is keyed like ``CalibrationStats`` fields;
    ``packing.pack_groups`` flattens it.
    """
    g = np.asarray(group, dtype=np.int64)
    e = validate_edges(edges)
    if task == Task.MULTICLASS:
        z = logit_matrix(inputs)
        terms = _multiclass_terms(
            *calibrated_logits(calibrator, z),
            class_labels(labels, z.shape[0], z.shape[1]),
            e,
            classwise,
        )
    else:
        s = unit_scores(inputs)
        terms = _binary_terms(
            s, class_labels(labels, s.shape[0], 2), e, calibrator, _threshold(threshold)
        )
    if g.shape != terms.bins.shape or (g.size and (g.min() < 0 or g.max() >= n_groups)):
        raise CalibrationInputError("group", f"must be (N,) indices in 0..{n_groups - 1}")
    return _reduce(terms, g, n_groups)
