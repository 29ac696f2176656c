"""Labeled sets sent with a request (fit, eval, gate evaluation): their declaration
(``LabeledSetBody``, whose JSON Schema the OpenAPI document serves), parsing and fingerprints."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from annotated_types import Len
from pydantic import ConfigDict, Field, StringConstraints

from service.calibration._checks import MAX_ABS_LOGIT
from service.calibration.vocabulary import Task
from service.common.declared import (
    FINITE,
    JSON_INTEGER,
    NO_INF_NAN,
    BodyModel,
    Fraction,
    collect,
    inline_schema,
    integer_in,
    number_in,
)
from service.common.errors import ErrorCollector
from service.common.values import expect_object, finite_float
from service.contracts.model import MAX_CLASSES

Logit = Annotated[float, NO_INF_NAN, number_in(-MAX_ABS_LOGIT, MAX_ABS_LOGIT), FINITE]
#: A label: a class index or a class name.
Label = (
    Annotated[int, integer_in(0), JSON_INTEGER] | Annotated[str, StringConstraints(min_length=1)]
)


def _one_input(schema: dict[str, Any], model: type[Any]) -> None:
    """Logits for a multiclass task, scores for a binary one: exactly one of them (the
    validation, knowing the task, requires the task's)."""
    schema.pop("description", None)
    schema["oneOf"] = [{"required": ["logits"]}, {"required": ["scores"]}]


class LabeledSetBody(BodyModel):
    """``{"logits": [[...K numbers]...], "labels": [...]}`` (multiclass) or ``{"scores": [...],
    "labels": [...]}`` (binary); labels are class indices or names. ``parse_labeled_set``
    checks the set against the contract's task and classes, then validates it with this
    model."""

    model_config = ConfigDict(json_schema_extra=_one_input)

    # Each absent or a list: null is refused.
    logits: Annotated[
        Annotated[list[Annotated[list[Logit], Len(2, MAX_CLASSES)]], Len(1)], Field(default=None)
    ]
    scores: Annotated[Annotated[list[Fraction], Len(1)], Field(default=None)]
    labels: Annotated[list[Label], Len(1)]


#: The labeled set's JSON Schema.
LABELED_SET_SCHEMA: dict[str, Any] = inline_schema(LabeledSetBody.model_json_schema())


@dataclass(frozen=True)
class LabeledSet:
    """Model outputs with their true labels.

    ``inputs`` is ``(N, K)`` float64 raw logits for a multiclass task, or ``(N,)`` float64 scores
    in [0, 1] (P(positive)) for a binary one; ``labels`` is ``(N,)`` int64 class indices.
    """

    inputs: np.ndarray
    labels: np.ndarray

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    def fingerprint(self) -> str:
        """SHA-256 of the rows: shape, then float64 inputs and int64 labels, little-endian, C order.

        Two sets fingerprint alike exactly when they hold the same rows in the same order.
        """
        digest = hashlib.sha256()
        digest.update(repr(self.inputs.shape).encode())
        digest.update(np.ascontiguousarray(self.inputs, dtype="<f8").tobytes())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        return digest.hexdigest()


def number_problem(value: Any) -> str | None:
    """Why ``value`` is not a finite JSON number, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "expected numbers"
    if finite_float(value) is None:
        return "must be finite"
    return None


def _first_bad_row(rows: Sequence[Any], width: int | None) -> tuple[int, str] | None:
    for i, row in enumerate(rows):
        values = row if width is not None else [row]
        if width is not None and (not isinstance(row, list) or len(row) != width):
            return i, f"expected a list of {width} numbers"
        for v in values:
            problem = number_problem(v)
            if problem is not None:
                return i, problem
    return None


def outside_range(array: np.ndarray, task: str) -> np.ndarray:
    """Per row (bool, (N,)), whether its inputs lie outside their range: logits (N, K) beyond
    +-``MAX_ABS_LOGIT`` (see ``service.calibration._checks``), scores (N,) outside [0, 1]; a
    NaN lies inside."""
    if task == Task.BINARY:
        return (array < 0) | (array > 1)
    return (np.abs(array) > MAX_ABS_LOGIT).any(axis=1)


def inputs_problem(array: np.ndarray, task: str) -> tuple[int, str] | None:
    """The first row of finite inputs outside their range (``outside_range``), and why."""
    outside = np.flatnonzero(outside_range(array, task))
    if task == Task.BINARY:
        message = "a score is P(positive): must be in [0, 1]"
    else:
        message = f"logits must lie within +-{MAX_ABS_LOGIT:g} (send a masked class as -1e6)"
    return (int(outside[0]), message) if outside.size else None


def parse_inputs(
    value: Any, path: str, *, task: str, n_classes: int, errors: ErrorCollector
) -> np.ndarray | None:
    """Logits ``(N, K)`` within +-``MAX_ABS_LOGIT`` (multiclass) or scores ``(N,)`` in [0, 1]
    (binary), finite float64; a problem is reported at the first offending row."""
    if not isinstance(value, list) or not value:
        errors.add(path, "expected a non-empty list")
        return None
    width = n_classes if task == Task.MULTICLASS else None
    bad = _first_bad_row(value, width)
    if bad is not None:
        errors.add(f"{path}[{bad[0]}]", bad[1])
        return None
    array = np.asarray(value, dtype=np.float64)
    bad = inputs_problem(array, task)
    if bad is not None:
        errors.add(f"{path}[{bad[0]}]", bad[1])
        return None
    return array


def parse_labels(
    value: Any, path: str, *, classes: Sequence[str], errors: ErrorCollector
) -> np.ndarray | None:
    """Labels as class indices ``0..K-1`` or class names, returned as int64 indices."""
    if not isinstance(value, list) or not value:
        errors.add(path, "expected a non-empty list")
        return None
    index_of = {name: i for i, name in enumerate(classes)}
    out = np.empty(len(value), dtype=np.int64)
    for i, label in enumerate(value):
        if isinstance(label, str):
            if label not in index_of:
                errors.add(f"{path}[{i}]", f"unknown class name {label[:64]!r}")
                return None
            out[i] = index_of[label]
        elif isinstance(label, int) and not isinstance(label, bool):
            if not 0 <= label < len(classes):
                errors.add(f"{path}[{i}]", f"class index must be in 0..{len(classes) - 1}")
                return None
            out[i] = label
        else:
            errors.add(f"{path}[{i}]", "expected a class index or class name")
            return None
    return out


def parse_labeled_set(
    value: Any, path: str, *, task: str, classes: Sequence[str], errors: ErrorCollector
) -> LabeledSet | None:
    """``{"logits": [...], "labels": [...]}`` (multiclass) or ``{"scores", "labels"}`` (binary):
    the inputs and labels read against the contract's task and classes, then the set validated
    by ``LabeledSetBody``, whose JSON Schema the OpenAPI document serves."""
    key = "logits" if task == Task.MULTICLASS else "scores"
    obj = expect_object(value, path, errors, required=(key, "labels"))
    if obj is None or key not in obj or "labels" not in obj:
        return None
    inputs = parse_inputs(
        obj[key], f"{path}.{key}", task=task, n_classes=len(classes), errors=errors
    )
    labels = parse_labels(obj["labels"], f"{path}.labels", classes=classes, errors=errors)
    if inputs is None or labels is None:
        return None
    if inputs.shape[0] != labels.shape[0]:
        errors.add(
            f"{path}.labels", f"{labels.shape[0]} labels for {inputs.shape[0]} rows of {key}"
        )
        return None
    if collect(LabeledSetBody, obj, errors, {}, path=path) is None:
        return None
    return LabeledSet(inputs=inputs, labels=labels)
