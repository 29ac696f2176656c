"""Prediction and label batches sent as an Apache Arrow IPC stream, checked by the JSON rules.

``arrow_stream`` reads the body into a table. Predictions: ``id`` (string), ``ts`` (timestamp
with a time zone, or RFC 3339 strings), then ``logits`` (a fixed-size list of K numbers; a
variable list whose rows all hold K numbers is taken too) for a multiclass contract or ``score``
(a number in [0, 1]) for a binary one, and any further column is a cohort key of string values
(a null is the key absent from that row's cohort). Labels: ``id``, ``label`` (class index or
class name), ``ts``. Dictionary-encoded columns are decoded first.

The columns are converted without building an object per item and checked by
``batches.prediction_columns`` / ``batches.label_columns``, the checks of the JSON fast path;
when those find anything wrong, ``arrow_rows`` names every bad row and field as the item-by-item
path of JSON bodies does (``predictions[3].ts``). A column of the wrong type, or a missing or
unexpected column, is refused whole, naming the column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from service.calibration.vocabulary import Task
from service.common.errors import ErrorCollector, ErrorDetail, ValidationFailed
from service.common.values import format_timestamp, parse_timestamp
from service.stream.arrow_rows import (
    RowProblems,
    label_problems,
    logit_problems,
    score_problems,
)
from service.stream.arrow_stream import is_text, refused, type_name
from service.stream.batch_bodies import check_cohort
from service.stream.batch_columns import (
    LabelBatch,
    PredictionBatch,
    label_columns,
    parse_labels,
    parse_predictions,
    prediction_columns,
)
from service.stream.cohorts import MAX_KEYS, MAX_LENGTH, OTHER

_PREDICTION_COLUMNS = ("id", "ts", "logits", "score")
_LABEL_COLUMNS = ("id", "label", "ts")


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_dictionary(column.type):
        return column.cast(column.type.value_type)
    return column


def _strings(table: pa.Table, name: str) -> pa.ChunkedArray:
    column = _decoded(table.column(name))
    if not is_text(column.type):
        raise refused(name, f"expected a string column, got {type_name(column.type)}")
    return column


def _required(table: pa.Table, names: Sequence[str]) -> None:
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise ValidationFailed(
            "the Arrow batch is invalid; nothing was written",
            [ErrorDetail(n, "required column is missing") for n in missing],
        )


#: Epoch seconds of 0001-01-01 and of the end of 9999: the range a ``datetime`` holds.
_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _stamps(table: pa.Table) -> tuple[list[datetime] | None, list[Any]]:
    """``(parsed, raw)``: the ``ts`` column as aware UTC datetimes (None when a value is null,
    out of ``datetime``'s range or does not parse) and per row as sent: None for a null, an
    aware datetime, or text (RFC 3339 or not; ``out of range`` beyond ``datetime``'s range)."""
    column = _decoded(table.column("ts"))
    if is_text(column.type):
        raw = column.to_pylist()
        parsed = [parse_timestamp(t) if isinstance(t, str) else None for t in raw]
        return (None if None in parsed else parsed), raw  # type: ignore[return-value]
    if not pa.types.is_timestamp(column.type):
        raise refused("ts", f"expected a timestamp or string column, got {type_name(column.type)}")
    if column.type.tz is None:
        raise refused(
            "ts", f"expected timestamps with a time zone, got {type_name(column.type)} (no zone)"
        )
    per_second = _PER_SECOND[column.type.unit]
    native = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    inside = (native >= _FIRST_SECOND * per_second) & (native <= _LAST_SECOND * per_second)
    micros = np.where(inside & ~nulls, native, 0)
    micros = micros * (10**6 // per_second) if per_second <= 10**6 else micros // 1000
    naive = micros.astype("datetime64[us]").astype(datetime).tolist()
    aware: list[datetime] = [t.replace(tzinfo=UTC) for t in naive]
    if inside.all() and not nulls.any():
        return aware, aware
    raw = [
        None if null else (t if ok else "out of range")
        for t, ok, null in zip(aware, inside.tolist(), nulls.tolist(), strict=True)
    ]
    return None, raw


def _inputs(table: pa.Table, task: str, n_classes: int) -> tuple[np.ndarray | None, str]:
    """The logits as (N, K) float64 or the scores as (N,); None when a row is null or ragged
    (the item-by-item path names it). Returns the column's name too."""
    name = "logits" if task == Task.MULTICLASS else "score"
    other = "score" if task == Task.MULTICLASS else "logits"
    if other in table.column_names:
        raise refused(other, f"a {task} contract takes {name}, not {other}")
    _required(table, [name])
    column = table.column(name)
    if task != Task.MULTICLASS:
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            raise refused(name, f"expected a numeric column, got {type_name(column.type)}")
        if column.null_count:
            return None, name
        return column.to_numpy().astype(np.float64), name
    kind = column.type
    if not (
        pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)
    ):
        raise refused(
            name, f"expected a fixed-size list of K = {n_classes} numbers, got {type_name(kind)}"
        )
    values = kind.value_type
    if not (pa.types.is_floating(values) or pa.types.is_integer(values)):
        raise refused(name, f"expected numbers in the lists, got {type_name(values)}")
    if pa.types.is_fixed_size_list(kind) and kind.list_size != n_classes:
        raise refused(
            name, f"expected K = {n_classes} numbers per row, the list size is {kind.list_size}"
        )
    combined = column.combine_chunks()
    if combined.null_count or combined.flatten().null_count:
        return None, name
    if not pa.types.is_fixed_size_list(kind):
        lengths = combined.value_lengths().to_numpy(zero_copy_only=False)
        if (lengths != n_classes).any():
            return None, name
    flat = combined.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
    return flat.reshape(len(combined), n_classes), name


def _cohorts(table: pa.Table, keys: list[str]) -> list[dict[str, Any]]:
    """Each row's cohort from the key columns (a null leaves the key out)."""
    n = table.num_rows
    if not keys:
        return [{} for _ in range(n)]
    columns = [_strings(table, k).to_pylist() for k in keys]
    by_values: dict[tuple[Any, ...], dict[str, Any]] = {}
    out = []
    for values in zip(*columns, strict=True):
        cohort = by_values.get(values)
        if cohort is None:
            cohort = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
            by_values[values] = cohort
        out.append(cohort)
    return out


def _cohort_columns_pass(table: pa.Table, keys: list[str]) -> bool:
    """Whether every row's cohort passes ``batches.check_cohort``, judged a key column at a
    time: at most ``cohorts.MAX_KEYS`` key columns, each named as a key may be, their values
    1-``cohorts.MAX_LENGTH`` characters without NUL, not ``cohorts.OTHER`` (a validated Arrow
    string holds no lone surrogate)."""
    if len(keys) > MAX_KEYS:
        return False
    for key in keys:
        if check_cohort({key: "v"}, "cohort", ErrorCollector(), None) is None:
            return False
        values = pc.unique(_strings(table, key).combine_chunks()).drop_null()
        if not len(values):
            continue
        lengths = pc.min_max(pc.utf8_length(values)).as_py()
        if lengths["min"] < 1 or lengths["max"] > MAX_LENGTH:
            return False
        if pc.any(pc.match_substring(values, "\x00")).as_py():
            return False
        if pc.any(pc.equal(values, OTHER)).as_py():
            return False
    return True


def predictions_from_arrow(
    table: pa.Table, *, task: str, n_classes: int, now: datetime
) -> PredictionBatch:
    """Validate a prediction table (see the module docstring); ``ValidationFailed`` naming the
    column, or each bad row and field as a JSON batch would."""
    _required(table, ["id", "ts"])
    keys = [n for n in table.column_names if n not in _PREDICTION_COLUMNS]
    ids = _strings(table, "id").to_pylist()
    inputs, name = _inputs(table, task, n_classes)
    stamps, raw_ts = _stamps(table)
    cohorts = _cohorts(table, keys)
    if inputs is not None and stamps is not None and _cohort_columns_pass(table, keys):
        batch = prediction_columns(ids, stamps, cohorts, inputs, task, now, cohorts_checked=True)
        if batch is not None:
            return batch
    found = RowProblems("predictions")
    found.ids(ids, 0)
    found.stamps(raw_ts, now, 1)
    found.cohorts(cohorts, 2)
    column = table.column(name)
    problems = (
        logit_problems(column, n_classes) if task == Task.MULTICLASS else score_problems(column)
    )
    found.values(name, problems, 3)
    found.raise_if_any("the predictions batch has invalid items; nothing was written")
    # The row checks hold the rules of the fast checks: should they ever disagree, the
    # item-by-item path decides.
    rows = column.to_pylist()
    items = [
        _item(
            ("id", ids[i]),
            ("ts", _text(raw_ts[i])),
            ("cohort", cohorts[i] or None),
            (name, rows[i]),
        )
        for i in range(table.num_rows)
    ]
    return parse_predictions(items, task=task, n_classes=n_classes, now=now)


def _item(*fields: tuple[str, Any]) -> dict[str, Any]:
    """A JSON item of the fields that are not null."""
    return {k: v for k, v in fields if v is not None}


def _text(value: Any) -> Any:
    return format_timestamp(value) if isinstance(value, datetime) else value


def labels_from_arrow(
    table: pa.Table, *, index_of: Mapping[str, int], n_classes: int, now: datetime
) -> LabelBatch:
    """Validate a label table (``id``, ``label``, ``ts``) against the class names and indices
    some contract version of the model knows (``label_classes.known_labels``);
    ``ValidationFailed`` naming the column, or each bad row and field as a JSON batch would."""
    _required(table, list(_LABEL_COLUMNS))
    extra = [n for n in table.column_names if n not in _LABEL_COLUMNS]
    if extra:
        raise refused(extra[0], "unexpected column (labels take id, label and ts)")
    ids = _strings(table, "id").to_pylist()
    label = _decoded(table.column("label"))
    if not (pa.types.is_integer(label.type) or is_text(label.type)):
        raise refused(
            "label", f"expected class indices or class names, got {type_name(label.type)}"
        )
    raw_labels = label.to_pylist()
    stamps, raw_ts = _stamps(table)
    batch = label_columns(ids, raw_labels, stamps, index_of, n_classes, now)
    if batch is not None:
        return batch
    found = RowProblems("labels")
    found.ids(ids, 0)
    found.values("label", label_problems(raw_labels, index_of, n_classes), 1)
    found.stamps(raw_ts, now, 2)
    found.raise_if_any("the labels batch has invalid items; nothing was written")
    items = [
        _item(("id", ids[i]), ("label", raw_labels[i]), ("ts", _text(raw_ts[i])))
        for i in range(table.num_rows)
    ]
    return parse_labels(items, index_of=index_of, n_classes=n_classes, now=now)
