"""Stored bytes, canonical cohorts and in-batch repeats: what tells a duplicate from a conflict."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from service.common.errors import Conflict
from service.stream.batch_columns import PredictionBatch
from service.stream.idempotency import (
    canonical_cohort,
    dedupe_batch,
    distinct_cohorts,
    row_bytes,
)

TS = datetime(2026, 11, 30, 9, tzinfo=UTC)


def test_rows_are_stored_as_little_endian_float64() -> None:
    rows = row_bytes(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert rows == [np.array([1.0, 2.0], "<f8").tobytes(), np.array([3.0, 4.0], "<f8").tobytes()]
    assert row_bytes(np.array([0.25])) == [np.array([0.25], "<f8").tobytes()]


def test_cohorts_in_another_key_order_are_the_same_cohort() -> None:
    cohort_of, distinct = distinct_cohorts([{"b": "2", "a": "1"}, {"a": "1", "b": "2"}, {}])
    assert cohort_of == [0, 0, 1]
    assert distinct == [{"a": "1", "b": "2"}, {}]
    assert canonical_cohort({"b": "2", "a": "1"}) == '{"a":"1","b":"2"}'


def batch(ids: list[str]) -> PredictionBatch:
    return PredictionBatch(ids, [TS] * len(ids), [{}] * len(ids), np.zeros(len(ids)))


ROW = row_bytes(np.array([0.5]))[0]


def test_an_exact_repeat_in_the_batch_is_a_duplicate() -> None:
    contents = [(TS, 0, ROW), (TS, 1, ROW), (TS, 0, ROW)]
    keep, repeats = dedupe_batch(batch(["a", "b", "a"]), contents)
    assert (keep, repeats) == ([0, 1], 1)


@pytest.mark.parametrize(
    "changed",
    [
        (TS.replace(second=1), 0, ROW),
        (TS, 1, ROW),
        (TS, 0, row_bytes(np.array([0.25]))[0]),
    ],
    ids=["time", "cohort", "values"],
)
def test_a_repeat_differing_in_time_cohort_or_values_is_a_conflict(
    changed: tuple[datetime, int, bytes],
) -> None:
    with pytest.raises(Conflict):
        dedupe_batch(batch(["a", "a"]), [(TS, 0, ROW), changed])


def test_a_changed_repeat_in_the_batch_is_a_conflict_naming_both_items() -> None:
    with pytest.raises(Conflict) as info:
        dedupe_batch(batch(["a", "b", "a"]), [(TS, 0, ROW), (TS, 1, ROW), (TS, 2, ROW)])
    detail = info.value.details[0]
    assert (detail.field, detail.item, detail.message) == (
        "predictions[2].id",
        2,
        "conflicts with predictions[0]",
    )
