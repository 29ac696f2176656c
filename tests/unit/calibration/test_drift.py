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
from service.calibration.stats import multiclass_stats
from tests.support.rule_simulation import (
    baseline_levels,
    labels_to_alert,
    steady_onsets,
    views_of,
    window_statuses,
)
from tests.support.simulation import RowPool, scenario

EDGES = default_edges(10)
RNG = np.random.default_rng(11)
Z, Y = scenario("k10", "constant", 0.0).draw(RNG, 2000)
BASE = multiclass_reading(Z, Y, EDGES)
BASE_EVIDENCE = bins_inference(BASE.bins)
POLICY = DriftPolicy(max_ece=0.1, max_ece_increase=0.05, min_labeled=50)


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


def stream(shape, level, rows, seed, population="k10"):
    """A window of ``rows`` labeled rows in blocks of 25 after 600 rows of lookback: its
    reading and its detector views."""
    pool = RowPool(scenario(population, shape, level), np.random.default_rng([seed, 0]), 200_000)
    blocks = 24 + rows // 25
    n, c, k = pool.tables(np.random.default_rng(seed), blocks, 25)
    tables = views_of(pool, n, c, k)
    stats = reading_from_stats(_summed(pool, n[24:], c[24:], k[24:]))
    return stats, [(tables, 24)]


def _summed(pool, n, c, k):
    """Statistics of summed blocks with just the reliability tables a status needs."""
    from service.calibration.calibration_stats import empty_stats

    empty = empty_stats(pool.scenario.task, pool.scenario.edges, pool.scenario.population.classes)
    total = n.sum()
    return dataclasses.replace(
        empty,
        n=int(total),
        bin_count=n.sum(0).astype(np.int64),
        bin_confidence_sum=c.sum(0),
        bin_correct_sum=k.sum(0).astype(np.int64),
        label_counts=np.array([int(total)] + [0] * (len(empty.label_counts) - 1)),
    )


DEFAULT = DriftPolicy(max_ece=0.05, max_ece_increase=0.02, min_labeled=200)
CALM = multiclass_reading(
    *scenario("k10", "constant", 0.0).draw(np.random.default_rng(2), 3000), default_edges(15)
)


def judged(shape, level, rows, seed=1, policy=DEFAULT, baseline=CALM):
    window, views = stream(shape, level, rows, seed)
    return assess_drift(window, baseline, policy, edges=default_edges(15), views=views)


def test_insufficient_data_never_alerts():
    d = judged("overconfident", 2.0, 150)
    assert d.status == "insufficient_data"
    assert "150" in d.reasons[0] and "200" in d.reasons[0]
    empty = multiclass_reading(np.zeros((0, 3)), np.zeros(0, int), EDGES)
    three = multiclass_reading(Z[:, :3], Y % 3, EDGES)
    assert assess_drift(empty, three, POLICY, edges=EDGES).status == "insufficient_data"
    assert assess_drift(empty, three, POLICY, edges=EDGES).confidence_shift is None


def test_alert_when_the_sequential_evidence_shows_the_ece_above_max_ece():
    d = judged("overconfident", 2.0, 5000)
    assert d.status == "alert"
    assert "ECE above 0.0500" in d.reasons[0] and "max_ece 0.0500" in d.reasons[0]
    detectors = d.to_dict()["detectors"]
    assert detectors["alert"]["level"] == 0.05 and detectors["alert"]["value"] >= 9.0
    assert detectors["alert"]["rows"] > 0 and detectors["warn"]["level"] == 0.025


def test_warn_above_half_the_tolerance_without_an_alert():
    d = judged("overconfident", 1.0, 10_000)
    assert d.status == "warn" and "ECE above 0.0250" in d.reasons[0]


def test_an_increase_over_a_sharp_baseline_lowers_the_alert_level():
    lenient = DriftPolicy(max_ece=0.5, max_ece_increase=0.02, min_labeled=200)
    d = judged("overconfident", 2.0, 5000, policy=lenient)
    upper = bins_inference(CALM.bins).upper
    assert d.status == "alert"
    assert "the baseline's upper bound" in d.reasons[0] and f"{upper:.4f}" in d.reasons[0]
    assert d.to_dict()["detectors"]["alert"]["level"] == pytest.approx(upper + 0.02)


