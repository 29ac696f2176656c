"""Input coercion shared by the calibration modules: float64 arrays, labels, finite scalars.

``MAX_ABS_LOGIT`` bounds the raw logits calmon accepts from clients (predictions, fit, eval and
gate sets). The core itself takes any finite logits; the bound keeps every per-row statistic it
derives from client data finite and far from overflow, whatever the data. With K <= 1,000
classes (``service.contracts.model.MAX_CLASSES``) and a calibrator temperature T >= 0.05
(``calibrators.MIN_TEMPERATURE``), a gap between two logits is at most 2e6, so after scaling:

* ``|z_k - max z| / T <= 4e7``; the row's NLL ``-log p_y <= 4e7 + log K``, its Brier term <= 2;
* the refit knot sums (``refit``), at the smallest knot temperature 0.05 (``s <= 20``), hold
  losses <= 8e8 + log K and curvatures ``s^2 Var_p <= (20 * 4e7)^2 = 6.4e17`` per row.

A bucket summing even 2^53 such rows stays below 6e33, far under float64's 1.8e308, so no
stored sum can become infinite. 1e6 is also far beyond real model outputs (float32 logits
rarely exceed 1e3; a masked class can be sent as -1e6, whose probability exp(-1e6) is 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.calibration.errors import CalibrationInputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MAX_ABS_LOGIT = 1e6


def float_array(values: Any, field: str, ndim: int) -> FloatArray:
    """Return ``values`` as a finite float64 array of ``ndim`` dimensions (no copy if possible)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CalibrationInputError(field, "must be an array of numbers") from exc
    if arr.ndim != ndim:
        raise CalibrationInputError(field, f"must be {ndim}-dimensional, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise CalibrationInputError(field, "must contain only finite numbers (no NaN or inf)")
    return arr


def logit_matrix(logits: Any, field: str = "logits") -> FloatArray:
    """Return ``logits`` as a finite (N, K) float64 array with K >= 2."""
    z = float_array(logits, field, 2)
    if z.shape[1] < 2:
        raise CalibrationInputError(field, f"needs K >= 2 classes, got shape {z.shape}")
    return z


def unit_scores(scores: Any, field: str = "scores") -> FloatArray:
    """Return ``scores`` as a finite (N,) float64 array with every value in [0, 1]."""
    s = float_array(scores, field, 1)
    if s.size and (s.min() < 0.0 or s.max() > 1.0):
        raise CalibrationInputError(field, "must lie in [0, 1]")
    return s


def class_labels(labels: Any, n_rows: int, n_classes: int, field: str = "labels") -> IntArray:
    """Return ``labels`` as an (n_rows,) int64 array of class indices in 0..n_classes-1.

    Integer and boolean arrays are accepted as they are; float arrays only when every value is
    a whole number.
    """
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        raise CalibrationInputError(field, f"must have shape ({n_rows},), got {arr.shape}")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise CalibrationInputError(field, "must contain only finite numbers")
        if (arr != np.round(arr)).any():
            raise CalibrationInputError(field, "must be whole numbers (class indices)")
    elif arr.dtype.kind not in "iu":
        raise CalibrationInputError(field, "must be integer class indices")
    if arr.size and (arr.min() < 0 or arr.max() >= n_classes):
        raise CalibrationInputError(field, f"must lie in 0..{n_classes - 1}")
    return arr.astype(np.int64, copy=False)


def finite_number(value: Any, field: str) -> float:
    """Return ``value`` as a finite float; booleans and non-numbers are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise CalibrationInputError(field, "must be a number")
    try:
        out = float(value)
    except OverflowError:
        raise CalibrationInputError(field, "must be finite") from None
    if not math.isfinite(out):
        raise CalibrationInputError(field, "must be finite")
    return out


def positive_number(value: Any, field: str) -> float:
    """Return ``value`` as a finite float > 0."""
    out = finite_number(value, field)
    if out <= 0.0:
        raise CalibrationInputError(field, f"must be > 0, got {out!r}")
    return out


def non_negative_number(value: Any, field: str) -> float:
    """Return ``value`` as a finite float >= 0."""
    out = finite_number(value, field)
    if out < 0.0:
        raise CalibrationInputError(field, f"must be >= 0, got {out!r}")
    return out
