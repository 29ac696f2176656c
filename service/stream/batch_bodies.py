"""The declared bodies of the ingest routes: the one statement of a batch's shape and rules.

The pydantic models here validate a batch's envelope and, item by item, its predictions and
labels, naming every problem; their JSON Schema is the OpenAPI document's. ``column_checks``
checks whole batches as columns against the same rules and turns to these models to name the
problems of the rows it flags.

Per item: ``id`` is 1-200 characters of valid text (no NUL, no lone surrogate), not only
whitespace; ``ts`` is an RFC 3339 timestamp with a zone within ``service.common.values``'s range
around the time of receipt (not before 2000-01-01, at most 1 day ahead); ``cohort`` is an object
of string keys to strings by ``cohorts.parse_cohort``'s rules; ``logits`` are K finite numbers
within +-``MAX_ABS_LOGIT`` (see ``service.calibration._checks``), ``score`` a number in [0, 1];
a label is a class index or name that some contract version of the model knows
(``service.stream.label_classes``: the contract of the label's prediction judges it when they
meet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, cast

import numpy as np
from annotated_types import Ge, Len
from pydantic import Field, PlainValidator, StringConstraints, ValidationInfo, WithJsonSchema

from service.calibration._checks import MAX_ABS_LOGIT
from service.calibration.vocabulary import Task
from service.common.declared import (
    NOT_BLANK,
    BodyModel,
    Declared,
    Name,
    Timestamp,
    context_of,
    json_pattern,
    problem,
    problems,
    text_field,
)
from service.common.errors import ErrorCollector
from service.common.values import printable, text_problem
from service.contracts.labeled_sets import inputs_problem, number_problem
from service.contracts.model import MAX_CLASSES
from service.stream.cohorts import KEY_PATTERN, MAX_KEYS, MAX_LENGTH, parse_cohort
from service.stream.label_classes import SentLabel

MAX_ID_LENGTH = 200
#: Most items one batch may carry.
MAX_BATCH_ITEMS = 100_000


@dataclass(frozen=True)
class BatchEnvelope:
    """The batch-level fields: which model, which contract (optional), the raw items."""

    model: str
    contract_id: str | None
    items: list[Any]


def _items(value: Any, info: ValidationInfo) -> list[Any]:
    """A non-empty list of at most ``context["max_items"]`` items, parsed later."""
    limit = context_of(info).get("max_items", MAX_BATCH_ITEMS)
    if not isinstance(value, list) or not value:
        raise problem("expected a non-empty list")
    if len(value) > limit:
        raise problem(f"at most {limit} items per batch, got {len(value)}")
    return value


def parse_envelope(
    body: Mapping[str, Any],
    items_key: str,
    max_items: int = MAX_BATCH_ITEMS,
) -> BatchEnvelope:
    """Check ``{"model", "contract_id"?, items_key: [...]}`` (``PREDICTIONS``, ``LABELS``)."""
    errors = ErrorCollector()
    declared: Declared[Any] = PREDICTIONS if items_key == "predictions" else LABELS
    parsed = declared.parse(body, errors, datetime.now(UTC), max_items=max_items)
    errors.raise_if_any(f"the {items_key} batch is invalid")
    assert parsed is not None
    return BatchEnvelope(
        parsed.model, getattr(parsed, "contract_id", None), getattr(parsed, items_key)
    )


def id_problem(value: Any) -> str | None:
    """Why ``value`` is not an id, or None."""
    if type(value) is not str or not 0 < len(value) <= MAX_ID_LENGTH:
        return f"expected a string id of 1-{MAX_ID_LENGTH} characters"
    if value.isspace():
        return "an id must not be only whitespace"
    return text_problem(value)


def row_numbers_problem(row: Any, task: str, n_classes: int) -> str | None:
    """Why one row's logits/score is unusable, or None."""
    values = row if task == Task.MULTICLASS else [row]
    if task == Task.MULTICLASS and (type(row) is not list or len(row) != n_classes):
        return f"expected a list of K = {n_classes} numbers"
    for v in values:
        problem = number_problem(v)
        if problem is not None:
            return problem
    bad = inputs_problem(np.asarray([row], dtype=np.float64), task)
    return None if bad is None else bad[1]


def _id(value: Any) -> str:
    found = id_problem(value)
    if found is not None:
        raise problem(found)
    return cast(str, value)


def _cohort(value: Any, info: ValidationInfo) -> dict[str, str]:
    errors = ErrorCollector()
    cohort = parse_cohort(value, info.field_name or "cohort", errors, None)
    if cohort is None:
        raise problems(errors)
    return cohort


def _inputs(value: Any, info: ValidationInfo) -> Any:
    context = context_of(info)
    found = row_numbers_problem(value, context["task"], context["n_classes"])
    if found:
        raise problem(found)
    return value


