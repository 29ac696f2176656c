"""Additive statistics: layout, addition rules and persistence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.calibration import (
    AUC_CELLS,
    CalibrationInputError,
    CalibrationStats,
    TemperatureCalibrator,
    binary_stats,
    combine_stats,
    default_edges,
    empty_stats,
    multiclass_stats,
    reading_from_stats,
)
from tests.unit.conftest import assert_close_tree

RNG = np.random.default_rng(7)
Z = RNG.normal(size=(50, 4))
Y = RNG.integers(0, 4, size=50)
S = RNG.random(50)
B = (RNG.random(50) < S).astype(int)


def test_multiclass_layout():
    st = multiclass_stats(Z, Y, default_edges(6))
    assert st.n == 50 and st.n_bins == 6 and st.n_classes == 4
    assert st.bin_count.dtype == np.int64 and st.bin_count.sum() == 50
    assert st.class_bin_count is not None and st.class_bin_count.shape == (4, 6)
    assert (st.class_bin_count.sum(axis=1) == 50).all()
    assert (st.class_bin_label_sum.sum(axis=1) == st.label_counts).all()
    assert st.confusion is None and st.threshold is None
    assert multiclass_stats(Z, Y, default_edges(6), classwise=False).class_bin_count is None


def test_binary_layout():
    st = binary_stats(S, B, default_edges(), threshold=0.3)
    assert st.threshold == 0.3 and st.class_bin_count is None
    assert st.positive_hist.shape == (AUC_CELLS,)
    assert st.positive_hist.sum() == st.label_counts[1] == B.sum()
    (tn, fp), (fn, tp) = st.confusion.tolist()
    assert tp == int(((S >= 0.3) & (B == 1)).sum()) and fn == int(((S < 0.3) & (B == 1)).sum())
    assert tn + fp == st.label_counts[0]
    assert st.correct_sum == tn + tp


def test_stats_are_read_only():
    st = multiclass_stats(Z, Y, default_edges())
    with pytest.raises(ValueError):
        st.bin_count[0] = 5
    with pytest.raises(AttributeError):
        st.n = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "st",
    [
        multiclass_stats(Z, Y, default_edges(), calibrator=TemperatureCalibrator(0.7)),
        multiclass_stats(Z, Y, default_edges(), classwise=False),
        binary_stats(S, B, default_edges(5), threshold=0.2),
        empty_stats("multiclass", default_edges(), 4),
        empty_stats("binary", default_edges(3)),
    ],
    ids=["multiclass", "no-classwise", "binary", "empty-multi", "empty-binary"],
)
def test_json_round_trip_is_exact(st):
    again = CalibrationStats.from_dict(json.loads(json.dumps(st.to_dict())))
    assert again.to_dict() == st.to_dict()
    assert_close_tree(reading_from_stats(again).to_dict(), reading_from_stats(st).to_dict(), 0.0)


def test_empty_stats_is_the_identity_of_addition():
    st = multiclass_stats(Z, Y, default_edges())
    zero = empty_stats("multiclass", default_edges(), 4)
    assert (st + zero).to_dict() == st.to_dict()
    b = binary_stats(S, B, default_edges(), threshold=0.4)
    assert (empty_stats("binary", default_edges(), threshold=0.4) + b).to_dict() == b.to_dict()


def test_combine_many_parts():
    parts = [
        multiclass_stats(Z[i : i + 10], Y[i : i + 10], default_edges()) for i in range(0, 50, 10)
    ]
    assert_close_tree(
        combine_stats(parts).to_dict(), multiclass_stats(Z, Y, default_edges()).to_dict()
    )
    with pytest.raises(CalibrationInputError):
        combine_stats([])


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (multiclass_stats(Z, Y, default_edges(10)), "stats.edges"),
        (multiclass_stats(Z[:, :3], Y % 3, default_edges()), "stats.n_classes"),
        (multiclass_stats(Z, Y, default_edges(), classwise=False), "stats.class_bin_count"),
        (binary_stats(S, B, default_edges()), "stats.task"),
    ],
)
def test_incompatible_addition_raises(other, field):
    with pytest.raises(CalibrationInputError) as info:
        multiclass_stats(Z, Y, default_edges()) + other
    assert info.value.field == field


def test_binary_threshold_mismatch_raises():
    with pytest.raises(CalibrationInputError) as info:
        binary_stats(S, B, default_edges(), threshold=0.5) + binary_stats(
            S, B, default_edges(), threshold=0.4
        )
    assert info.value.field == "stats.threshold"


def test_costs_must_match_the_threshold():
    st = binary_stats(S, B, default_edges(), threshold=0.5)
    with pytest.raises(CalibrationInputError) as info:
        reading_from_stats(st, costs=(1.0, 3.0))
    assert info.value.field == "costs"
    assert reading_from_stats(st, costs=(2.0, 2.0)).expected_cost is not None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n": 49}, "stats.n"),
        ({"bin_count": [1, 2]}, "stats.bin_count"),
        ({"nll_sum": None}, "stats.nll_sum"),
        ({"label_counts": [10, 10, 10, 19.5]}, "stats.label_counts"),
        ({"confusion": [[1, 0], [0, 1]]}, "stats.confusion"),
        ({"task": "regression"}, "stats.task"),
        ({"extra": 1}, "stats.extra"),
    ],
)
def test_from_dict_validates(change, field):
    d = multiclass_stats(Z, Y, default_edges()).to_dict()
    d.update(change)
    with pytest.raises(CalibrationInputError) as info:
        CalibrationStats.from_dict(d)
    assert info.value.field == field
