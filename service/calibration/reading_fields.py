"""The fields of a stored reading: counts, numbers and fractions as JSON carries them, and the
maximum calibration error (MCE) of a reading's bins."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from service.calibration._checks import FloatArray, IntArray, finite_number
from service.calibration.errors import CalibrationInputError

_NAN = float("nan")
#: ``mce_supported`` looks only at bins holding at least this many rows: a bin of n rows has a
#: gap whose noise alone is up to ``0.5 / sqrt(n)``, so the largest gap of a few tiny bins says
#: little. ``mce`` itself (the standard maximum calibration error) looks at every non-empty bin.
MCE_MIN_ROWS = 50
#: Counts beyond 2^53 - 1 are neither exact in JSON clients nor in float64 arithmetic.
MAX_COUNT = 2**53 - 1


def worst_bin(gaps: FloatArray, sizes: IntArray, min_rows: int = 1) -> tuple[float, int | None]:
    """The largest gap among bins of at least ``min_rows`` rows and that bin's rows, or
    ``(NaN, None)`` when no bin has that many; ``gaps`` and ``sizes`` are (B,) per bin."""
    kept = np.flatnonzero(sizes >= max(min_rows, 1))
    if not kept.size:
        return _NAN, None
    worst = int(kept[np.argmax(gaps[kept])])
    return float(gaps[worst]), int(sizes[worst])


def mce_values(d: Mapping[str, Any], mce: float, bins: Sequence[Any], field: str) -> dict[str, Any]:
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
            "mce_supported_n": None if mce_n is None else whole_count(mce_n, f"{field}.mce_n"),
            "mce_min_rows": MCE_MIN_ROWS,
        }
    supported_n = d.get("mce_supported_n")
    min_rows = whole_count(d.get("mce_min_rows", MCE_MIN_ROWS), f"{field}.mce_min_rows")
    if min_rows < 1:
        raise CalibrationInputError(f"{field}.mce_min_rows", "must be at least 1")
    return {
        "mce": mce,
        "mce_n": None if mce_n is None else whole_count(mce_n, f"{field}.mce_n"),
        "mce_supported": number_or_nan(d["mce_supported"], f"{field}.mce_supported"),
        "mce_supported_n": (
            None if supported_n is None else whole_count(supported_n, f"{field}.mce_supported_n")
        ),
        "mce_min_rows": min_rows,
    }


def json_number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def number_or_nan(value: Any, field: str) -> float:
    return _NAN if value is None else finite_number(value, field)


def whole_count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise CalibrationInputError(field, f"must be an integer in [0, {MAX_COUNT}]")
    return value


def fraction(value: Any, field: str) -> float:
    """A bin's mean or frequency: finite and in [0, 1] (the inference multiplies it by the
    bin's count, which a larger value would overflow)."""
    number = finite_number(value, field)
    if not 0.0 <= number <= 1.0:
        raise CalibrationInputError(field, "must lie in [0, 1]")
    return number
