"""The baseline's declaration: its schema states what ``parse_baseline`` reads, and the model
validates what the contract's rules accept."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from service.calibration.readings import REQUIRED_KEYS
from service.common.declared import inline_schema
from service.common.errors import ErrorCollector
from service.contracts.baseline_checks import BaselineBody, ReadingBody, parse_baseline

EDGES = (0.0, 0.5, 1.0)


def _reading() -> dict[str, Any]:
    return {
        "n": 4,
        "ece": 0.1,
        "ece_ci": [0.0, 0.3],
        "mce": 0.2,
        "nll": 1.0,
        "brier": 0.5,
        "accuracy": 0.5,
        "mean_confidence": 0.6,
        "bins": [
            {"lo": 0.5, "hi": 1.0, "n": 4, "mean_confidence": 0.6, "accuracy": 0.5, "ci": [0, 1]}
        ],
        "label_counts": [2, 1, 1],
    }


def _baseline() -> dict[str, Any]:
    split = {"uncalibrated": _reading(), "calibrated": _reading()}
    return {"fit": split, "eval": copy.deepcopy(split)}


def _problems(value: Any, n_classes: int = 3) -> list[tuple[str, str]]:
    errors = ErrorCollector()
    parse_baseline(value, errors, task="multiclass", n_classes=n_classes, edges=EDGES)
    return [(d.field, d.message) for d in errors.details]


def test_a_baseline_the_rules_accept_the_declaration_accepts() -> None:
    assert _problems(_baseline()) == []
    BaselineBody.model_validate(_baseline())


def test_the_declared_reading_requires_what_a_stored_reading_carries() -> None:
    schema = inline_schema(ReadingBody.model_json_schema())
    assert set(schema["required"]) == set(REQUIRED_KEYS)
    assert schema["additionalProperties"] is False
    assert "prefixItems" not in str(schema)


def test_the_rules_speak_first() -> None:
    body = _baseline()
    body["eval"]["calibrated"]["bins"][0]["accuracy"] = 1.5
    assert _problems(body) == [("baseline.eval.calibrated.bins[0].accuracy", "must lie in [0, 1]")]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("ece_debiased", "high", "expected a number"),
        ("calibration_p_value", 2, "must be <= 1"),
        ("ece_ci", [0, 1, 1], "at most 2 items, got 3"),
    ],
)
def test_a_value_only_the_declaration_bounds_is_refused(key: str, value: Any, message: str) -> None:
    """``Reading.from_dict`` recomputes a positive-class view's inference from its bins and
    never reads these keys: the declaration refuses a value outside its schema."""
    body = _baseline()
    for split in ("fit", "eval"):
        for which in ("uncalibrated", "calibrated"):
            reading = body[split][which]
            reading["label_counts"] = [2, 2]
            reading["positive_class"] = {
                "ece": 0.1,
                "ece_debiased": None,
                "ece_ci": [0.0, 0.3],
                "calibration_p_value": None,
                "bins": copy.deepcopy(reading["bins"]),
            }
    assert _problems(body, n_classes=2) == []
    body["eval"]["calibrated"]["positive_class"][key] = value
    assert _problems(body, n_classes=2) == [
        (f"baseline.eval.calibrated.positive_class.{key}", message)
    ]
