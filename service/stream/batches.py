"""Validation of prediction and label batches: every bad item listed, nothing half-accepted.

Per item: ``id`` is 1-200 characters of valid text (no NUL, no lone surrogate), not only
whitespace; ``ts`` is an RFC 3339 timestamp with a zone within ``service.common.values``'s range
around the time of receipt (not before 2000-01-01, at most 1 day ahead); ``cohort`` is an object
of string keys (the whole key matches ``cohorts.KEY_PATTERN``) to strings of valid text, then
``cohorts.parse_cohort``'s rules; ``logits`` are K finite numbers within +-``MAX_ABS_LOGIT`` (see
``service.calibration._checks``), ``score`` a number in [0, 1]; a label is a class index or name
that some contract version of the model knows (``service.stream.label_classes``: the contract of
the label's prediction judges it when they meet).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, cast

import numpy as np
from annotated_types import Ge, Len
from pydantic import Field, PlainValidator, StringConstraints, ValidationInfo, WithJsonSchema

from service.calibration._checks import MAX_ABS_LOGIT
from service.common.declared import (
    NOT_BLANK,
    BodyModel,
    Declared,
    Name,
    Timestamp,
    collect,
    context_of,
    json_pattern,
    problem,
    problems,
    text_field,
)
from service.common.errors import ErrorCollector
from service.common.values import (
    parse_timestamp,
    text_problem,
    timestamp_problem,
)
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


@dataclass(frozen=True)
class PredictionBatch:
    """Validated predictions; ``inputs`` is (N, K) float64 logits or (N,) scores in [0, 1]."""

    ids: list[str]
    ts: list[datetime]
    cohorts: list[dict[str, str]]
    inputs: np.ndarray


@dataclass(frozen=True)
class LabelBatch:
    """Validated labels as sent, first occurrence of each id only, with the position of that
    occurrence in the batch (``items``).

    ``repeats`` are later occurrences of an id in the same batch: ``(id, label)``.
    """

    ids: list[str]
    labels: list[SentLabel]
    ts: list[datetime]
    items: list[int]
    repeats: list[tuple[str, SentLabel]]


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


def _printable(key: str) -> str:
    return ascii(key)[1:-1][:64]


def check_cohort(
    value: Any, path: str, errors: ErrorCollector, item: int | None
) -> dict[str, str] | None:
    """The cohort's types and text (keys matching whole, values of valid text), then
    ``parse_cohort``'s rules; ``None`` (absent) is no cohort."""
    if value is None:
        return {}
    if type(value) is not dict:
        errors.add(path, "expected an object of string keys to string values", item)
        return None
    for key, val in value.items():
        if not KEY_PATTERN.fullmatch(key):
            errors.add(
                f"{path}.{_printable(key)}",
                "keys are 1-64 letters, digits, _ . - starting with a letter or _",
                item,
            )
            return None
        if type(val) is not str:
            errors.add(f"{path}.{key}", "expected a string value", item)
            return None
        problem = text_problem(val)
        if problem is not None:
            errors.add(f"{path}.{key}", problem, item)
            return None
    return parse_cohort(value, path, errors, item)


def row_numbers_problem(row: Any, task: str, n_classes: int) -> str | None:
    """Why one row's logits/score is unusable, or None."""
    values = row if task == "multiclass" else [row]
    if task == "multiclass" and (type(row) is not list or len(row) != n_classes):
        return f"expected a list of K = {n_classes} numbers"
    for v in values:
        problem = number_problem(v)
        if problem is not None:
            return problem
    bad = inputs_problem(np.asarray([row], dtype=np.float64), task)
    return None if bad is None else bad[1]


def _numbers_only(values: Iterable[Any]) -> bool:
    """True when every value is a JSON number (``bool`` is its own type, so it is excluded)."""
    return set(map(type, values)) <= {float, int}


def _valid_texts(texts: list[str]) -> bool:
    """True when every string is valid text (one pass over their concatenation)."""
    return text_problem("".join(texts)) is None


def _id(value: Any) -> str:
    found = id_problem(value)
    if found is not None:
        raise problem(found)
    return cast(str, value)


def _cohort(value: Any, info: ValidationInfo) -> dict[str, str]:
    errors = ErrorCollector()
    cohort = check_cohort(value, info.field_name or "cohort", errors, None)
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
            return f"{_printable(value)!r} is not a class of any contract version of the model"
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
LABEL_ITEM = LabelItem
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


def _clean_ids(ids: list[Any]) -> bool:
    """Whether every id is a string of 1-``MAX_ID_LENGTH`` characters of valid text."""
    return (
        set(map(type, ids)) == {str}
        and min(map(len, ids)) >= 1
        and max(map(len, ids)) <= MAX_ID_LENGTH
        and not any(map(str.isspace, ids))
        and _valid_texts(ids)
    )


