"""The optional ``baseline.selection`` of a contract: the evidence of a ``method: auto`` fit
(``service.calibration.auto.Selection.to_dict``), checked when a client registers it."""

from __future__ import annotations

import math
from typing import Any

from service.common.errors import ErrorCollector
from service.common.values import expect_object

_CANDIDATE_NUMBERS = ("nll", "brier", "ece_debiased", "p_value")
_CANDIDATE_KEYS = (*_CANDIDATE_NUMBERS, "method", "ece_ci", "beaten_by", "error")

SELECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "chosen": {"type": "string"},
        "folds": {"type": "integer", "minimum": 2},
        "alpha": {"type": "number", "minimum": 0, "maximum": 1},
        "criterion": {"type": "string"},
        "candidates": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["chosen", "folds", "alpha", "criterion", "candidates"],
}


def _finite_or_null(value: Any, path: str, errors: ErrorCollector) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors.add(path, "expected a finite number or null")


def check_selection(value: Any, errors: ErrorCollector) -> None:
    """Record every problem of a ``baseline.selection`` object (``SELECTION_SCHEMA``): the
    chosen method among the candidates, each candidate's numbers finite or null."""
    path = "baseline.selection"
    selection = expect_object(value, path, errors, required=tuple(SELECTION_SCHEMA["required"]))
    if selection is None:
        return
    folds, alpha = selection.get("folds"), selection.get("alpha")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        errors.add(f"{path}.folds", "expected an integer >= 2")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
        errors.add(f"{path}.alpha", "expected a number in [0, 1]")
    for key in ("chosen", "criterion"):
        if not isinstance(selection.get(key), str):
            errors.add(f"{path}.{key}", "expected a string")
    candidates = selection.get("candidates")
    if not isinstance(candidates, list):
        errors.add(f"{path}.candidates", "expected a list")
        return
    methods = []
    for i, candidate in enumerate(candidates):
        item = f"{path}.candidates[{i}]"
        c = expect_object(candidate, item, errors, required=_CANDIDATE_KEYS)
        if c is None:
            continue
        methods.append(c.get("method"))
        for key in _CANDIDATE_NUMBERS:
            _finite_or_null(c.get(key), f"{item}.{key}", errors)
        ci = c.get("ece_ci")
        if ci is not None and (not isinstance(ci, list) or len(ci) != 2):
            errors.add(f"{item}.ece_ci", "expected [lower, upper] or null")
        elif ci is not None:
            for bound in ci:
                _finite_or_null(bound, f"{item}.ece_ci", errors)
    if isinstance(selection.get("chosen"), str) and selection["chosen"] not in methods:
        errors.add(f"{path}.chosen", "must be one of the candidates' methods")
