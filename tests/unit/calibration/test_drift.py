"""Drift measures, the policy and the status rule, with its error rates by simulation."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from service.calibration import (
    CalibrationInputError,
    DriftPolicy,
    ExpectedAccuracy,
    Reading,
    RefitEstimate,
    assess_drift,
    binary_reading,
    bins_inference,
    confidence_shift,
    default_edges,
    multiclass_reading,
    population_stability_index,
    reading_from_stats,
    total_variation,
)
from service.calibration.simulation import SCENARIOS
from service.calibration.stats import binary_stats, multiclass_stats

EDGES = default_edges(10)
RNG = np.random.default_rng(11)
Z, Y = SCENARIOS[("multiclass", 0.0)].draw(RNG, 2000)
BASE = multiclass_reading(Z, Y, EDGES)
BASE_EVIDENCE = bins_inference(BASE.bins)
POLICY = DriftPolicy(max_ece=0.1, max_ece_increase=0.05, min_labeled=50)


def reading_with(debiased, lo, hi, p=0.001, n=400):
    """The baseline's reading with the inference replaced (the plug-in ECE a bit above)."""
    return dataclasses.replace(
        BASE,
        ece=debiased + 0.01,
        ece_debiased=debiased,
        ece_ci=(lo, hi),
        calibration_p_value=p,
        n=n,
    )


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


def status_of(window, baseline=BASE, policy=POLICY):
    return assess_drift(window, baseline, policy, edges=EDGES)


def test_the_baseline_is_calibrated():
    assert BASE_EVIDENCE.debiased < 0.04 and BASE_EVIDENCE.upper < 0.06


def test_insufficient_data_never_alerts():
    d = status_of(reading_with(0.9, 0.8, 0.95, n=49))
    assert d.status == "insufficient_data"
    assert "49" in d.reasons[0] and "50" in d.reasons[0]
    empty = multiclass_reading(np.zeros((0, 3)), np.zeros(0, int), EDGES)
    three = multiclass_reading(Z[:, :3], Y % 3, EDGES)
    assert status_of(empty, three).status == "insufficient_data"
    assert status_of(empty, three).confidence_shift is None


def test_alert_when_the_interval_lies_above_max_ece():
    d = status_of(reading_with(0.15, 0.11, 0.2))
    assert d.status == "alert"
    assert any("[0.1100, 0.2000]" in r and "max_ece 0.1000" in r for r in d.reasons)


def test_alert_on_an_increase_beyond_both_intervals():
    lenient = dataclasses.replace(POLICY, max_ece=0.5)
    lower = BASE_EVIDENCE.upper + 0.06
    d = status_of(reading_with(lower + 0.005, lower, 0.3), policy=lenient)
    assert d.status == "alert" and "max_ece_increase 0.0500" in d.reasons[0]
    near = status_of(reading_with(lower, BASE_EVIDENCE.upper + 0.04, 0.3), policy=lenient)
    assert near.status != "alert"


def test_warn_needs_evidence_of_miscalibration():
    d = status_of(reading_with(0.12, 0.09, 0.19))
    assert d.status == "warn" and "debiased ECE 0.1200 exceeds max_ece 0.1000" in d.reasons[0]
    rise = BASE_EVIDENCE.debiased + 0.07
    d = status_of(reading_with(rise, 0.02, 0.15))
    assert d.status == "warn" and "max_ece_increase" in d.reasons[0]
    assert d.ece_debiased_delta == pytest.approx(0.07)
    unproven = status_of(reading_with(0.12, 0.0, 0.19, p=0.2))
    assert unproven.status == "ok"


def test_insufficient_when_the_interval_cannot_rule_out_twice_max_ece():
    d = status_of(reading_with(0.03, 0.0, 0.21, p=0.4))
    assert d.status == "insufficient_data" and "cannot tell" in d.reasons[0]


def test_ok():
    d = status_of(reading_with(0.03, 0.01, 0.05, p=0.3))
    assert d.status == "ok" and d.reasons == ()


def test_shift_measures_and_serialisation():
    shifted = multiclass_reading(Z * 3.0, np.zeros(2000, int), EDGES)
    d = assess_drift(
        shifted,
        BASE,
        POLICY,
        edges=EDGES,
        refit_temperature=RefitEstimate(1.2, 0.04, (1.1, 1.3), 2000, False),
        expected_accuracy=ExpectedAccuracy.of(100, 80.0, 65.0),
    )
    assert d.confidence_shift is not None
    assert d.confidence_shift.psi > 0.1 and d.confidence_shift.p_value < 1e-6
    base_p = np.array(BASE.label_counts) / 2000
    assert d.prevalence_shift == pytest.approx(0.5 * (abs(1 - base_p[0]) + base_p[1:].sum()))
    same = assess_drift(BASE, BASE, POLICY, edges=EDGES)
    assert same.confidence_shift is not None and same.confidence_shift.psi == 0.0
    assert same.confidence_shift.p_value == 1.0 and same.prevalence_shift == 0.0
    out = json.loads(json.dumps(d.to_dict()))
    assert out["refit_temperature"] == 1.2 and out["refit_temperature_ci"] == [1.1, 1.3]
    assert out["expected_accuracy"] == 0.8
    assert out["expected_accuracy_ci"] == pytest.approx(
        [0.8 - 1.959963984540054 * math.sqrt(15.0) / 100, 0.8 + 1.959963984540054 * 0.03873],
        abs=1e-5,
    )
    assert isinstance(out["reasons"], list) and out["status"] == d.status


