"""Readings of labeled rows under a calibrator, and the expected accuracy of unlabeled rows."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from service.calibration._checks import logit_matrix
from service.calibration.calibrators import (
    Calibrator,
    IdentityCalibrator,
    binary_probabilities,
    calibrated_logits,
)
from service.calibration.errors import CalibrationInputError
from service.calibration.ranking import binary_auc, decision_threshold
from service.calibration.readings import Reading, reading_from_stats
from service.calibration.stats import binary_stats, multiclass_stats

_NAN = float("nan")


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
