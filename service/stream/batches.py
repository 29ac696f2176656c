"""Validation of prediction and label batches: every bad item listed, nothing half-accepted.

Per item: ``id`` is 1-200 characters of valid text (no NUL, no lone surrogate); ``ts`` is an
RFC 3339 timestamp with a zone within ``service.common.values``'s range around the time of receipt
(not before 2000-01-01, at most 1 day ahead); ``cohort`` is an object of string keys (the whole
key matches ``cohorts.KEY_PATTERN``) to strings of valid text, then ``cohorts.parse_cohort``'s
rules; ``logits`` are K finite numbers within +-``MAX_ABS_LOGIT`` (see
``service.calibration._checks``), ``score`` a number in [0, 1]; a label is a class index or name.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np

from service.common.errors import ErrorCollector
from service.common.values import (
    NAME_PATTERN,
    TIMESTAMP_HINT,
    expect_object,
    expect_str,
    parse_timestamp,
    text_problem,
    timestamp_problem,
)
from service.contracts.labeled_sets import inputs_problem, number_problem
from service.stream.cohorts import KEY_PATTERN, parse_cohort

MAX_ID_LENGTH = 200
_PREDICTION_KEYS = {
    "multiclass": frozenset({"id", "ts", "cohort", "logits"}),
    "binary": frozenset({"id", "ts", "cohort", "score"}),
}
_LABEL_KEYS = frozenset({"id", "label", "ts"})


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
    """Validated labels as class indices, first occurrence of each id only.

    ``repeats`` are later occurrences of an id in the same batch: ``(id, label)``.
    """

    ids: list[str]
    labels: list[int]
    ts: list[datetime]
    repeats: list[tuple[str, int]]


def parse_envelope(body: Mapping[str, Any], items_key: str, max_items: int) -> BatchEnvelope:
    """Check ``{"model", "contract_id"?, items_key: [...]}``."""
    errors = ErrorCollector()
    optional = ("contract_id",) if items_key == "predictions" else ()
    expect_object(body, "", errors, required=("model", items_key), optional=optional)
    model = (
        expect_str(body.get("model"), "model", errors, pattern=NAME_PATTERN)
        if "model" in body
        else None
    )
    contract_id = body.get("contract_id")
    if contract_id is not None:
        contract_id = expect_str(contract_id, "contract_id", errors, max_length=36)
    items = body.get(items_key)
    if items_key in body and (not isinstance(items, list) or not items):
        errors.add(items_key, "expected a non-empty list")
    elif isinstance(items, list) and len(items) > max_items:
        errors.add(items_key, f"at most {max_items} items per batch, got {len(items)}")
    errors.raise_if_any(f"the {items_key} batch is invalid")
    assert model is not None and isinstance(items, list)
    return BatchEnvelope(model=model, contract_id=contract_id, items=items)


def _check_id(value: Any, path: str, errors: ErrorCollector, item: int) -> str | None:
    if type(value) is not str or not 0 < len(value) <= MAX_ID_LENGTH:
        errors.add(path, f"expected a string id of 1-{MAX_ID_LENGTH} characters", item)
        return None
    problem = text_problem(value)
    if problem is not None:
        errors.add(path, problem, item)
        return None
    return value


def _check_ts(
    value: Any, path: str, errors: ErrorCollector, item: int, now: datetime
) -> datetime | None:
    ts = parse_timestamp(value)
    problem = TIMESTAMP_HINT if ts is None else timestamp_problem(ts, now)
    if problem is not None:
        errors.add(path, problem, item)
        return None
    return ts


def _printable(key: str) -> str:
    return ascii(key)[1:-1][:64]


def _check_cohort(
    value: Any, path: str, errors: ErrorCollector, item: int
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


def _check_row_numbers(row: Any, task: str, n_classes: int) -> str | None:
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


def _parse_predictions_fast(
    items: Sequence[Any], task: str, n_classes: int, now: datetime
) -> PredictionBatch | None:
    """Validate a whole batch with set and array operations; None if anything looks wrong.

    The common case of a clean batch costs a few microseconds per item; any doubt falls back to
    the item-by-item path, which names every problem.
    """
    allowed = _PREDICTION_KEYS[task]
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
    if (
        set(map(type, ids)) != {str}
        or min(map(len, ids)) < 1
        or max(map(len, ids)) > MAX_ID_LENGTH
        or not _valid_texts(ids)
    ):
        return None
    stamps = [parse_timestamp(t) for t in raw_ts]
    if None in stamps:
        return None
    valid = cast(list[datetime], stamps)
    if timestamp_problem(min(valid), now) or timestamp_problem(max(valid), now):
        return None
    checked: dict[tuple[tuple[str, str], ...], bool] = {}
    cohorts = [{} if (c := item.get("cohort")) is None else c for item in items]
    if set(map(type, cohorts)) != {dict}:
        return None
    if not set(map(type, itertools.chain.from_iterable(c.values() for c in cohorts))) <= {str}:
        return None
    for cohort in cohorts:
        key = tuple(cohort.items())
        if key not in checked:
            checked[key] = _check_cohort(cohort, "cohort", ErrorCollector(), 0) is not None
        if not checked[key]:
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
    if not np.isfinite(inputs).all() or inputs_problem(inputs, task) is not None:
        return None
    return PredictionBatch(ids=ids, ts=valid, cohorts=cohorts, inputs=inputs)


def parse_predictions(
    items: Sequence[Any], *, task: str, n_classes: int, now: datetime | None = None
) -> PredictionBatch:
    """Validate every item against the rules of the module docstring, timestamps against the
    time of receipt ``now`` (default: the current time); raise ``ValidationFailed`` listing each
    bad item and field."""
    now = now or datetime.now(UTC)
    fast = _parse_predictions_fast(items, task, n_classes, now)
    if fast is not None:
        return fast
    errors = ErrorCollector()
    allowed = _PREDICTION_KEYS[task]
    value_key = "logits" if task == "multiclass" else "score"
    ids: list[str] = []
    stamps: list[datetime] = []
    cohorts: list[dict[str, str]] = []
    raw: list[Any] = []
    for i, item in enumerate(items):
        path = f"predictions[{i}]"
        if type(item) is not dict:
            errors.add(path, "expected an object", i)
            continue
        if not allowed.issuperset(item):
            for key in sorted(set(item) - allowed):
                errors.add(f"{path}.{key}", "unknown field", i)
        for key in ("id", "ts", value_key):
            if key not in item:
                errors.add(f"{path}.{key}", "required field is missing", i)
        ident = _check_id(item.get("id"), f"{path}.id", errors, i) if "id" in item else None
        ts = _check_ts(item.get("ts"), f"{path}.ts", errors, i, now) if "ts" in item else None
        cohort = _check_cohort(item.get("cohort"), f"{path}.cohort", errors, i)
        value = item.get(value_key)
        if value_key in item:
            problem = _check_row_numbers(value, task, n_classes)
            if problem:
                errors.add(f"{path}.{value_key}", problem, i)
        if errors:
            continue
        assert ident is not None and ts is not None and cohort is not None
        ids.append(ident)
        stamps.append(ts)
        cohorts.append(cohort)
        raw.append(value)
    errors.raise_if_any("the predictions batch has invalid items; nothing was written")
    return PredictionBatch(
        ids=ids, ts=stamps, cohorts=cohorts, inputs=np.asarray(raw, dtype=np.float64)
    )


def parse_labels(
    items: Sequence[Any], *, classes: Sequence[str], now: datetime | None = None
) -> LabelBatch:
    """Validate labels (class index or class name) against ``classes``, timestamps against the
    time of receipt ``now`` (default: the current time)."""
    now = now or datetime.now(UTC)
    errors = ErrorCollector()
    index_of = {name: k for k, name in enumerate(classes)}
    first: dict[str, int] = {}
    ids: list[str] = []
    labels: list[int] = []
    stamps: list[datetime] = []
    repeats: list[tuple[str, int]] = []
    for i, item in enumerate(items):
        path = f"labels[{i}]"
        if type(item) is not dict:
            errors.add(path, "expected an object", i)
            continue
        for key in sorted(set(item) - _LABEL_KEYS):
            errors.add(f"{path}.{key}", "unknown field", i)
        for key in sorted(_LABEL_KEYS - set(item)):
            errors.add(f"{path}.{key}", "required field is missing", i)
        ident = _check_id(item.get("id"), f"{path}.id", errors, i) if "id" in item else None
        ts = _check_ts(item.get("ts"), f"{path}.ts", errors, i, now) if "ts" in item else None
        label = item.get("label")
        index: int | None = None
        if isinstance(label, str):
            index = index_of.get(label)
            if index is None and "label" in item:
                errors.add(f"{path}.label", f"unknown class name {_printable(label)!r}", i)
        elif type(label) is int:
            if 0 <= label < len(classes):
                index = label
            else:
                errors.add(f"{path}.label", f"class index must be in 0..{len(classes) - 1}", i)
        elif "label" in item:
            errors.add(f"{path}.label", "expected a class index or a class name", i)
        if errors or ident is None or ts is None or index is None:
            continue
        if ident in first:
            repeats.append((ident, index))
            continue
        first[ident] = index
        ids.append(ident)
        labels.append(index)
        stamps.append(ts)
    errors.raise_if_any("the labels batch has invalid items; nothing was written")
    return LabelBatch(ids=ids, labels=labels, ts=stamps, repeats=repeats)
