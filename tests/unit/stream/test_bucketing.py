"""Bucket deltas of a small batch against a hand computation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from service.contracts.model import Contract
from service.stream.bucket_store import BucketDelta
from service.stream.bucketing import bucket_deltas, epoch_seconds, merge_deltas, stored_inputs
from tests.unit.stream.conftest import binary_contract

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
FIVE = timedelta(minutes=5)


def deltas(contract: Contract, labels: list[int], *, new: bool) -> dict:
    seconds = epoch_seconds([T0, T0 + timedelta(seconds=60), T0 + timedelta(seconds=400)])
    return bucket_deltas(
        contract,
        seconds=seconds,
        slices=[["all", "region=eu"], ["all"], ["all"]],
        inputs=np.array([0.8, 0.3, 0.6]),
        labels=np.array(labels, dtype=np.int64),
        new=new,
    )


def test_new_predictions_count_in_their_5_minute_and_hour_buckets(contract: Contract) -> None:
    got = deltas(contract, [1, -1, 0], new=True)
    hour = T0.replace(minute=0)
    counts = {key[:3]: (d.n_predictions, d.n_labeled) for key, d in got.items()}
    assert counts == {
        ("all", "5m", T0): (2, 1),
        ("all", "5m", T0 + FIVE): (1, 1),
        ("region=eu", "5m", T0): (1, 1),
        ("all", "1h", hour): (3, 2),
        ("region=eu", "1h", hour): (1, 1),
    }
    assert {key[3] for key in got} == {contract.id}
    # The one unlabeled row (score 0.3, predicted negative) is right with probability 0.7.
    first = got[("all", "5m", T0, contract.id)]
    assert first.unlabeled_expected_correct == pytest.approx(0.7)
    assert first.unlabeled_expected_square == pytest.approx(0.49)
    # Confidence bins [0, 0.5) and [0.5, 1]: scores 0.8 and 0.3 in the first bucket.
    assert first.confidence_counts.tolist() == [1.0, 1.0]
    assert got[("all", "1h", hour, contract.id)].confidence_counts.tolist() == [1.0, 2.0]
    assert first.stats is not None and np.isfinite(first.stats).all()


def test_labels_of_stored_predictions_move_out_of_the_unlabeled_sums(contract: Contract) -> None:
    got = deltas(contract, [1, 0, -1], new=False)
    first = got[("all", "5m", T0, contract.id)]
    assert (first.n_predictions, first.n_labeled) == (0, 2)
    # Rows 0.8 (right with 0.8) and 0.3 (right with 0.7) leave the unlabeled sums.
    assert first.unlabeled_expected_correct == pytest.approx(-1.5)
    assert first.confidence_counts is None
    later = got[("all", "5m", T0 + FIVE, contract.id)]
    assert (later.n_labeled, later.stats) == (0, None)


def test_the_hour_bucket_is_the_sum_of_its_5_minute_buckets(contract: Contract) -> None:
    got = deltas(contract, [1, 0, 1], new=True)
    fine = [d for key, d in got.items() if key[0] == "all" and key[1] == "5m"]
    hour = next(d for key, d in got.items() if key[0] == "all" and key[1] == "1h")
    key = ("s", "5m", T0, "c")
    summed = merge_deltas(merge_deltas({}, {key: fine[0]}), {key: fine[1]})
    total = summed[key]
    assert total.n_predictions == hour.n_predictions == 3
    assert np.allclose(total.stats, hour.stats)
    assert np.allclose(total.confidence_counts, hour.confidence_counts)


def test_costs_set_the_threshold_of_expected_correctness() -> None:
    # c_fp / (c_fp + c_fn) = 0.75: a score of 0.6 is predicted negative, right with 0.4.
    contract = binary_contract(c_fp=3.0, c_fn=1.0)
    assert contract.threshold == 0.75
    got = bucket_deltas(
        contract,
        seconds=epoch_seconds([T0]),
        slices=[["all"]],
        inputs=np.array([0.6]),
        labels=np.array([-1]),
        new=True,
    )
    assert got[("all", "5m", T0, contract.id)].unlabeled_expected_correct == pytest.approx(0.4)


def test_no_rows_no_deltas(contract: Contract) -> None:
    empty = np.array([], dtype=np.int64)
    got = bucket_deltas(contract, seconds=empty, slices=[], inputs=empty, labels=empty, new=True)
    assert got == {}
    assert merge_deltas({}, {}) == {}


def test_epoch_seconds_floor_and_stored_inputs_round_trip(contract: Contract) -> None:
    assert epoch_seconds([datetime(1970, 1, 1, 0, 0, 1, 999_999, tzinfo=UTC)]).tolist() == [1]
    blobs = [np.array([0.25], "<f8").tobytes(), np.array([0.5], "<f8").tobytes()]
    assert stored_inputs(contract, blobs).tolist() == [0.25, 0.5]
    assert BucketDelta().stats is None
