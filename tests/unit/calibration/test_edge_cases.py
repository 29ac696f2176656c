"""Edge cases and input validation: every refusal names the offending field."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.calibration import (
    CalibrationInputError,
    IdentityCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    assign_bins,
    binary_reading,
    binary_stats,
    default_edges,
    log_softmax,
    logit,
    multiclass_probabilities,
    multiclass_reading,
    multiclass_stats,
    sigmoid,
    softmax,
    validate_edges,
)


def test_empty_bins_are_skipped():
    logits = np.array([[5.0, 0.0], [4.0, 0.0], [0.1, 0.0]])
    r = multiclass_reading(logits, [0, 1, 0], default_edges(10))
    assert [b.n for b in r.bins] == [1, 2]
    assert [b.lo for b in r.bins] == [0.5, 0.9]
    mean_conf_top = (1 / (1 + math.exp(-5)) + 1 / (1 + math.exp(-4))) / 2
    want = (1 / 3) * abs(1 / (1 + math.exp(-0.1)) - 1) + (2 / 3) * abs(mean_conf_top - 0.5)
    assert r.ece == pytest.approx(want, abs=1e-15)


def test_two_class_multiclass_matches_hand_values():
    r = multiclass_reading([[2.0, 0.0]], [1], default_edges(5))
    p0 = 1 / (1 + math.exp(-2.0))
    assert r.nll == pytest.approx(-math.log(1 - p0), abs=1e-14)
    assert r.brier == pytest.approx(2 * p0**2, abs=1e-14)
    assert r.accuracy == 0.0
    assert r.classwise_ece == pytest.approx(p0, abs=1e-14)


def test_single_row():
    r = multiclass_reading([[0.0, 1.0, 2.0]], [2], default_edges())
    p = softmax([[0.0, 1.0, 2.0]])[0]
    assert r.n == 1 and r.accuracy == 1.0
    assert r.ece == pytest.approx(1 - p[2], abs=1e-15)
    assert r.mce == r.ece and r.mce_n == 1
    assert math.isnan(r.mce_supported) and r.mce_supported_n is None
    assert len(r.bins) == 1 and r.bins[0].n == 1
    b = binary_reading([0.7], [1], default_edges())
    assert b.ece == pytest.approx(0.3, abs=1e-15)
    assert math.isnan(b.auc)
    assert b.to_dict()["auc"] is None


def test_all_correct_confident_predictions():
    logits = np.array([[40.0, 0.0, 0.0], [0.0, 40.0, 0.0], [0.0, 0.0, 40.0]])
    r = multiclass_reading(logits, [0, 1, 2], default_edges())
    assert r.accuracy == 1.0
    assert r.ece < 1e-15 and r.brier < 1e-15 and r.nll < 1e-15
    assert r.bins[-1].ci_upper == 1.0


def test_value_one_falls_in_last_bin_and_edges_are_left_closed():
    edges = default_edges(4)
    assert assign_bins([0.0, 0.25, 0.5, 0.75, 1.0], edges).tolist() == [0, 1, 2, 3, 3]
    assert assign_bins([np.nextafter(0.25, 0)], edges).tolist() == [0]
    assert assign_bins(np.array([[0.1, 0.9]]), edges).shape == (1, 2)


def test_zero_rows_give_nan_reading_with_null_json():
    r = multiclass_reading(np.zeros((0, 3)), np.zeros(0, dtype=int), default_edges())
    assert r.n == 0 and r.bins == () and math.isnan(r.ece)
    d = r.to_dict()
    assert d["ece"] is None and d["ece_ci"] == [None, None] and d["label_counts"] == [0, 0, 0]


def test_extreme_logits_are_stable():
    z = np.array([[1000.0, -1000.0, 0.0], [-1e300, 1e300, 0.0]])
    r = multiclass_reading(z, [1, 1], default_edges())
    assert math.isfinite(r.nll)
    assert r.nll == pytest.approx(1000.0, rel=1e-12)
    assert np.isfinite(log_softmax(z)).all()
    assert sigmoid([800.0, -800.0]).tolist() == [1.0, 0.0]
    assert logit([0.0, 1.0]).tolist() == pytest.approx(
        [math.log(1e-6 / (1 - 1e-6)), -math.log(1e-6 / (1 - 1e-6))]
    )


@pytest.mark.parametrize(
    ("logits", "labels", "field"),
    [
        ([[1.0, 0.0], [0.0, 1.0]], [0, 2], "labels"),
        ([[1.0, 0.0], [0.0, 1.0]], [0, -1], "labels"),
        ([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.5], "labels"),
        ([[1.0, 0.0], [0.0, 1.0]], [0, float("nan")], "labels"),
        ([[1.0, 0.0], [0.0, 1.0]], [0], "labels"),
        ([[1.0, 0.0], [0.0, 1.0]], [[0, 1]], "labels"),
        ([[1.0, 0.0], [0.0, 1.0]], ["a", "b"], "labels"),
        ([[1.0, float("nan")], [0.0, 1.0]], [0, 1], "logits"),
        ([[1.0, float("inf")], [0.0, 1.0]], [0, 1], "logits"),
        ([[1.0, -float("inf")], [0.0, 1.0]], [0, 1], "logits"),
        ([[1.0], [0.0]], [0, 0], "logits"),
        ([1.0, 0.0], [0, 0], "logits"),
        ([["x", "y"]], [0], "logits"),
    ],
)
def test_multiclass_input_errors(logits, labels, field):
    with pytest.raises(CalibrationInputError) as info:
        multiclass_stats(logits, labels, default_edges())
    assert info.value.field == field
    assert info.value.message


@pytest.mark.parametrize(
    ("scores", "labels", "field"),
    [
        ([0.2, 1.2], [0, 1], "scores"),
        ([-0.1, 0.5], [0, 1], "scores"),
        ([float("nan"), 0.5], [0, 1], "scores"),
        ([[0.2, 0.5]], [0, 1], "scores"),
        ([0.2, 0.5], [0, 2], "labels"),
        ([0.2, 0.5], [0, 1, 1], "labels"),
    ],
)
def test_binary_input_errors(scores, labels, field):
    with pytest.raises(CalibrationInputError) as info:
        binary_stats(scores, labels, default_edges())
    assert info.value.field == field


@pytest.mark.parametrize(
    "edges",
    [
        [0.0, 0.5, 0.5, 1.0],
        [0.0, 0.7, 0.3, 1.0],
        [0.1, 0.5, 1.0],
        [0.0, 0.5, 0.99],
        [0.0],
        [0.0, float("nan"), 1.0],
        [[0.0, 1.0]],
        "abc",
    ],
)
def test_bad_edges(edges):
    with pytest.raises(CalibrationInputError) as info:
        validate_edges(edges)
    assert info.value.field == "edges"


def test_single_bin_edges_are_valid():
    r = multiclass_reading([[1.0, 0.0], [0.0, 3.0]], [0, 0], [0, 1])
    assert len(r.bins) == 1 and r.mce == r.ece and math.isnan(r.mce_supported)
    big = multiclass_reading(np.tile([[1.0, 0.0], [0.0, 3.0]], (30, 1)), [0, 0] * 30, [0, 1])
    assert big.mce == big.mce_supported == big.ece and big.mce_supported_n == 60


def test_assign_bins_refuses_values_outside_unit_interval():
    with pytest.raises(CalibrationInputError) as info:
        assign_bins([0.5, 1.5], default_edges())
    assert info.value.field == "values"


@pytest.mark.parametrize("T", [0.0, -1.0, float("inf"), float("nan"), True])
def test_bad_temperature(T):
    with pytest.raises(CalibrationInputError) as info:
        TemperatureCalibrator(T)
    assert info.value.field == "calibrator.temperature"
    with pytest.raises(CalibrationInputError):
        softmax([[0.0, 1.0]], T)


def test_platt_is_binary_only():
    with pytest.raises(CalibrationInputError) as info:
        multiclass_probabilities(PlattCalibrator(1.0, 0.0), [[0.0, 1.0]])
    assert info.value.field == "calibrator.method"
    with pytest.raises(CalibrationInputError):
        multiclass_stats([[0.0, 1.0]], [0], default_edges(), calibrator=PlattCalibrator(1.0, 0.0))


def test_identity_binary_keeps_scores_and_clips_only_the_log_loss():
    r = binary_reading([0.0, 1.0], [1, 0], default_edges(), IdentityCalibrator())
    assert r.brier == 1.0
    assert r.nll == pytest.approx(-math.log(1e-6), rel=1e-9)
    assert r.mean_score == 0.5


def test_costs_must_come_in_pairs_and_set_the_threshold():
    with pytest.raises(CalibrationInputError) as info:
        binary_reading([0.2, 0.8], [0, 1], default_edges(), c_fp=1.0)
    assert info.value.field == "c_fn"
    r = binary_reading([0.2, 0.3, 0.8], [1, 0, 1], default_edges(), c_fp=1.0, c_fn=3.0)
    assert r.threshold == 0.25
    assert r.accuracy == 1 / 3
    assert r.expected_cost == pytest.approx((1.0 * 1 + 3.0 * 1) / 3)
    assert binary_reading([0.2, 0.3, 0.8], [1, 0, 1], default_edges()).expected_cost is None
