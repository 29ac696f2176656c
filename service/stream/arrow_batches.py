"""Prediction and label batches sent as an Apache Arrow IPC stream, checked by the JSON rules.

``arrow_stream`` reads the body into a table. Predictions: ``id`` (string), ``ts`` (timestamp
with a time zone, or RFC 3339 strings), then ``logits`` (a fixed-size list of K numbers; a
variable list whose rows all hold K numbers is taken too) for a multiclass contract or ``score``
(a number in [0, 1]) for a binary one, and any further column is a cohort key of string values
(a null is the key absent from that row's cohort). Labels: ``id``, ``label`` (class index or
class name), ``ts``. Dictionary-encoded columns are decoded first.

The columns are converted without building an object per item and go through the checks of a
JSON batch's columns (``column_checks``); the rows they flag are named, as JSON items (a null is
the field absent), by the declaration, as a JSON batch's are (``predictions[3].ts``). A column
of the wrong type, or a missing or unexpected column, is refused whole, naming the column.
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
from service.stream.arrow_stream import is_text, refused, type_name
from service.stream.cohorts import MAX_KEYS, MAX_LENGTH, OTHER, parse_cohort
from service.stream.column_checks import (
    LabelBatch,
    PredictionBatch,
    SentLabels,
    SentPredictions,
    check_labels,
    check_predictions,
)

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


def _stamps(table: pa.Table) -> tuple[list[datetime | None], list[Any]]:
    """``(parsed, raw)``: the ``ts`` column as aware UTC datetimes (None where a value is null,
    out of ``datetime``'s range or does not parse) and per row as sent: None for a null, an
    aware datetime, or text (RFC 3339 or not; ``out of range`` beyond ``datetime``'s range)."""
    column = _decoded(table.column("ts"))
    if is_text(column.type):
        raw = column.to_pylist()
        return [parse_timestamp(t) for t in raw], raw
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
        return aware, aware  # type: ignore[return-value]
    raw = [
        None if null else (t if ok else "out of range")
        for t, ok, null in zip(aware, inside.tolist(), nulls.tolist(), strict=True)
    ]
    return [t if isinstance(t, datetime) else None for t in raw], raw


def _inputs(
    table: pa.Table, task: str, n_classes: int
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """The logits as (N, K) float64 or the scores as (N,), with the rows that are null or not K
    numbers marked unreadable (NaN; None: every row is readable). Returns the column's name
    too."""
    name = "logits" if task == Task.MULTICLASS else "score"
    other = "score" if task == Task.MULTICLASS else "logits"
    if other in table.column_names:
        raise refused(other, f"a {task} contract takes {name}, not {other}")
    _required(table, [name])
    column = table.column(name)
    if task != Task.MULTICLASS:
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            raise refused(name, f"expected a numeric column, got {type_name(column.type)}")
        if not column.null_count:
            return column.to_numpy().astype(np.float64), None, name
        scores = column.cast(pa.float64()).fill_null(np.nan).to_numpy()
        return scores, ~column.is_null().to_numpy(zero_copy_only=False), name
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
    fixed = pa.types.is_fixed_size_list(kind)
    lengths = None if fixed else combined.value_lengths().to_numpy(zero_copy_only=False)
    full = lengths is None or bool((lengths == n_classes).all())
    if full and not combined.null_count and not combined.flatten().null_count:
        flat = combined.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
        return flat.reshape(len(combined), n_classes), None, name
    return (*_ragged_logits(combined, n_classes), name)


def _ragged_logits(combined: pa.Array, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """A list column of logits with null rows, null values or rows not of K values: (N, K)
    float64, NaN in the rows not readable as K numbers, and the readable rows."""
    nulls = combined.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_list(combined.type):
        lengths = np.full(len(combined), combined.type.list_size)
    else:
        lengths = combined.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    full = ~nulls & (lengths == n_classes)
    values = combined.filter(pa.array(full)).flatten()
    absent = values.is_null().to_numpy(zero_copy_only=False).reshape(-1, n_classes)
    logits = values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
    readable = full.copy()
    readable[full] = ~absent.any(axis=1)
    inputs = np.full((len(combined), n_classes), np.nan)
    inputs[full] = logits.reshape(-1, n_classes)
    inputs[~readable] = np.nan
    return inputs, readable


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
    """Whether every row's cohort passes ``cohorts.parse_cohort``, judged a key column at a
    time: at most ``cohorts.MAX_KEYS`` key columns, each named as a key may be, their values
    1-``cohorts.MAX_LENGTH`` characters without NUL, not ``cohorts.OTHER`` (a validated Arrow
    string holds no lone surrogate)."""
    if len(keys) > MAX_KEYS:
        return False
    for key in keys:
        if parse_cohort({key: "v"}, "cohort", ErrorCollector(), None) is None:
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
    inputs, readable, name = _inputs(table, task, n_classes)
    stamps, raw_ts = _stamps(table)
    cohorts = _cohorts(table, keys)
    column = table.column(name)

    def item(row: int) -> dict[str, Any]:
        return _item(
            ("id", ids[row]),
            ("ts", _text(raw_ts[row])),
            ("cohort", cohorts[row] or None),
            (name, column[row].as_py()),
        )

    return check_predictions(
        SentPredictions(ids, stamps, cohorts, inputs, readable),
        item,
        task=task,
        n_classes=n_classes,
        now=now,
        cohorts_checked=_cohort_columns_pass(table, keys),
    )


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

    def item(row: int) -> dict[str, Any]:
        return _item(("id", ids[row]), ("label", raw_labels[row]), ("ts", _text(raw_ts[row])))

    return check_labels(
        SentLabels(ids, raw_labels, stamps),
        item,
        index_of=index_of,
        n_classes=n_classes,
        now=now,
    )
