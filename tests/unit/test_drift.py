"""Drift measures, the policy and the status rule."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from service.calibration import (
    CalibrationInputError,
    Drift,
    DriftPolicy,
    Reading,
    assess_drift,
    binary_reading,
    default_edges,
    multiclass_reading,
    population_stability_index,
    total_variation,
)

RNG = np.random.default_rng(11)
Z = RNG.normal(scale=2.0, size=(400, 3))
Y = Z.argmax(axis=1)
BASE = multiclass_reading(Z, Y, default_edges(10))
POLICY = DriftPolicy(max_ece=0.1, max_ece_increase=0.05, min_labeled=50)


def reading_with(ece, lo, hi, n=400):
    return dataclasses.replace(BASE, ece=ece, ece_ci=(lo, hi), n=n)


def test_psi_and_tv_by_hand():
    e, a = [50, 30, 20], [30, 30, 40]
    pe, pa = np.array(e) / 100, np.array(a) / 100
    eps = 1e-4
    pe, pa = (pe + eps) / (1 + 3 * eps), (pa + eps) / (1 + 3 * eps)
    assert population_stability_index(e, a) == pytest.approx(
        float(((pa - pe) * np.log(pa / pe)).sum())
    )
    assert population_stability_index(e, e) == 0.0
    assert math.isfinite(population_stability_index([10, 0], [0, 10]))
    assert total_variation([1, 1], [3, 1]) == pytest.approx(0.25)
    assert total_variation([5, 5, 0], [5, 5, 0]) == 0.0
    with pytest.raises(CalibrationInputError):
        population_stability_index([0, 0], [1, 1])
    with pytest.raises(CalibrationInputError):
        total_variation([1, 2], [1, 2, 3])


def test_policy_from_dict():
    p = DriftPolicy.from_dict({"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 100})
    assert p == DriftPolicy(0.1, 0.05, 100) and p.costs is None
    assert DriftPolicy.from_dict(p.to_dict()) == p
    q = DriftPolicy.from_dict({**p.to_dict(), "c_fp": 1, "c_fn": 4})
    assert q.costs == (1.0, 4.0) and json.loads(json.dumps(q.to_dict())) == q.to_dict()


@pytest.mark.parametrize(
    ("d", "field"),
    [
        ({"max_ece": 0.1, "max_ece_increase": 0.05}, "policy.min_labeled"),
        ({"max_ece": -0.1, "max_ece_increase": 0.05, "min_labeled": 1}, "policy.max_ece"),
        (
            {"max_ece": 0.1, "max_ece_increase": float("nan"), "min_labeled": 1},
            "policy.max_ece_increase",
        ),
        ({"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 1.5}, "policy.min_labeled"),
        ({"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": True}, "policy.min_labeled"),
        ({"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": -1}, "policy.min_labeled"),
        ({"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 1, "c_fp": 1}, "policy.c_fn"),
        (
            {"max_ece": 0.1, "max_ece_increase": 0.05, "min_labeled": 1, "window": "1h"},
            "policy.window",
        ),
        ({"max_ece": "0.1", "max_ece_increase": 0.05, "min_labeled": 1}, "policy.max_ece"),
    ],
)
def test_policy_validation(d, field):
    with pytest.raises(CalibrationInputError) as info:
        DriftPolicy.from_dict(d)
    assert info.value.field == field


def status_of(window, baseline=None):
    return assess_drift(
        window,
        baseline or reading_with(0.02, 0.01, 0.04),
        POLICY,
        refit_temperature=1.0,
        expected_accuracy=0.9,
    )


def test_insufficient_data_never_alerts():
    d = status_of(reading_with(0.9, 0.8, 0.95, n=49))
    assert d.status == "insufficient_data"
    assert "49" in d.reasons[0] and "50" in d.reasons[0]
    empty = multiclass_reading(np.zeros((0, 3)), np.zeros(0, int), default_edges(10))
    assert status_of(empty).status == "insufficient_data"
    assert math.isnan(status_of(empty).confidence_psi)


def test_alert_on_lower_bound_above_max_ece():
    d = status_of(reading_with(0.15, 0.11, 0.2))
    assert d.status == "alert"
    assert any("0.1100" in r and "max_ece 0.1000" in r for r in d.reasons)


def test_alert_on_lower_bound_increase():
    d = status_of(reading_with(0.09, 0.08, 0.1), baseline=reading_with(0.02, 0.01, 0.03))
    assert d.status == "alert"
    assert d.ece_delta == pytest.approx(0.07)
    assert "max_ece_increase 0.0500" in d.reasons[0]


def test_warn_on_point_estimates():
    d = status_of(reading_with(0.12, 0.09, 0.15), baseline=reading_with(0.08, 0.06, 0.1))
    assert d.status == "warn" and "ECE 0.1200 exceeds max_ece 0.1000" in d.reasons[0]
    d = status_of(reading_with(0.08, 0.06, 0.1), baseline=reading_with(0.02, 0.01, 0.03))
    assert d.status == "warn" and "max_ece_increase" in d.reasons[0]


def test_ok():
    d = status_of(reading_with(0.03, 0.01, 0.05))
    assert d.status == "ok" and d.reasons == ()


def test_shift_measures_and_serialisation():
    shifted = multiclass_reading(Z * 3.0, np.zeros(400, int), default_edges(10))
    d = assess_drift(shifted, BASE, POLICY, refit_temperature=None, expected_accuracy=None)
    assert d.confidence_psi > 0.1
    base_p = np.array(BASE.label_counts) / 400
    assert d.prevalence_shift == pytest.approx(0.5 * (abs(1 - base_p[0]) + base_p[1] + base_p[2]))
    same = assess_drift(BASE, BASE, POLICY, refit_temperature=1.0, expected_accuracy=0.8)
    assert same.confidence_psi == 0.0 and same.prevalence_shift == 0.0 and same.ece_delta == 0.0
    out = json.loads(json.dumps(d.to_dict()))
    assert set(out) == {f.name for f in dataclasses.fields(Drift)}
    assert out["refit_temperature"] is None and isinstance(out["reasons"], list)


def test_baseline_from_stored_json():
    stored = json.loads(json.dumps(BASE.to_dict()))
    again = Reading.from_dict(stored)
    assert again == BASE
    binary = binary_reading(
        RNG.random(100), RNG.integers(0, 2, 100), default_edges(), c_fp=1, c_fn=1
    )
    assert Reading.from_dict(json.loads(json.dumps(binary.to_dict()))) == binary
    with pytest.raises(CalibrationInputError) as info:
        Reading.from_dict({**stored, "bins": [{"lo": 0.0}]})
    assert info.value.field == "reading.bins[0]"


def test_mismatched_edges_or_tasks_are_refused():
    other = multiclass_reading(Z, Y, default_edges(7))
    with pytest.raises(CalibrationInputError):
        assess_drift(other, BASE, POLICY, refit_temperature=None, expected_accuracy=None)
    binary = binary_reading(RNG.random(10), RNG.integers(0, 2, 10), default_edges())
    with pytest.raises(CalibrationInputError):
        assess_drift(binary, BASE, POLICY, refit_temperature=None, expected_accuracy=None)
