"""The client's conversion of logged calls to Arrow columns, and the merging of calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from service.client.columns import merged, pending, record_batch

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _times(batch: pa.RecordBatch) -> list[datetime]:
    return batch.column("ts").to_pylist()


def test_logits_scores_times_and_cohorts_become_the_body_columns() -> None:
    logits = np.arange(6, dtype=np.float32).reshape(2, 3)
    batch = record_batch(pending("predictions", ["a", "b"], logits, T0, {"region": "emea"}))
    assert batch.schema.names == ["id", "logits", "ts", "region"]
    assert batch.column("logits").type == pa.list_(pa.float64(), 3)
    assert batch.column("logits").to_pylist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert _times(batch) == [T0, T0] and batch.column("region").to_pylist() == ["emea"] * 2

    scores = record_batch(pending("predictions", np.array([7, 8]), [0.1, 0.9], None, None))
    assert scores.schema.names == ["id", "score", "ts"]
    assert scores.column("id").to_pylist() == ["7", "8"]
    assert abs(_times(scores)[0] - datetime.now(UTC)) < timedelta(seconds=5)


@pytest.mark.parametrize(
    "ts",
    [
        [T0, T0 + timedelta(hours=1)],
        [T0.astimezone(timezone(timedelta(hours=3))), T0 + timedelta(hours=1)],
        np.array(["2026-11-01T12:00", "2026-11-01T13:00"], dtype="datetime64[s]"),
        pd.Series(pd.to_datetime(["2026-11-01T15:00+03:00", "2026-11-01T13:00Z"], utc=True)),
        [T0.replace(tzinfo=None), (T0 + timedelta(hours=1)).replace(tzinfo=None)],
    ],
    ids=["aware", "other-zone", "datetime64", "pandas", "naive-is-utc"],
)
def test_times_of_every_kind_are_utc_microseconds(ts: object) -> None:
    batch = record_batch(pending("predictions", ["a", "b"], [0.5, 0.5], ts, None))
    assert batch.column("ts").type == pa.timestamp("us", "UTC")
    assert _times(batch) == [T0, T0 + timedelta(hours=1)]


def test_merged_calls_keep_order_and_values() -> None:
    calls = [
        pending("predictions", ["a", "b"], np.ones((2, 3)), T0, {"lang": "tr"}),
        pending("predictions", ("c",), np.zeros((1, 3)), [T0], {"lang": np.array(["hu"])}),
        pending("labels", ["a"], ["x"], T0, None),
        pending("labels", np.array(["b", "c"]), np.array([1, 2]), None, None),
        pending("predictions", ["d"], [0.5], T0, None),
    ]
    out = merged(calls)
    # Labels by name and by index are separate columns types: not merged.
    kinds = [(p.kind, p.n) for p in out]
    assert kinds == [("predictions", 3), ("labels", 1), ("labels", 2), ("predictions", 1)]
    first = record_batch(out[0])
    assert first.column("id").to_pylist() == ["a", "b", "c"]
    assert first.column("lang").to_pylist() == ["tr", "tr", "hu"]
    assert first.column("logits").to_pylist() == [[1.0] * 3, [1.0] * 3, [0.0] * 3]
    assert _times(first) == [T0] * 3
    assert record_batch(out[1]).column("label").to_pylist() == ["x"]
    assert record_batch(out[2]).column("label").to_pylist() == [1, 2]
    both = merged([*calls[3:4], pending("labels", ["e"], [0], None, None)])
    assert [p.n for p in both] == [3] and record_batch(both[0]).column("id").to_pylist() == [
        "b",
        "c",
        "e",
    ]


def test_mismatched_lengths_are_refused_at_the_call() -> None:
    with pytest.raises(ValueError, match="logits_or_scores"):
        pending("predictions", ["a", "b"], np.zeros((3, 2)), None, None)
    with pytest.raises(ValueError, match="ts holds 1"):
        pending("predictions", ["a", "b"], [0.1, 0.2], [T0], None)
    with pytest.raises(ValueError, match="cohort"):
        pending("predictions", ["a", "b"], [0.1, 0.2], None, {"k": ["x"]})
    with pytest.raises(ValueError, match="labels holds"):
        pending("labels", ["a"], [1, 2], None, None)