def _stamps_in_range(raw: list[Any], now: datetime) -> list[datetime] | None:
    """The timestamps, if every one parses and all lie in the accepted range, else None."""
    stamps = [parse_timestamp(t) for t in raw]
    if None in stamps:
        return None
    return _in_range(cast(list[datetime], stamps), now)


def _in_range(stamps: list[datetime], now: datetime) -> list[datetime] | None:
    """``stamps`` (zone-aware, at least one) if all lie in the accepted range, else None."""
    if timestamp_problem(min(stamps), now) or timestamp_problem(max(stamps), now):
        return None
    return stamps


def _parse_predictions_fast(
    items: Sequence[Any], task: str, n_classes: int, now: datetime
) -> PredictionBatch | None:
    """Validate a whole batch with set and array operations; None if anything looks wrong.

    The common case of a clean batch costs a few microseconds per item; any doubt falls back to
    the item-by-item path, which names every problem.
    """
    allowed = frozenset(PREDICTION_ITEM[task].model_fields)
    value_key = "logits" if task == "multiclass" else "score"
    if set(map(type, items)) != {dict}:
        return None
    if not all(allowed.issuperset(item) and len(item) >= 3 for item in items):
        return None
    try:
        ids = [item["id"] for item in items]
        raw_ts = [item["ts"] for item in items]
        values = [item[value_key] for item in items]
    except KeyError:
        return None
    stamps = [parse_timestamp(t) for t in raw_ts]
    if None in stamps:
        return None
    valid = cast(list[datetime], stamps)
    cohorts = [{} if (c := item.get("cohort")) is None else c for item in items]
    if set(map(type, cohorts)) != {dict}:
        return None
    if task == "multiclass":
        if set(map(type, values)) != {list} or set(map(len, values)) != {n_classes}:
            return None
        if not _numbers_only(itertools.chain.from_iterable(values)):
            return None
    elif not _numbers_only(values):
        return None
    try:
        inputs = np.asarray(values, dtype=np.float64)
    except OverflowError:
        return None
    return prediction_columns(ids, valid, cohorts, inputs, task, now)


def prediction_columns(
    ids: list[Any],
    stamps: list[datetime],
    cohorts: list[dict[str, Any]],
    inputs: np.ndarray,
    task: str,
    now: datetime,
    *,
    cohorts_checked: bool = False,
) -> PredictionBatch | None:
    """The fast path's checks of a batch given as columns (parsed ``stamps``; ``inputs`` as
    float64, (N, K) or (N,)): the batch if every id, cohort and input passes, else None (the
    item-by-item path then names each problem). Shared by JSON items and Arrow columns;
    ``cohorts_checked``: the caller holds every cohort to ``check_cohort`` already (Arrow
    checks the cohort key columns whole)."""
    if not ids or not _clean_ids(ids):
        return None
    if len(stamps) != len(ids) or len(cohorts) != len(ids) or len(inputs) != len(ids):
        return None
    if _in_range(stamps, now) is None:
        return None
    if not set(map(type, itertools.chain.from_iterable(c.values() for c in cohorts))) <= {str}:
        return None
    checked: dict[tuple[tuple[str, str], ...], bool] = {}
    for cohort in () if cohorts_checked else cohorts:
        key = tuple(cohort.items())
        if key not in checked:
            checked[key] = check_cohort(cohort, "cohort", ErrorCollector(), 0) is not None
        if not checked[key]:
            return None
    if not np.isfinite(inputs).all() or inputs_problem(inputs, task) is not None:
        return None
    return PredictionBatch(ids=ids, ts=stamps, cohorts=cohorts, inputs=inputs)


def parse_predictions(
    items: Sequence[Any],
    *,
    task: str,
    n_classes: int,
    now: datetime | None = None,
) -> PredictionBatch:
    """Validate every item against the rules of the module docstring, timestamps against the
    time of receipt ``now`` (default: the current time); raise ``ValidationFailed`` listing each
    bad item and field."""
    now = now or datetime.now(UTC)
    fast = _parse_predictions_fast(items, task, n_classes, now)
    if fast is not None:
        return fast
    return parse_predictions_declared(items, task=task, n_classes=n_classes, now=now)