def test_insufficient_when_the_window_cannot_rule_out_twice_the_alert_level():
    d = judged("constant", 0.0, 300)
    assert d.status == "insufficient_data" and "cannot tell" in d.reasons[0]


def test_ok_on_a_calibrated_window():
    d = judged("constant", 0.0, 5000)
    assert d.status == "ok" and d.reasons == ()


def test_a_window_without_its_buckets_is_one_block():
    window, _ = stream("overconfident", 2.0, 20_000, seed=3)
    d = assess_drift(window, CALM, DEFAULT, edges=default_edges(15))
    assert d.status == "alert" and "latest 20000 labeled" in d.reasons[0]


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
    calibrated = scenario("k10", "constant", 0.0)
    edges = default_edges(15)
    rejected = 0
    for _ in range(200):
        base = multiclass_stats(*calibrated.draw(rng, 1000), edges, classwise=False)
        window = multiclass_stats(*calibrated.draw(rng, 200), edges, classwise=False)
        rejected += confidence_shift(base.bin_count, window.bin_count).p_value < 0.05
    assert rejected / 200 <= 0.09


# --- the error rates of the rule, seeded small versions of bench/bench_statistics.py -----------


@pytest.mark.parametrize(
    ("population", "shape"), [("beta25", "overconfident"), ("imbalanced", "alternating")]
)
@pytest.mark.parametrize("rows", [300, 3000])
def test_a_cohort_within_tolerance_rarely_warns_even_against_a_500_row_baseline(
    population, shape, rows
):
    rng = np.random.default_rng([len(population), rows])
    pool = RowPool(scenario(population, shape, 0.5), rng, 200_000)
    levels = baseline_levels(pool, rng, 500, 200, DEFAULT)
    got = window_statuses(pool, levels, rng, rows, DEFAULT)
    assert np.mean((got == "warn") | (got == "alert")) <= 0.05


@pytest.mark.parametrize(
    ("population", "shape"),
    [("beta25", "constant"), ("confident_k10", "constant"), ("k10", "one_bin")],
)
def test_a_cohort_at_max_ece_never_alerts_in_a_window(population, shape):
    rng = np.random.default_rng(11)
    pool = RowPool(scenario(population, shape, 1.0), rng, 200_000)
    levels = baseline_levels(pool, rng, 2000, 100, DEFAULT)
    got = window_statuses(pool, levels, rng, 3000, DEFAULT)
    assert np.mean(got == "alert") <= 0.01


def test_looks_are_counted_a_calibrated_cohort_streams_for_weeks_without_a_false_alarm():
    """Ten cohort-weeks at 300 labels an hour, every window re-decided every 5 minutes: no
    alert and no warn (a fresh 5% test per refresh warned every day)."""
    rng = np.random.default_rng(12)
    pool = RowPool(scenario("beta25", "constant", 0.0), rng, 200_000)
    levels = baseline_levels(pool, rng, 2000, 1, DEFAULT)[0]
    onsets = steady_onsets(pool, levels, rng, 10)
    assert sum(onsets.values()) == 0


@pytest.mark.parametrize(
    ("population", "shape"), [("confident_k10", "constant"), ("k10", "one_bin")]
)
def test_a_cohort_at_0_9_max_ece_does_not_alert_over_weeks(population, shape):
    rng = np.random.default_rng(13)
    pool = RowPool(scenario(population, shape, 0.9), rng, 200_000)
    levels = baseline_levels(pool, rng, 2000, 1, DEFAULT)[0]
    onsets = steady_onsets(pool, levels, rng, 10)
    assert sum(v for k, v in onsets.items() if k.startswith("alert")) == 0


def test_a_step_to_twice_max_ece_is_alerted_within_a_few_thousand_labels():
    rng = np.random.default_rng(14)
    before = RowPool(scenario("confident_k10", "constant", 0.0), rng, 200_000)
    after = RowPool(scenario("confident_k10", "overconfident", 2.0), rng, 200_000)
    levels = baseline_levels(before, rng, 2000, 1, DEFAULT)[0]
    labels = labels_to_alert(before, after, levels, rng, 40)
    assert (labels > 0).all()
    assert np.median(labels) <= 1000 and np.percentile(labels, 95) <= 3000
