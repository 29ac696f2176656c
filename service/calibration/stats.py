"""The additive sufficient statistics (``CalibrationStats``) of labeled rows, per batch or per
group of rows, and the per-row NLL.

Per row (natural logs throughout):

* multiclass, from (N, K) logits z and calibrator temperature T: ``p = softmax(z / T)``,
  prediction ``argmax z`` (ties: lowest index), confidence ``c = max p``, correct
  ``a = 1[pred = y]``, ``-log p_y`` from the log-softmax, Brier ``sum_k (p_k - 1[y = k])^2``.
* binary, from (N,) scores in [0, 1] and a calibrator: ``p`` = calibrated P(positive),
  confidence ``p``, "correct" (what the reliability bins compare against) ``y``,
  ``-log p_y`` from the stable log-sigmoid of the calibrated log-odds (identity: ``logit(s)``,
  clipped to [1e-6, 1 - 1e-6]), Brier ``(p - y)^2``, prediction positive when ``p >= threshold``.

The binary layout also counts ``p`` of positives and negatives on ``AUC_CELLS`` equal-width
cells, for the ROC AUC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
from service.calibration.calibration_stats import AUC_CELLS, CalibrationStats, empty_stats
from service.calibration.calibrators import (
    Calibrator,
    IdentityCalibrator,
    binary_map,
    calibrated_logits,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.probabilities import log_sigmoid_unchecked
from service.calibration.vocabulary import Task

_AUC_EDGES = default_edges(AUC_CELLS)


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
