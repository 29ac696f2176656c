"""An Arrow batch's rows are judged as the same rows sent as JSON items: every problem named is
the one the declared item-by-item path names, in the same order, with the same totals, and a
batch accepted is the one it accepts.

Hypothesis draws small tables with a bad value, or a null, wherever one can go: ids, times (as
timestamps of any unit and as text), cohort key columns, logits (fixed-size and variable lists,
floats and integers) and scores, and labels (class indices and names).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.calibration._checks import MAX_ABS_LOGIT
from service.common.errors import ValidationFailed
from service.common.values import format_timestamp
from service.stream.arrow_batches import labels_from_arrow, predictions_from_arrow
from service.stream.batch_columns import parse_labels, parse_predictions
from service.stream.column_checks import parse_labels_declared, parse_predictions_declared

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
K = 3
INDEX_OF = {"a": 0, "b": 1, "c": 2}
GOOD_TIME = NOW - timedelta(hours=1)

IDS = st.one_of(
    st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True),
    st.sampled_from([None, "", " ", "a\x00b", "x" * 201, "\u2028"]),
)
TIMES = st.sampled_from(
    [
        GOOD_TIME,
        None,
        datetime(1999, 12, 31, 23, 59, tzinfo=UTC),
        NOW + timedelta(days=2),
        datetime(1, 1, 1, tzinfo=UTC),
        "beyond",
    ]
)
TEXT_TIMES = st.sampled_from(
    [format_timestamp(GOOD_TIME), None, "yesterday", "1999-01-01T00:00:00Z", "2026-11-30T11:00:00"]
)
COHORT_VALUES = st.sampled_from(["emea", "apac", None, "", "x" * 65, "__other__", "a\x00b"])
NUMBERS = st.one_of(
    st.floats(-MAX_ABS_LOGIT, MAX_ABS_LOGIT, allow_nan=False, width=32),
    st.sampled_from([None, math.nan, math.inf, -math.inf, MAX_ABS_LOGIT * 2, -MAX_ABS_LOGIT]),
)
LOGIT_ROWS = st.one_of(
    st.lists(NUMBERS, min_size=K, max_size=K), st.none(), st.lists(NUMBERS, max_size=K + 1)
)
SCORES = st.sampled_from([0.0, 0.25, 1.0, None, math.nan, math.inf, 1.5, -0.1])
LABELS = st.one_of(st.integers(-1, K + 1), st.sampled_from([None, "a", "c", "z"]))


def _timestamps(values: list[Any], unit: str) -> pa.Array:
    """Times as a timestamp column: ``beyond`` is a time past ``datetime``'s range."""
    per_second = {"s": 1, "ms": 10**3, "us": 10**6}[unit]
    native = [
        None
        if v is None
        else 300_000_000_000 * per_second
        if v == "beyond"
        else int((v - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * per_second
        for v in values
    ]
    return pa.array(native, pa.int64()).cast(pa.timestamp(unit, "UTC"))


def _raw_times(column: pa.Array) -> list[Any]:
    """The times as the item-by-item path is sent them: RFC 3339 text, or not a time."""
    if pa.types.is_string(column.type):
        return column.to_pylist()
    per_second = {"s": 1, "ms": 10**3, "us": 10**6}[column.type.unit]
    out: list[Any] = []
    for native in column.cast(pa.int64()).to_pylist():
        if native is None:
            out.append(None)
        elif native >= 253_402_300_800 * per_second:
            out.append("out of range")
        else:
            moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=native / per_second)
            out.append(format_timestamp(moment))
    return out


def _items(table: pa.Table, value_key: str) -> list[dict[str, Any]]:
    """The table's rows as JSON items: a null is a field left out."""
    keys = [n for n in table.column_names if n not in ("id", "ts", "logits", "score", "label")]
    ts = _raw_times(table.column("ts").combine_chunks())
    rows = table.drop_columns(["ts"]).to_pylist()
    items = []
    for row, time in zip(rows, ts, strict=True):
        cohort = {k: row[k] for k in keys if row[k] is not None}
        fields = {"id": row["id"], "ts": time, value_key: row[value_key], "cohort": cohort or None}
        items.append({k: v for k, v in fields.items() if v is not None})
    return items


def _outcome(call: Any) -> Any:
    try:
        batch = call()
    except ValidationFailed as exc:
        return (
            exc.message,
            [(d.field, d.message, d.item) for d in exc.details],
            exc.details_total,
            exc.items,
        )
    return batch


@st.composite
def prediction_tables(draw: st.DrawFn, task: str) -> pa.Table:
    n = draw(st.integers(1, 5))
    columns: dict[str, pa.Array] = {
        "id": pa.array(draw(st.lists(IDS, min_size=n, max_size=n)), pa.string())
    }
    if draw(st.booleans()):
        columns["ts"] = pa.array(draw(st.lists(TEXT_TIMES, min_size=n, max_size=n)), pa.string())
    else:
        unit = draw(st.sampled_from(["s", "ms", "us"]))
        columns["ts"] = _timestamps(draw(st.lists(TIMES, min_size=n, max_size=n)), unit)
    if task == "multiclass":
        rows = draw(st.lists(LOGIT_ROWS, min_size=n, max_size=n))
        kind = draw(st.sampled_from([pa.float64(), pa.float32(), pa.int64()]))
        if kind == pa.int64():
            rows = [
                None
                if r is None
                else [None if v is None or not math.isfinite(v) else int(v) for v in r]
                for r in rows
            ]
        fixed = all(r is None or len(r) == K for r in rows) and draw(st.booleans())
        columns["logits"] = pa.array(rows, pa.list_(kind, K) if fixed else pa.list_(kind))
    else:
        columns["score"] = pa.array(draw(st.lists(SCORES, min_size=n, max_size=n)), pa.float64())
    keys = draw(st.sampled_from([[], ["region"], ["region", "tier"], ["9bad"], ["__other__"]]))
    for key in keys:
        columns[key] = pa.array(draw(st.lists(COHORT_VALUES, min_size=n, max_size=n)), pa.string())
    return pa.table(columns)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=st.sampled_from(["multiclass", "binary"]), data=st.data())