def parse_predictions_declared(
    items: Sequence[Any], *, task: str, n_classes: int, now: datetime
) -> PredictionBatch:
    """Validate item by item against ``PREDICTION_ITEM``, naming every problem: the path a
    batch takes when the fast path doubts it, and the reference the fast path must agree with."""
    errors = ErrorCollector()
    declared = PREDICTION_ITEM[task]
    value_key = "logits" if task == "multiclass" else "score"
    context = {"now": now, "task": task, "n_classes": n_classes}
    ids: list[str] = []
    stamps: list[datetime] = []
    cohorts: list[dict[str, str]] = []
    raw: list[Any] = []
    for i, item in enumerate(items):
        parsed = collect(declared, item, errors, context, path=f"predictions[{i}]", item=i)
        if errors or parsed is None:
            continue
        ids.append(parsed.id)
        stamps.append(parsed.ts)
        cohorts.append(parsed.cohort)
        raw.append(getattr(parsed, value_key))
    errors.raise_if_any("the predictions batch has invalid items; nothing was written")
    return PredictionBatch(
        ids=ids, ts=stamps, cohorts=cohorts, inputs=np.asarray(raw, dtype=np.float64)
    )


def _sent_labels(
    labels: list[Any], index_of: Mapping[str, int], n_classes: int
) -> list[SentLabel] | None:
    """The labels as sent if every one is valid (a known name or an index below ``n_classes``),
    else None."""
    sent = []
    for label in labels:
        if type(label) is int:
            if not 0 <= label < n_classes:
                return None
            sent.append(SentLabel(label))
        elif type(label) is str and label in index_of:
            sent.append(SentLabel(index_of[label], label))
        else:
            return None
    return sent


def _parse_labels_fast(
    items: Sequence[Any], index_of: Mapping[str, int], n_classes: int, now: datetime
) -> LabelBatch | None:
    """Validate a clean label batch with set operations; None if anything looks wrong (the
    declared item-by-item path then names every problem)."""
    if set(map(type, items)) != {dict} or set(map(len, items)) != {3}:
        return None
    try:
        ids = [item["id"] for item in items]
        raw_labels = [item["label"] for item in items]
        raw_ts = [item["ts"] for item in items]
    except KeyError:
        return None
    stamps = _stamps_in_range(raw_ts, now)
    return label_columns(ids, raw_labels, stamps, index_of, n_classes, now)


def label_columns(
    ids: list[Any],
    raw_labels: list[Any],
    stamps: list[datetime] | None,
    index_of: Mapping[str, int],
    n_classes: int,
    now: datetime,
) -> LabelBatch | None:
    """The fast path's checks of labels given as columns (``stamps`` parsed, None if any did not
    parse): the batch, repeats set apart, if every id, label and time passes, else None (the
    item-by-item path then names each problem). Shared by JSON items and Arrow columns."""
    if not ids or not _clean_ids(ids) or stamps is None or len(stamps) != len(ids):
        return None
    sent = _sent_labels(raw_labels, index_of, n_classes)
    valid = _in_range(stamps, now)
    if sent is None or valid is None or len(sent) != len(ids):
        return None
    first: set[str] = set()
    keep: list[int] = []
    repeats: list[tuple[str, SentLabel]] = []
    for i, (ident, label) in enumerate(zip(ids, sent, strict=True)):
        if ident in first:
            repeats.append((ident, label))
        else:
            first.add(ident)
            keep.append(i)
    return LabelBatch(
        ids=[ids[i] for i in keep],
        labels=[sent[i] for i in keep],
        ts=[valid[i] for i in keep],
        items=keep,
        repeats=repeats,
    )


def parse_labels(
    items: Sequence[Any],
    *,
    index_of: Mapping[str, int],
    n_classes: int,
    now: datetime | None = None,
) -> LabelBatch:
    """Validate labels (a class index below ``n_classes`` or a class name in ``index_of``, with
    its provisional index: ``label_classes.known_labels``), timestamps against the time of
    receipt ``now`` (default: the current time)."""
    now = now or datetime.now(UTC)
    fast = _parse_labels_fast(items, index_of, n_classes, now)
    if fast is not None:
        return fast
    errors = ErrorCollector()
    context = {"now": now, "index_of": index_of, "n_classes": n_classes}
    first: set[str] = set()
    ids: list[str] = []
    labels: list[SentLabel] = []
    stamps: list[datetime] = []
    positions: list[int] = []
    repeats: list[tuple[str, SentLabel]] = []
    for i, item in enumerate(items):
        parsed = collect(LabelItem, item, errors, context, path=f"labels[{i}]", item=i)
        if errors or parsed is None:
            continue
        ident, label = parsed.id, parsed.label
        if ident in first:
            repeats.append((ident, label))
            continue
        first.add(ident)
        ids.append(ident)
        labels.append(label)
        stamps.append(parsed.ts)
        positions.append(i)
    errors.raise_if_any("the labels batch has invalid items; nothing was written")
    return LabelBatch(ids=ids, labels=labels, ts=stamps, items=positions, repeats=repeats)
