"""Bucket deltas of a small batch against a hand computation."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.calibration.calibrators import TemperatureCalibrator, multiclass_probabilities
from service.calibration.packing import pack, unpack
from service.calibration.refit import multiclass_knot_sums
from service.calibration.stats import multiclass_stats
from service.contracts.model import Contract
from service.stream.bucket_store import BucketDelta
from service.stream.bucketing import (
    bucket_deltas,
    classwise_note,
    epoch_seconds,
    layout_of,
    merge_deltas,
    shares_bucket,
    stored_inputs,
)
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


def multiclass_contract(n_classes: int = 4, n_bins: int = 5) -> Contract:
    base = binary_contract(edges=tuple(np.linspace(0.0, 1.0, n_bins + 1)))
    spec = replace(
        base.spec,
        task="multiclass",
        classes=tuple(f"k{i}" for i in range(n_classes)),
        calibrator=TemperatureCalibrator(1.7),
    )
    return replace(base, spec=spec)


SLICE_LISTS = (["all"], ["all", "region=eu"], ["all", "region=us"], ["all", "a=1", "region=eu"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3 * 3600 - 1),
            st.sampled_from(range(len(SLICE_LISTS))),
            st.integers(-1, 3),
            st.lists(st.floats(-8, 8), min_size=4, max_size=4),
        ),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_each_bucket_equals_its_rows_computed_alone(rows: list, new: bool) -> None:
    contract = multiclass_contract()
    start = int(T0.timestamp())
    seconds = np.array([start + r[0] for r in rows], dtype=np.int64)
    slices = [SLICE_LISTS[r[1]] for r in rows]
    labels = np.array([r[2] for r in rows], dtype=np.int64)
    inputs = np.array([r[3] for r in rows], dtype=np.float64)
    got = bucket_deltas(
        contract, seconds=seconds, slices=slices, inputs=inputs, labels=labels, new=new
    )
    expected_keys = set()
    for i in range(len(rows)):
        for name in slices[i]:
            for resolution, step in (("5m", 300), ("1h", 3600)):
                bucket = datetime.fromtimestamp(seconds[i] // step * step, UTC)
                expected_keys.add((name, resolution, bucket, contract.id))
    assert set(got) == expected_keys
    probs = multiclass_probabilities(contract.calibrator, inputs)
    top = probs.max(axis=1)
    for (name, resolution, bucket, _), delta in got.items():
        step = 300 if resolution == "5m" else 3600
        mine = np.array(
            [
                name in s and t // step * step == bucket.timestamp()
                for s, t in zip(slices, seconds, strict=True)
            ]
        )
        lab = mine & (labels >= 0)
        assert delta.n_labeled == lab.sum()
        assert delta.n_predictions == (mine.sum() if new else 0)
        unlabeled = (mine & (labels < 0)) if new else lab
        sign = 1.0 if new else -1.0
        assert delta.unlabeled_expected_correct == pytest.approx(
            sign * top[unlabeled].sum(), abs=1e-12
        )
        assert delta.unlabeled_expected_square == pytest.approx(
            sign * (top[unlabeled] ** 2).sum(), abs=1e-12
        )
        if new:
            counts = np.histogram(top[mine], bins=contract.edges)[0]
            assert delta.confidence_counts.tolist() == counts.tolist()
        if not lab.any():
            assert delta.stats is None
            continue
        alone = np.hstack(
            [
                pack(
                    multiclass_stats(
                        inputs[lab],
                        labels[lab],
                        contract.edges,
                        calibrator=contract.calibrator,
                        classwise=True,
                    )
                ),
                multiclass_knot_sums(inputs[lab], labels[lab], temperature=1.7).ravel(),
            ]
        )
        assert np.allclose(delta.stats, alone, rtol=1e-12, atol=1e-12)


def one_item(contract: Contract, label: int) -> dict:
    """The deltas of one labeled prediction in two slices (a one-item request's)."""
    K = len(contract.spec.classes)
    return bucket_deltas(
        contract,
        seconds=epoch_seconds([T0]),
        slices=[["all", "region=eu"]],
        inputs=np.random.default_rng(K).normal(size=(1, K)) * 3,
        labels=np.array([label]),
        new=True,
    )


def test_a_one_item_batch_of_k_1000_and_100_bins_does_no_k_by_m_work() -> None:
    """K = 1,000 classes and M = 100 bins: each bucket delta holds 5 + 3 M + K statistics and
    the 111 knot sums, and computing them allocates less than a quarter of one K x M table of
    float64 (its class-wise tables alone would be three)."""
    K, M = 1000, 100
    contract = multiclass_contract(K, M)
    one_item(contract, 7)
    tracemalloc.start()
    try:
        got = one_item(contract, 7)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * K * M / 4
    assert len(got) == 4
    for delta in got.values():
        assert delta.stats.size == 5 + 3 * M + K + 111 == layout_of(contract).size
    stats = unpack(next(iter(got.values())).stats, layout_of(contract))
    assert not stats.classwise and stats.n == 1 and stats.label_counts[7] == 1
    assert "1,000 x 100 = 100,000" in classwise_note(contract)


@pytest.mark.parametrize("n_bins", [1, 15, 100])
def test_two_class_contracts_keep_their_class_wise_tables_at_every_bin_count(n_bins: int) -> None:
    contract = multiclass_contract(2, n_bins)
    assert layout_of(contract).classwise and classwise_note(contract) is None
    for delta in one_item(contract, 1).values():
        stats = unpack(delta.stats, layout_of(contract))
        assert stats.class_bin_count.shape == (2, n_bins)
        assert stats.class_bin_count.sum(axis=1).tolist() == [1, 1]
        assert stats.class_bin_label_sum.sum(axis=1).tolist() == [0, 1]


def test_a_contract_above_the_class_wise_limit_buckets_its_rows_computed_alone() -> None:
    contract = multiclass_contract(400, 5)
    rng = np.random.default_rng(3)
    inputs, labels = rng.normal(size=(30, 400)) * 2, rng.integers(-1, 400, 30)
    seconds = int(T0.timestamp()) + rng.integers(0, 3600, 30)
    got = bucket_deltas(
        contract, seconds=seconds, slices=[["all"]] * 30, inputs=inputs, labels=labels, new=True
    )
    lab = labels >= 0
    hour = got[("all", "1h", T0.replace(minute=0), contract.id)]
    alone = np.hstack(
        [
            pack(
                multiclass_stats(
                    inputs[lab],
                    labels[lab],
                    contract.edges,
                    calibrator=contract.calibrator,
                    classwise=False,
                )
            ),
            multiclass_knot_sums(inputs[lab], labels[lab], temperature=1.7).ravel(),
        ]
    )
    assert not layout_of(contract).classwise
    np.testing.assert_allclose(hour.stats, alone, rtol=1e-12, atol=1e-12)


def test_a_row_shares_its_bucket_only_with_rows_of_its_group_in_the_same_five_minutes() -> None:
    # Five minutes are 300 s: 0 and 299 share a bucket, 300 starts the next one.
    groups = ["a", "a", "a", "b", "b", "a"]
    seconds = np.array([0, 299, 300, 10, 900, 601], dtype=np.int64)
    assert shares_bucket(groups, seconds).tolist() == [True, True, False, False, False, False]
    assert shares_bucket([], np.zeros(0, dtype=np.int64)).tolist() == []
    assert shares_bucket(groups, seconds, at_least=3).tolist() == [False] * 6
    assert shares_bucket(["a"] * 3, np.array([1, 2, 3]), at_least=3).tolist() == [True] * 3