def test_arrow_predictions_are_judged_as_the_same_json_items(
    task: str, data: st.DataObject
) -> None:
    table = data.draw(prediction_tables(task))
    value_key = "logits" if task == "multiclass" else "score"
    arrow = _outcome(lambda: predictions_from_arrow(table, task=task, n_classes=K, now=NOW))
    items = _outcome(
        lambda: parse_predictions(_items(table, value_key), task=task, n_classes=K, now=NOW)
    )
    if isinstance(items, tuple):
        assert arrow == items
    else:
        assert not isinstance(arrow, tuple), arrow
        assert (arrow.ids, arrow.ts, arrow.cohorts) == (items.ids, items.ts, items.cohorts)
        np.testing.assert_array_equal(arrow.inputs, items.inputs)


@st.composite
def label_tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(1, 5))
    labels = draw(st.lists(LABELS, min_size=n, max_size=n))
    named = draw(st.booleans())
    labels = [v for v in labels if v is None or isinstance(v, str) == named] or [None]
    n = len(labels)
    return pa.table(
        {
            "id": pa.array(draw(st.lists(IDS, min_size=n, max_size=n)), pa.string()),
            "label": pa.array(labels, pa.string() if named else pa.int64()),
            "ts": _timestamps(draw(st.lists(TIMES, min_size=n, max_size=n)), "ms"),
        }
    )


@settings(max_examples=300, deadline=None)
@given(table=label_tables())
def test_arrow_labels_are_judged_as_the_same_json_items(table: pa.Table) -> None:
    arrow = _outcome(lambda: labels_from_arrow(table, index_of=INDEX_OF, n_classes=K, now=NOW))
    items = _outcome(
        lambda: parse_labels(_items(table, "label"), index_of=INDEX_OF, n_classes=K, now=NOW)
    )
    assert arrow == items


def test_a_table_of_many_bad_rows_gets_the_declared_details_and_totals() -> None:
    """More problems than a reply lists: the details are the declaration's first, and the
    totals, counted from the columns, are the declaration's."""
    n = 600
    ids = [None if i % 3 == 0 else f"p{i}" for i in range(n)]
    times = [None if i % 5 == 0 else GOOD_TIME for i in range(n)]
    logits = [
        None if i % 7 == 0 else [math.nan if i % 2 else 0.0, 1.0, 2.0 * MAX_ABS_LOGIT * (i % 4)]
        for i in range(n)
    ]
    regions = [("" if i % 11 == 0 else "emea") if i % 2 else None for i in range(n)]
    table = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "ts": _timestamps(times, "ms"),
            "logits": pa.array(logits, pa.list_(pa.float64())),
            "region": pa.array(regions, pa.string()),
        }
    )
    arrow = _outcome(lambda: predictions_from_arrow(table, task="multiclass", n_classes=K, now=NOW))
    items = _items(table, "logits")
    declared = _outcome(
        lambda: parse_predictions_declared(items, task="multiclass", n_classes=K, now=NOW)
    )
    assert arrow == declared
    assert declared[2] > 100


def test_a_label_table_of_many_bad_rows_gets_the_declared_details_and_totals() -> None:
    n = 600
    table = pa.table(
        {
            "id": pa.array([None if i % 3 == 0 else f"p{i}" for i in range(n)], pa.string()),
            "label": pa.array([i % (K + 2) if i % 4 else None for i in range(n)], pa.int64()),
            "ts": _timestamps([None if i % 5 == 0 else GOOD_TIME for i in range(n)], "s"),
        }
    )
    arrow = _outcome(lambda: labels_from_arrow(table, index_of=INDEX_OF, n_classes=K, now=NOW))
    items = _items(table, "label")
    declared = _outcome(
        lambda: parse_labels_declared(items, index_of=INDEX_OF, n_classes=K, now=NOW)
    )
    assert arrow == declared
    assert declared[2] > 100
