"""Content digests, stored bytes and in-batch repeats: what tells a duplicate from a conflict."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from service.common.errors import Conflict
from service.stream.batches import PredictionBatch
from service.stream.idempotency import (
    canonical_cohort,
    content_digest,
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


def test_the_digest_covers_time_cohort_and_values() -> None:
    row = row_bytes(np.array([0.5]))[0]
    base = content_digest(TS, b"{}", row)
    assert len(base) == 32 and base == content_digest(TS, b"{}", row)
    assert base != content_digest(TS.replace(second=1), b"{}", row)
    assert base != content_digest(TS, b'{"a":"1"}', row)
    assert base != content_digest(TS, b"{}", row_bytes(np.array([0.25]))[0])


def batch(ids: list[str]) -> PredictionBatch:
    return PredictionBatch(ids, [TS] * len(ids), [{}] * len(ids), np.zeros(len(ids)))


def test_an_exact_repeat_in_the_batch_is_a_duplicate() -> None:
    keep, repeats = dedupe_batch(batch(["a", "b", "a"]), [b"1", b"2", b"1"])
    assert (keep, repeats) == ([0, 1], 1)


def test_a_changed_repeat_in_the_batch_is_a_conflict_naming_both_items() -> None:
    with pytest.raises(Conflict) as info:
        dedupe_batch(batch(["a", "b", "a"]), [b"1", b"2", b"3"])
    detail = info.value.details[0]
    assert (detail.field, detail.item, detail.message) == (
        "predictions[2].id",
        2,
        "conflicts with predictions[0]",
    )
