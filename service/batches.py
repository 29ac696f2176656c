"""Validation of prediction and label batches: every bad item listed, nothing half-accepted."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import numpy as np

from service.cohorts import parse_cohort
from service.errors import ErrorCollector
from service.validation import NAME_PATTERN, expect_object, expect_str, parse_timestamp

MAX_ID_LENGTH = 200
_PREDICTION_KEYS = {
    "multiclass": frozenset({"id", "ts", "cohort", "logits"}),
    "binary": frozenset({"id", "ts", "cohort", "score"}),
}
_LABEL_KEYS = frozenset({"id", "label", "ts"})
_TS_HINT = "expected an RFC 3339 timestamp with a zone, e.g. 2026-10-01T00:00:00Z"


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
    if type(value) is not str or not 0 < len(value) <= MAX_ID_LENGTH or "\x00" in value:
        errors.add(path, f"expected a string id of 1-{MAX_ID_LENGTH} characters", item)
        return None
    return value


def _check_row_numbers(row: Any, task: str, n_classes: int) -> str | None:
    """Why one row's logits/score is unusable, or None."""
    values = row if task == "multiclass" else [row]
    if task == "multiclass" and (type(row) is not list or len(row) != n_classes):
        return f"expected a list of K = {n_classes} numbers"
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return "expected numbers"
        if not np.isfinite(v):
            return "must be finite"
    if task == "binary" and not 0.0 <= row <= 1.0:
        return "a score is P(positive): must be in [0, 1]"
    return None


def _numbers_only(values: Iterable[Any]) -> bool:
    """True when every value is a JSON number (``bool`` is its own type, so it is excluded)."""
    return set(map(type, values)) <= {float, int}


def _parse_predictions_fast(
    items: Sequence[Any], task: str, n_classes: int
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
        or any("\x00" in i for i in ids)
    ):
        return None
    stamps = [parse_timestamp(t) for t in raw_ts]
    if None in stamps:
        return None
    checked: dict[tuple[Any, ...], bool] = {}
    cohorts = [{} if (c := item.get("cohort")) is None else c for item in items]
    if set(map(type, cohorts)) != {dict}:
        return None
    for cohort in cohorts:
        key = tuple(cohort.items())
        if key not in checked:
            checked[key] = parse_cohort(cohort, "cohort", ErrorCollector()) is not None
        if not checked[key]:
            return None
    if task == "multiclass":
        if set(map(type, values)) != {list} or set(map(len, values)) != {n_classes}:
            return None
        if not _numbers_only(itertools.chain.from_iterable(values)):
            return None
    elif not _numbers_only(values):
        return None
    inputs = np.asarray(values, dtype=np.float64)
    if not np.isfinite(inputs).all():
        return None
    if task == "binary" and (inputs.min() < 0.0 or inputs.max() > 1.0):
        return None
    return PredictionBatch(ids=ids, ts=cast(list[datetime], stamps), cohorts=cohorts, inputs=inputs)


def parse_predictions(items: Sequence[Any], *, task: str, n_classes: int) -> PredictionBatch:
    """Validate every item; raise ``ValidationFailed`` listing each bad item and field."""
    fast = _parse_predictions_fast(items, task, n_classes)
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
        ts = parse_timestamp(item.get("ts")) if "ts" in item else None
        if ts is None and "ts" in item:
            errors.add(f"{path}.ts", _TS_HINT, i)
        cohort = parse_cohort(item.get("cohort"), f"{path}.cohort", errors, i)
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


def parse_labels(items: Sequence[Any], *, classes: Sequence[str]) -> LabelBatch:
    """Validate labels (class index or class name) against ``classes``."""
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
        ts = parse_timestamp(item.get("ts")) if "ts" in item else None
        if ts is None and "ts" in item:
            errors.add(f"{path}.ts", _TS_HINT, i)
        label = item.get("label")
        index: int | None = None
        if isinstance(label, str):
            index = index_of.get(label)
            if index is None and "label" in item:
                errors.add(f"{path}.label", f"unknown class name {label[:64]!r}", i)
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
