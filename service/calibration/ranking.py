"""The decision threshold of two costs and the binary ROC AUC, from rows or from a histogram."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import rankdata

from service.calibration._checks import class_labels, non_negative_number, unit_scores
from service.calibration.errors import CalibrationInputError

_NAN = float("nan")


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