def sent_label(value: Any, index_of: Mapping[str, int], n_classes: int) -> SentLabel | str:
    """``value`` as a label as sent, or why it is none: a class index ``0..K-1`` or a class
    name known to some contract version of the model (``K`` the largest of their class
    counts; ``index_of`` from ``label_classes.known_labels``)."""
    if isinstance(value, str):
        if value not in index_of:
            return f"{printable(value)!r} is not a class of any contract version of the model"
        return SentLabel(index_of[value], value)
    if type(value) is int:
        if 0 <= value < n_classes:
            return SentLabel(value)
        return f"class index must be in 0..{n_classes - 1}"
    return "expected a class index or a class name"


def _label(value: Any, info: ValidationInfo) -> SentLabel:
    context = context_of(info)
    label = sent_label(value, context["index_of"], context["n_classes"])
    if isinstance(label, str):
        raise problem(label)
    return label


_LOGIT = Annotated[float, Field(ge=-MAX_ABS_LOGIT, le=MAX_ABS_LOGIT)]
Id = Annotated[
    str,
    PlainValidator(
        _id,
        json_schema_input_type=Annotated[str, StringConstraints(max_length=MAX_ID_LENGTH), Len(1)],
    ),
]
#: An object of string keys (matching ``cohorts.KEY_PATTERN``) to strings; null is no cohort.
Cohort = Annotated[
    dict[str, str],
    PlainValidator(_cohort),
    WithJsonSchema(
        {
            "type": ["object", "null"],
            "maxProperties": MAX_KEYS,
            "propertyNames": {"pattern": json_pattern(KEY_PATTERN)},
            "additionalProperties": {"type": "string", "minLength": 1, "maxLength": MAX_LENGTH},
        }
    ),
]
Logits = Annotated[
    Any,
    PlainValidator(_inputs, json_schema_input_type=Annotated[list[_LOGIT], Len(2, MAX_CLASSES)]),
]
Score = Annotated[
    Any, PlainValidator(_inputs, json_schema_input_type=Annotated[float, Field(ge=0, le=1)])
]
Label = Annotated[
    SentLabel,
    PlainValidator(
        _label,
        json_schema_input_type=Annotated[int, Ge(0)]
        | Annotated[str, StringConstraints(min_length=1)],
    ),
]


class _Prediction(BodyModel):
    id: Id
    ts: Timestamp
    cohort: Cohort = Field(default=None, validate_default=True)


class MulticlassPrediction(_Prediction):
    """A prediction of a multiclass contract: K logits (the context's ``n_classes``)."""

    logits: Logits


class BinaryPrediction(_Prediction):
    """A prediction of a binary contract: P(positive) in [0, 1]."""

    score: Score


class PredictionItem(_Prediction):
    """A prediction as the document states it: logits or a score, exactly one of them."""

    logits: Logits = None
    score: Score = None


class LabelItem(BodyModel):
    """A label: the id of its prediction, a class index or name, the time it was known."""

    id: Id
    label: Label
    ts: Timestamp


#: A prediction of a multiclass or a binary contract (``logits`` or ``score``), by task.
PREDICTION_ITEM: dict[str, type[_Prediction]] = {
    "multiclass": MulticlassPrediction,
    "binary": BinaryPrediction,
}
ContractId = Annotated[str, text_field(36), NOT_BLANK]


#: The items of a batch: a non-empty list of at most ``context["max_items"]``, parsed later.
PredictionItems = Annotated[
    list[Any],
    PlainValidator(
        _items,
        json_schema_input_type=Annotated[list[PredictionItem], Len(1, MAX_BATCH_ITEMS)],
    ),
]
LabelItems = Annotated[
    list[Any],
    PlainValidator(
        _items, json_schema_input_type=Annotated[list[LabelItem], Len(1, MAX_BATCH_ITEMS)]
    ),
]


class PredictionBatchBody(BodyModel):
    """``POST /v1/predictions``: which model, which contract (optional), the items (parsed
    later, against the contract's task)."""

    model: Name
    contract_id: ContractId | None = None
    predictions: PredictionItems


class LabelBatchBody(BodyModel):
    """``POST /v1/labels``: which model, the items (parsed later, against its classes)."""

    model: Name
    labels: LabelItems


def _one_input(schema: dict[str, Any]) -> None:
    """Logits for a multiclass contract, a score for a binary one: exactly one of them."""
    schema["properties"]["predictions"]["items"]["oneOf"] = [
        {"required": ["logits"]},
        {"required": ["score"]},
    ]


PREDICTIONS = Declared("PredictionBatch", PredictionBatchBody, adjust=_one_input)
LABELS = Declared("LabelBatch", LabelBatchBody)
