"""A batch checked as columns: ids, timestamps, cohorts, and logits or scores as one array.

A prediction or label batch, sent as JSON items or as Arrow columns (``arrow_batches``), is
checked here with set and array operations against the rules of ``batch_bodies`` (its module
docstring states them). A batch any check doubts is validated item by item against the declared
items (``batch_bodies.PREDICTION_ITEM``, ``LabelItem``), which name every problem.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np

from service.calibration.vocabulary import Task
from service.common.declared import (
    collect,
)
from service.common.errors import ErrorCollector
from service.common.values import (
    parse_timestamp,
    text_problem,
    timestamp_problem,
)
from service.contracts.labeled_sets import inputs_problem
from service.stream.batch_bodies import (
    MAX_ID_LENGTH,
    PREDICTION_ITEM,
    LabelItem,
    check_cohort,
)
from service.stream.label_classes import SentLabel


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


def _numbers_only(values: Iterable[Any]) -> bool:
    """True when every value is a JSON number (``bool`` is its own type, so it is excluded)."""
    return set(map(type, values)) <= {float, int}


def _valid_texts(texts: list[str]) -> bool:
    """True when every string is valid text (one pass over their concatenation)."""
    return text_problem("".join(texts)) is None


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
    value_key = "logits" if task == Task.MULTICLASS else "score"
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
    if task == Task.MULTICLASS:
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
    value_key = "logits" if task == Task.MULTICLASS else "score"
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
