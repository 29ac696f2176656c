"""A JSON batch read as columns: ids, timestamps, cohorts, and logits or scores as one array.

The items of a prediction or label batch are read once into columns (``column_checks``:
``SentPredictions``, ``SentLabels``), which go through the checks an Arrow batch's columns go
through (``arrow_batches``). A batch of objects with exactly the fields of its item and values
of the right JSON types is read with set operations and one array conversion, a few
microseconds per item; any other is read item by item, each row marked with what it lacks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from service.calibration.vocabulary import Task
from service.common.values import parse_timestamp
from service.stream.batch_bodies import PREDICTION_ITEM
from service.stream.column_checks import (
    LabelBatch,
    PredictionBatch,
    SentLabels,
    SentPredictions,
    SentShape,
    accept_labels,
    accept_predictions,
    check_labels,
    check_predictions,
)

_LABEL_FIELDS = frozenset(("id", "label", "ts"))


def _numbers_only(values: Iterable[Any]) -> bool:
    """True when every value is a JSON number (``bool`` is its own type, so it is excluded)."""
    return set(map(type, values)) <= {float, int}


def _clean_predictions(items: Sequence[Any], task: str, n_classes: int) -> SentPredictions | None:
    """The columns of a batch of objects with the declared keys and values of the right JSON
    types, with every time parsed; None if any item is otherwise."""
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
    return SentPredictions(ids, stamps, cohorts, inputs)


def _number_row(value: Any, task: str, n_classes: int) -> np.ndarray | None:
    """One item's logits (K numbers) or score as float64, or None if it is not that."""
    values = value if task == Task.MULTICLASS else [value]
    if task == Task.MULTICLASS and (type(value) is not list or len(value) != n_classes):
        return None
    if not _numbers_only(values):
        return None
    try:
        row = np.asarray(values, dtype=np.float64)
    except OverflowError:
        return None
    return row if task == Task.MULTICLASS else row[0]


def _shape(items: Sequence[Any], fields: frozenset[str]) -> SentShape:
    objects = np.fromiter((type(item) is dict for item in items), bool, len(items))
    unknown = np.fromiter(
        (len(item.keys() - fields) if type(item) is dict else 0 for item in items),
        np.int64,
        len(items),
    )
    return SentShape(objects, unknown)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if type(item) is dict else None


def _predictions_one_by_one(items: Sequence[Any], task: str, n_classes: int) -> SentPredictions:
    """The columns of any batch, item by item: what an item lacks is None (a cohort ``{}``)
    or an unreadable row of inputs."""
    value_key = "logits" if task == Task.MULTICLASS else "score"
    rows = [_number_row(_field(item, value_key), task, n_classes) for item in items]
    readable = np.fromiter((row is not None for row in rows), bool, len(rows))
    inputs = np.full((len(items), n_classes) if task == Task.MULTICLASS else len(items), np.nan)
    for i, row in enumerate(rows):
        if row is not None:
            inputs[i] = row
    return SentPredictions(
        ids=[_field(item, "id") for item in items],
        stamps=[parse_timestamp(_field(item, "ts")) for item in items],
        cohorts=[{} if (c := _field(item, "cohort")) is None else c for item in items],
        inputs=inputs,
        readable=readable,
        shape=_shape(items, frozenset(PREDICTION_ITEM[task].model_fields)),
    )


def _parse_predictions_fast(
    items: Sequence[Any], task: str, n_classes: int, now: datetime
) -> PredictionBatch | None:
    """A clean batch accepted whole (``column_checks.accept_predictions``), else None."""
    sent = _clean_predictions(items, task, n_classes)
    return None if sent is None else accept_predictions(sent, task, now)


def parse_predictions(
    items: Sequence[Any],
    *,
    task: str,
    n_classes: int,
    now: datetime | None = None,
) -> PredictionBatch:
    """Validate every item against the rules of ``batch_bodies``, timestamps against the time
    of receipt ``now`` (default: the current time); raise ``ValidationFailed`` listing each
    bad item and field."""
    now = now or datetime.now(UTC)
    sent = _clean_predictions(items, task, n_classes)
    if sent is None:
        sent = _predictions_one_by_one(items, task, n_classes)
    return check_predictions(sent, items.__getitem__, task=task, n_classes=n_classes, now=now)


def _clean_labels(items: Sequence[Any]) -> SentLabels | None:
    """The columns of a batch of objects of exactly the three declared keys; None if any item
    is otherwise."""
    if set(map(type, items)) != {dict} or set(map(len, items)) != {3}:
        return None
    try:
        ids = [item["id"] for item in items]
        labels = [item["label"] for item in items]
        raw_ts = [item["ts"] for item in items]
    except KeyError:
        return None
    return SentLabels(ids, labels, [parse_timestamp(t) for t in raw_ts])


def _labels_one_by_one(items: Sequence[Any]) -> SentLabels:
    return SentLabels(
        ids=[_field(item, "id") for item in items],
        labels=[_field(item, "label") for item in items],
        stamps=[parse_timestamp(_field(item, "ts")) for item in items],
        shape=_shape(items, _LABEL_FIELDS),
    )


def _parse_labels_fast(
    items: Sequence[Any], index_of: Mapping[str, int], n_classes: int, now: datetime
) -> LabelBatch | None:
    """A clean batch accepted whole (``column_checks.accept_labels``), else None."""
    sent = _clean_labels(items)
    return None if sent is None else accept_labels(sent, index_of, n_classes, now)


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
    sent = _clean_labels(items) or _labels_one_by_one(items)
    return check_labels(sent, items.__getitem__, index_of=index_of, n_classes=n_classes, now=now)
