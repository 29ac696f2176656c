"""Reliability bins over [0, 1].

``edges`` is a float64 array ``e(0) = 0 < e(1) < ... < e(M) = 1`` describing M bins. Bin m
(0-based, 0..M-1) is the left-closed interval ``[e(m), e(m+1))``; the last bin is closed,
``[e(M-1), 1]``, so a value of exactly 1 lands in bin M-1. This is
``np.searchsorted(edges, v, side="right") - 1`` clipped to ``M - 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.calibration._checks import FloatArray, IntArray
from service.calibration.errors import CalibrationInputError

DEFAULT_BINS = 15


def default_edges(n_bins: int = DEFAULT_BINS) -> FloatArray:
    """Return the ``n_bins + 1`` equal-width edges ``m / n_bins`` (each the nearest float64)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise CalibrationInputError("n_bins", f"must be an integer >= 1, got {n_bins!r}")
    return np.arange(int(n_bins) + 1, dtype=np.float64) / int(n_bins)


def validate_edges(edges: Any, field: str = "edges") -> FloatArray:
    """Return ``edges`` as float64 after checking: 1-D, >= 2 values, 0 first, 1 last, increasing."""
    try:
        e = np.array(edges, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CalibrationInputError(field, "must be a list of numbers") from exc
    if e.ndim != 1 or e.size < 2:
        raise CalibrationInputError(field, "must be a flat list of at least 2 edges")
    if not np.isfinite(e).all():
        raise CalibrationInputError(field, "must be finite")
    if e[0] != 0.0 or e[-1] != 1.0:
        raise CalibrationInputError(field, "must start at exactly 0 and end at exactly 1")
    if not (np.diff(e) > 0.0).all():
        raise CalibrationInputError(field, "must be strictly increasing")
    e.setflags(write=False)
    return e


def is_equal_width(edges: FloatArray) -> bool:
    """Tell whether ``edges`` is exactly ``default_edges(len(edges) - 1)``."""
    M = edges.size - 1
    return bool(np.array_equal(edges, np.arange(M + 1, dtype=np.float64) / M))


def assign_bins(values: Any, edges: Any) -> IntArray:
    """Return the int64 bin index (0..M-1) of each value in [0, 1] (any shape, kept).

    Values outside [0, 1] or non-finite raise ``CalibrationInputError`` (field ``values``).
    """
    e = validate_edges(edges)
    v = np.asarray(values, dtype=np.float64)
    if v.size and not (np.isfinite(v).all() and v.min() >= 0.0 and v.max() <= 1.0):
        raise CalibrationInputError("values", "must be finite and lie in [0, 1]")
    return bin_index(v, e, is_equal_width(e))


def bin_index(v: FloatArray, edges: FloatArray, equal_width: bool) -> IntArray:
    """Bin ``v`` (already known to lie in [0, 1]) against validated ``edges``; no checks.

    With ``equal_width`` the index is ``floor(v * M)``, then moved by one where rounding put it
    on the wrong side of the stored edge, so the result equals the searchsorted rule exactly.
    """
    M = edges.size - 1
    if not equal_width or M == 1:
        idx = np.searchsorted(edges, v, side="right").astype(np.int64, copy=False)
        idx -= 1
        np.minimum(idx, M - 1, out=idx)
        return idx
    idx = np.multiply(v, float(M)).astype(np.int64)
    np.minimum(idx, M - 1, out=idx)
    below = v < edges.take(idx)
    idx -= below
    above = v >= edges.take(idx + 1)
    above &= idx < M - 1
    idx += above
    return idx