def test_window_counts_of_all_predictions_drive_the_shift():
    counts = np.array([b.n for b in BASE.bins], dtype=float)
    full = np.zeros(EDGES.size - 1)
    for b in BASE.bins:
        full[round(b.lo * 10)] = b.n
    d = assess_drift(BASE, BASE, POLICY, edges=EDGES, confidence_counts=full * 3)
    assert d.confidence_shift is not None and d.confidence_shift.psi == pytest.approx(0.0)
    assert d.confidence_shift.no_shift == pytest.approx((counts.size - 1) * (1 / 2000 + 1 / 6000))
    with pytest.raises(CalibrationInputError):
        assess_drift(BASE, BASE, POLICY, edges=EDGES, confidence_counts=[1.0, 2.0])


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
    assert info.value.field == "reading.bins[0].hi"
    with pytest.raises(CalibrationInputError) as info:
        Reading.from_dict({**stored, "bins": [{**stored["bins"][0], "width": 1}]})
    assert info.value.field == "reading.bins[0].width"
    with pytest.raises(CalibrationInputError) as info:
        Reading.from_dict({**stored, "n": 10**400})
    assert info.value.field == "reading.n"


def test_a_stored_reading_without_the_inference_fields_gets_them_from_its_bins():
    stored = json.loads(json.dumps(BASE.to_dict()))
    for key in ("ece_debiased", "calibration_p_value", "mce_n"):
        del stored[key]
    again = Reading.from_dict(stored)
    assert again.ece_debiased == BASE_EVIDENCE.debiased
    assert again.calibration_p_value == BASE_EVIDENCE.p_value


def test_mismatched_edges_or_tasks_are_refused():
    other = multiclass_reading(Z, Y, default_edges(7))
    with pytest.raises(CalibrationInputError):
        assess_drift(other, BASE, POLICY, edges=EDGES)
    binary = binary_reading(RNG.random(10), RNG.integers(0, 2, 10), EDGES)
    with pytest.raises(CalibrationInputError):
        assess_drift(binary, BASE, POLICY, edges=EDGES)


def test_shift_test_holds_its_level_without_shift():
    rng = np.random.default_rng(5)
    scenario = SCENARIOS[("multiclass", 0.0)]
    edges = default_edges(15)
    rejected = 0
    for _ in range(200):
        base = multiclass_stats(*scenario.draw(rng, 1000), edges, classwise=False)
        window = multiclass_stats(*scenario.draw(rng, 200), edges, classwise=False)
        rejected += confidence_shift(base.bin_count, window.bin_count).p_value < 0.05
    assert rejected / 200 <= 0.09


DEFAULT = DriftPolicy(max_ece=0.05, max_ece_increase=0.02, min_labeled=200)


def statuses(task, true_ece, n, runs, seed):
    """Statuses of ``runs`` windows of ``n`` rows against a calibrated baseline of 2,000."""
    rng = np.random.default_rng(seed)
    edges = default_edges(15)

    def reading(scenario, rows):
        inputs, labels = scenario.draw(rng, rows)
        if task == "binary":
            return reading_from_stats(binary_stats(inputs, labels, edges))
        return reading_from_stats(multiclass_stats(inputs, labels, edges, classwise=False))

    baseline = reading(SCENARIOS[(task, 0.0)], 2000)
    window = SCENARIOS[(task, true_ece)]
    return [
        assess_drift(reading(window, n), baseline, DEFAULT, edges=edges).status for _ in range(runs)
    ]


@pytest.mark.parametrize("task", ["binary", "multiclass"])
@pytest.mark.parametrize("n", [200, 300, 1000])
def test_a_calibrated_model_is_rarely_flagged(task, n):
    got = statuses(task, 0.0, n, 150, seed=n)
    flagged = sum(s in ("warn", "alert") for s in got) / len(got)
    assert flagged <= 0.10
    assert got.count("alert") / len(got) <= 0.025


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_twice_max_ece_is_flagged_at_300_labels(task):
    got = statuses(task, 0.10, 300, 150, seed=9)
    assert sum(s in ("warn", "alert") for s in got) / len(got) >= 0.90
