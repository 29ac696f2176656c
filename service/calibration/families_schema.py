"""JSON schemas of the calibrator families' parameters (the API description; the checks that
refuse a bad value with its field named are the families' ``from_dict``)."""

from __future__ import annotations

from typing import Any

from service.calibration.binary_families import (
    MAX_BETA_INTERCEPT,
    MAX_BETA_SHAPE,
    MAX_HISTOGRAM_BINS,
    MAX_THRESHOLDS,
)
from service.calibration.multiclass_families import MAX_BIAS, MAX_SCALE


def _number(lo: float, hi: float) -> dict[str, Any]:
    return {"type": "number", "minimum": lo, "maximum": hi}


def _numbers(lo: float, hi: float, max_items: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": _number(lo, hi)}
    if max_items is not None:
        out["maxItems"] = max_items
    return out


def _family(method: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"method": {"type": "string", "enum": [method]}, **properties},
        "required": ["method", *properties],
        "additionalProperties": False,
    }


_ISOTONIC_MAP = {
    "x": _numbers(0, 1, MAX_THRESHOLDS),
    "y": _numbers(0, 1, MAX_THRESHOLDS),
}

FAMILY_SCHEMAS: tuple[dict[str, Any], ...] = (
    _family("isotonic", _ISOTONIC_MAP),
    _family(
        "isotonic",
        {
            "per_class": {
                "type": "array",
                "minItems": 2,
                "items": {
                    "type": "object",
                    "properties": _ISOTONIC_MAP,
                    "required": ["x", "y"],
                    "additionalProperties": False,
                },
            }
        },
    ),
    _family(
        "histogram",
        {
            "cuts": _numbers(0, 1, MAX_HISTOGRAM_BINS - 1),
            "values": _numbers(0, 1, MAX_HISTOGRAM_BINS),
        },
    ),
    _family(
        "beta",
        {
            "a": _number(0, MAX_BETA_SHAPE),
            "b": _number(0, MAX_BETA_SHAPE),
            "c": _number(-MAX_BETA_INTERCEPT, MAX_BETA_INTERCEPT),
        },
    ),
    _family(
        "vector", {"scale": _numbers(-MAX_SCALE, MAX_SCALE), "bias": _numbers(-MAX_BIAS, MAX_BIAS)}
    ),
    _family(
        "matrix",
        {
            "weights": {"type": "array", "items": _numbers(-MAX_SCALE, MAX_SCALE)},
            "bias": _numbers(-MAX_BIAS, MAX_BIAS),
        },
    ),
)
