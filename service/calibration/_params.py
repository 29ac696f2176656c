"""Reading calibrator parameters from JSON: vectors and matrices of bounded finite numbers.

Every refusal is a ``CalibrationInputError`` naming the first offending item
(``calibrator.scale[3]``, ``calibrator.weights[1][2]``).
"""

from __future__ import annotations

import math
from typing import Any

from service.calibration._checks import finite_number
from service.calibration.errors import CalibrationInputError


def bounded(value: Any, field: str, lo: float, hi: float) -> float:
    """A finite number in [lo, hi]."""
    x = finite_number(value, field)
    if not lo <= x <= hi:
        raise CalibrationInputError(field, f"must lie in [{lo:g}, {hi:g}], got {x:g}")
    return x


def vector(
    value: Any,
    field: str,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    size: int | None = None,
    min_size: int = 1,
    max_size: int | None = None,
) -> tuple[float, ...]:
    """A list of finite numbers in [lo, hi]: exactly ``size`` of them, or between ``min_size``
    and ``max_size``."""
    if not isinstance(value, list | tuple):
        raise CalibrationInputError(field, "must be a list of numbers")
    n = len(value)
    if size is not None and n != size:
        raise CalibrationInputError(field, f"must list {size} numbers, got {n}")
    if n < min_size or (max_size is not None and n > max_size):
        limit = "" if max_size is None else f" and at most {max_size}"
        raise CalibrationInputError(field, f"must list at least {min_size}{limit} numbers, got {n}")
    return tuple(bounded(v, f"{field}[{i}]", lo, hi) for i, v in enumerate(value))


def matrix(
    value: Any, field: str, size: int, lo: float, hi: float
) -> tuple[tuple[float, ...], ...]:
    """A ``size`` x ``size`` list of rows of finite numbers in [lo, hi]."""
    if not isinstance(value, list | tuple) or len(value) != size:
        raise CalibrationInputError(field, f"must be a {size} x {size} list of rows")
    return tuple(vector(row, f"{field}[{i}]", lo, hi, size=size) for i, row in enumerate(value))


def increasing(values: tuple[float, ...], field: str, *, strict: bool) -> None:
    """Refuse a list that is not (strictly) increasing, naming the first item out of order."""
    for i in range(1, len(values)):
        if values[i] < values[i - 1] or (strict and values[i] == values[i - 1]):
            order = "strictly increasing" if strict else "non-decreasing (monotone)"
            raise CalibrationInputError(f"{field}[{i}]", f"must be {order}")
