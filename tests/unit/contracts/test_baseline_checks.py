"""The baseline's declaration: its schema states what ``parse_baseline`` reads, and the model
validates what the contract's rules accept."""

from __future__ import annotations

import copy
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.calibration.readings import REQUIRED_KEYS
from service.common.declared import inline_schema
from service.common.errors import ErrorCollector
from service.contracts import baseline_checks
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


_VALUES = st.sampled_from(
    [None, -1, 0, 0.25, 1, 1.5, 2, 3, 4, 1e9, 2e9, 2**60, "x", True, [], {}, [0, 1], [0.5]]
)
_READING_KEYS = st.sampled_from(
    [
        *REQUIRED_KEYS,
        "ece_debiased",
        "calibration_p_value",
        "mce_n",
        "mce_supported",
        "mce_supported_n",
        "mce_min_rows",
        "classwise_ece",
        "positive_class",
        "auc",
        "prevalence",
        "mean_score",
        "threshold",
        "expected_cost",
        "surprise",
    ]
)
_BIN_KEYS = st.sampled_from(["lo", "hi", "n", "mean_confidence", "accuracy", "ci", "surprise"])
_NLL_KEYS = st.sampled_from(["n", "mean", "sd", "lower_bound", "surprise"])


def _binary(reading: dict[str, Any]) -> None:
    reading.update(label_counts=[2, 2], brier=0.25, auc=0.5, prevalence=0.5)
    reading.update(mean_score=0.5, threshold=0.5, expected_cost=None)


@st.composite
def _changed(draw: st.DrawFn) -> tuple[dict[str, Any], str, int]:
    """A valid baseline of a task with one value changed (or removed)."""
    task, n_classes = draw(st.sampled_from([("multiclass", 3), ("binary", 2)]))
    body = _baseline()
    readings = [body[s][w] for s in ("fit", "eval") for w in ("uncalibrated", "calibrated")]
    for reading in readings:
        if task == "binary":
            _binary(reading)
    body["eval"]["nll_difference"] = {"n": 4, "mean": -0.1, "sd": 0.2}
    where = draw(st.sampled_from(["reading", "bin", "nll_difference"]))
    target = {
        "reading": readings[3],
        "bin": readings[3]["bins"][0],
        "nll_difference": body["eval"]["nll_difference"],
    }[where]
    key = draw({"reading": _READING_KEYS, "bin": _BIN_KEYS, "nll_difference": _NLL_KEYS}[where])
    if draw(st.booleans()):
        target.pop(key, None)
    else:
        target[key] = draw(_VALUES)
    return body, task, n_classes


def _unread(loc: tuple[Any, ...], body: dict[str, Any]) -> bool:
    """Whether ``loc`` is a key ``Reading.from_dict`` never reads: a positive-class view's
    inference (recomputed from its bins), a reading's ``ece_debiased`` or
    ``calibration_p_value`` without the other (both are then recomputed from its bins), its
    ``mce_supported_n`` and ``mce_min_rows`` without ``mce_supported`` (read as one written
    before the supported MCE had keys of its own)."""
    *parents, key = (str(part) for part in loc)
    if parents[-1:] == ["positive_class"]:
        return key in {"ece_debiased", "ece_ci", "calibration_p_value"}
    reading = body[parents[0]][parents[1]]
    inference = {"ece_debiased", "calibration_p_value"}
    if key in inference:
        return not inference <= set(reading)
    return key in {"mce_supported_n", "mce_min_rows"} and "mce_supported" not in reading


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(_changed())
def test_what_the_rules_accept_the_declaration_accepts(
    case: tuple[dict[str, Any], str, int],
) -> None:
    """...but for the keys ``Reading.from_dict`` never reads (``_unread``)."""
    body, task, n_classes = case
    errors = ErrorCollector()
    with patch.object(baseline_checks, "collect"):
        parse_baseline(body, errors, task=task, n_classes=n_classes, edges=EDGES)
    if errors:
        return
    try:
        BaselineBody.model_validate(body)
    except ValidationError as exc:
        for error in exc.errors():
            assert _unread(error["loc"][:4], body), error
